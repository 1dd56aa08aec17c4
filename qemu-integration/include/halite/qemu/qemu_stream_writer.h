// Writes a migration stream for a stock QEMU destination (`-incoming defer` + migrate-incoming), i.e. what a
// migration source sends: either a precopy (eager) load or the postcopy sequence used for lazy restore.
//
// Postcopy order (shared/notes/qemu-migration.md, "The order of what the source sends"):
//   WriteHeader, WriteConfiguration, WriteOpenReturnPath, [WritePing], WritePostcopyAdvise, WriteRamStart,
//   WriteDiscardAll (QEMU 7.2 needs one discard between ADVISE and LISTEN), [preload RAM PART sections],
//   WritePackaged (LISTEN, device state, PING, RUN), RAM PART sections with pages, WriteRamEnd, WriteEof.
// Precopy order: WriteHeader, WriteConfiguration, WriteRamStart, RAM PART sections, WriteRamEnd,
//   WriteDeviceState, WriteEof, WriteVmdesc.
// Out-of-order calls fail with an internal Status rather than produce a stream QEMU would misread.
//
// The writer never sends a page twice: QEMU's postcopy refuses a page already placed ("postcopy_place_page:
// File exists") and pauses. It tracks sent pages per block in a bitmap and refuses a duplicate (internal error).
// Not thread-safe.
#ifndef HALITE_QEMU_QEMU_STREAM_WRITER_H_
#define HALITE_QEMU_QEMU_STREAM_WRITER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "halite/qemu/qemu_stream_input.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/status.h"

namespace halite::qemu {

struct MigrationStreamWriterOptions {
  // Postcopy: MEM_SIZE entries carry a be64 page size for every block whose page_size is known and differs from
  // host_page_size (the destination reads it once it has seen POSTCOPY_ADVISE).
  bool page_sizes_in_block_list = false;
  uint64_t host_page_size = 4096;
};

class MigrationStreamWriter {
 public:
  // Borrows sink and state; both must outlive the writer.
  MigrationStreamWriter(SequentialSink* sink, const SavedVmState* state, MigrationStreamWriterOptions options = {});

  Status WriteHeader();
  Status WriteConfiguration();
  Status WriteOpenReturnPath();
  Status WritePing(uint32_t value);
  // pagesize_summary: OR of the page sizes of all RAMBlocks (the destination compares it with its own).
  Status WritePostcopyAdvise(uint64_t pagesize_summary, uint64_t target_page_size = kTargetPageSize);
  // The RAM section START with the MEM_SIZE block list of `state`.
  Status WriteRamStart();
  // POSTCOPY_RAM_DISCARD for byte ranges (start, length) of one block; split into several commands as needed.
  // Must come before any page is sent (a discard wipes what was placed).
  Status WritePostcopyRamDiscard(uint32_t block, std::span<const std::pair<uint64_t, uint64_t>> ranges);
  // One discard per block covering all of it: "every page is still to come".
  Status WriteDiscardAll();
  // PACKAGED: POSTCOPY_LISTEN, the device state, PING(ping_value) when with_ping, POSTCOPY_RUN. The package
  // must stay under 16 MiB (QEMU's limit): invalid-argument otherwise.
  // `listen_ping` (when set) is a PING placed right after LISTEN: its PONG means the destination has registered
  // guest RAM with its userfaultfd (LISTEN is handled synchronously, before the device state is loaded).
  Status WritePackaged(bool with_ping, uint32_t ping_value, std::optional<uint32_t> listen_ping = std::nullopt);

  // Postcopy recovery: this writer continues, on a new channel, the stream a source that died began (its
  // header, RAM START and PACKAGED went out long ago; QEMU's loader goes on where it stopped). Call first: then
  // RECV_BITMAP for each block, POSTCOPY_RESUME once the bitmaps are back, and RAM sections as after PACKAGED.
  Status BeginResumedStream();
  Status WriteRecvBitmapRequest(uint32_t block);
  Status WritePostcopyResume();

  // RAM sections carrying pages: BeginRamPart, any number of WritePage/WriteZeroPage, EndRamSection.
  Status BeginRamPart();
  Status WritePage(PageId page, const uint8_t* data);  // kTargetPageSize bytes
  Status WriteZeroPage(PageId page, uint8_t fill = 0);
  Status EndRamSection();
  // An END section (it may carry pages too: BeginRamEnd ... EndRamSection). WriteRamEnd = empty END.
  Status BeginRamEnd();
  Status WriteRamEnd();

  // Precopy only: the saved device sections, raw.
  Status WriteDeviceState();
  Status WriteEof();
  // After EOF in precopy: QEMU's loader reads a VMDESC after EOF when its machine sends one, so send it back.
  Status WriteVmdesc();
  Status Flush() { return sink_->Flush(); }

  bool IsSent(PageId page) const;
  uint64_t pages_sent() const { return pages_sent_; }
  uint64_t total_pages() const { return total_pages_; }
  bool in_ram_section() const { return in_section_; }
  // Pages written in the current (open) RAM section.
  uint64_t section_pages() const { return section_pages_; }

 private:
  enum class Phase { kNew, kHeader, kConfiguration, kRamStarted, kPackaged, kRamEnded, kEof, kVmdesc };
  Status Order(bool ok, const char* what) const;
  Status Put(const std::string& bytes) {
    return sink_->Write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  Status WriteCommand(Command cmd, std::string_view payload);
  Status BeginRamSection(uint8_t tag);
  Status PageHeader(PageId page, uint64_t flag, std::string* rec);

  SequentialSink* sink_;
  const SavedVmState* state_;
  MigrationStreamWriterOptions options_;
  Phase phase_ = Phase::kNew;
  bool advised_ = false;
  bool discarded_ = false;
  bool in_section_ = false;
  bool end_section_ = false;
  int last_block_ = -1;  // CONTINUE state within the open section
  std::vector<std::vector<uint64_t>> sent_;
  uint64_t pages_sent_ = 0;
  uint64_t total_pages_ = 0;
  uint64_t section_pages_ = 0;
  std::string scratch_;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_STREAM_WRITER_H_
