// Parses the migration stream QEMU writes (`migrate` to a socket or fd) in one forward pass.
//
// RAM pages are handed to a MigrationStreamHandler as they arrive, straight from the input buffer, so a whole
// guest streams into a checkpoint writer without being held in memory. Everything else a restore needs is kept
// in a SavedVmState: the configuration record, the RAMBlock list, the device state and the VM description.
//
// Supported: stream version 3; the configuration record (with the target-page-bits and capabilities
// subsections); RAM section START/PART/END with MEM_SIZE, PAGE, ZERO, EOS and CONTINUE records, CONTINUE
// carried across sections; commands OPEN_RETURN_PATH, PING and POSTCOPY_ADVISE; device FULL sections (kept
// whole, not parsed); EOF; VMDESC. Rejected with an unsupported Status naming the capability to turn off:
// XBZRLE, compression, multifd, RDMA hooks, other iterative sections (block migration, dirty bitmaps).
//
// Scan-order tracking (the background-snapshot working-set signal): QEMU saves pages in one scan over the
// RAMBlocks in list order, ascending within each block. Under `background-snapshot` a guest write to a page not
// yet saved makes QEMU save that page next and continue its scan from it. So for every record the reader
// computes where a plain scan would have gone: the first page not yet seen after the previous record's page
// (wrapping around once past the last block). A record elsewhere is a jump, and its page is one the guest wrote
// during the save; out_of_order_pages() lists them in arrival order. The pages that follow a jump are the scan
// continuing and are not flagged. For a stopped guest the list is empty. (Meaningful for single-pass streams:
// a live precopy migration resends pages, which are counted as duplicates.)
#ifndef HALITE_QEMU_QEMU_STREAM_READER_H_
#define HALITE_QEMU_QEMU_STREAM_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "halite/qemu/qemu_stream_input.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/status.h"

namespace halite::qemu {

// One RAM page record as it arrived.
struct PageRecord {
  PageId id;                 // block index into ram_blocks, page index within the block
  const RamBlockInfo* block; // valid during the callback
  uint64_t offset;           // byte offset within the block (id.page * kTargetPageSize)
  bool is_zero;              // a ZERO record: every byte of the page equals `fill` (0 in practice)
  uint8_t fill;
  const uint8_t* data;       // kTargetPageSize bytes for a PAGE record, nullptr for ZERO; valid during the call
  uint64_t sequence;         // 0-based arrival index among page records
  bool duplicate;            // the page was already delivered earlier in this stream (a later version)
  bool out_of_scan_order;    // a jump in QEMU's scan: the guest wrote this page during a background snapshot
};

// Receives the stream's RAM as it is parsed. Called on the thread running Run(); a non-ok Status stops the
// parse and is returned by Run() unchanged.
class MigrationStreamHandler {
 public:
  virtual ~MigrationStreamHandler() = default;
  // The configuration record's machine type (e.g. "pc-i440fx-7.2"), once, before the RAMBlock list.
  virtual Status OnConfiguration(const std::string& machine_type) { return Status::Ok(); }
  // The RAMBlock list, once, before any page.
  virtual Status OnRamBlocks(const std::vector<RamBlockInfo>& blocks) { return Status::Ok(); }
  virtual Status OnPage(const PageRecord& page) = 0;
};

// Limits on what a stream can make the reader allocate. A stream from a QEMU whose guest may be hostile is
// untrusted input: every size it announces is checked against these before anything is sized by it.
//
// The RAM a stream may announce (its MEM_SIZE total: every RAMBlock's used length summed). The reader keeps one
// bit a 4 KiB page (32 MiB for 1 TiB of RAM), so this bounds its largest allocation. 2^31 pages (8 TiB) is the
// most a checkpoint holds (format-spec/checkpoint-format.md section 6, "total pages").
inline constexpr uint64_t kMaxStreamRamBytes = uint64_t{1} << 43;
// RAMBlocks in one MEM_SIZE list (QEMU creates a few dozen).
inline constexpr size_t kMaxStreamRamBlocks = 4096;

struct MigrationStreamReaderOptions {
  std::string stream_name = "migration stream";  // prefixes every error
  // At most this much RAM may be announced (see kMaxStreamRamBytes, which also caps this value). Set it to
  // what the source says its guest has when that is known: SaveFromQemu uses the total of `info ramblock`.
  uint64_t max_ram_bytes = kMaxStreamRamBytes;
  // Keep every page record's PageId in arrival order (16 bytes a record), for at most twice as many records as
  // the stream announced pages (a live precopy resends pages; a stream of endless resends must not grow the
  // list without bound). Past that, recording stops and stats().arrival_order_truncated is set.
  bool record_arrival_order = true;
  // Device sections carry no length, so the end of the device state is recognised from the end of the stream:
  // EOF followed by a VMDESC whose length reaches exactly to the end. Without a VMDESC any cut right after a
  // 0x00 byte would look like a complete stream; QEMU 7.2 sends a VMDESC after every precopy save of an x86
  // machine, so it is required unless this is turned off (streams of machines with suppress-vmdesc).
  bool require_vmdesc = true;
  // Limit on device state + VMDESC kept in memory.
  size_t max_device_state = 256u << 20;
  // Host page sizes per block name. Only needed for a stream whose source had postcopy-ram enabled: such a
  // stream carries a page size for every block whose page size differs from the source's host page size.
  std::map<std::string, uint64_t> block_page_sizes;
  uint64_t source_host_page_size = 4096;
};

struct MigrationStreamStats {
  uint64_t bytes = 0;           // stream bytes consumed
  uint64_t ram_sections = 0;    // START + PART + END
  uint64_t page_records = 0;    // PAGE + ZERO records
  uint64_t data_pages = 0;      // PAGE records
  uint64_t zero_pages = 0;      // ZERO records
  uint64_t duplicate_pages = 0; // records for a page already delivered
  uint64_t scan_jumps = 0;      // == out_of_order_pages().size()
  bool postcopy_advised = false;
  bool ram_end_seen = false;    // false for background-snapshot streams
  bool arrival_order_truncated = false;  // arrival_order() stopped at twice the announced pages
};

class MigrationStreamReader {
 public:
  // Borrows source and handler; both must outlive the reader.
  MigrationStreamReader(SequentialSource* source, MigrationStreamHandler* handler,
                        MigrationStreamReaderOptions options = {});

  // Parses the whole stream, up to the source's end. Errors are corrupt (bytes violate the format or a limit
  // above, message with the stream offset and what was expected), unsupported (a feature this reader does not take), io-error (the
  // source), or whatever the handler returned. Call once.
  Status Run();

  // Valid after Run() succeeded (partially filled after a failure).
  const SavedVmState& state() const { return state_; }
  SavedVmState TakeState() { return std::move(state_); }
  const MigrationStreamStats& stats() const { return stats_; }
  const std::vector<PageId>& arrival_order() const { return arrival_; }
  const std::vector<PageId>& out_of_order_pages() const { return out_of_order_; }
  // Pages of the announced blocks that never arrived (first `limit` of them).
  std::vector<PageId> MissingPages(size_t limit = SIZE_MAX) const;
  uint64_t distinct_pages_seen() const { return distinct_seen_; }

 private:
  Status ParseHeader();
  Status ParseConfiguration();
  Status ParseCommand();
  Status ParseSectionHeader(uint8_t tag, uint32_t* id, std::string* name, uint32_t* instance, uint32_t* version);
  Status ParseRamBody(uint8_t tag, uint32_t section_id);
  Status ParseBlockList(uint64_t total_bytes);
  Status ParseFooter(uint32_t section_id);
  Status CaptureTail(uint8_t first_tag);
  Status DeliverPage(uint32_t block, uint64_t offset, bool zero, uint8_t fill, const uint8_t* data);
  bool Seen(const PageId& p) const;
  bool NextUnseenAfter(const PageId* after, PageId* out) const;

  StreamInput in_;
  MigrationStreamHandler* handler_;
  MigrationStreamReaderOptions options_;
  SavedVmState state_;
  MigrationStreamStats stats_;
  bool ram_started_ = false;
  bool ignore_shared_ = false;  // x-ignore-shared: each MEM_SIZE entry carries a be64 address
  int last_block_ = -1;         // the CONTINUE state, carried across sections
  std::vector<std::vector<uint64_t>> seen_;  // per block, one bit a page
  uint64_t announced_pages_ = 0;             // the MEM_SIZE total in pages
  uint64_t distinct_seen_ = 0;
  bool have_last_ = false;
  PageId last_;
  std::vector<PageId> arrival_;
  std::vector<PageId> out_of_order_;
};

// Splits "device sections, EOF [, VMDESC]" (what follows the RAM) into the device state and the VMDESC JSON.
// Exposed for tests and the fuzzer. `base` is the stream offset of tail[0], for messages.
Status SplitDeviceStateTail(std::string_view tail, uint64_t base, const std::string& stream_name,
                            bool require_vmdesc, std::string* device_state, std::string* vmdesc);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_STREAM_READER_H_
