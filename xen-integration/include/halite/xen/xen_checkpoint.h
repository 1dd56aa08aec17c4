// Xen save streams into libhalite checkpoints and back: what `hlt-save xen` and `hlt-restore xen` call.
//
// A checkpoint made from a Xen stream has
//   - metadata vmm_kind Xen, machine_type "xen-hvm", the VM's UUID when the xl config names one;
//   - one region, kXenRegionName, guest-physical base 0, covering pfn 0 .. the highest pfn the stream names.
//     Pages with data are stored (last copy wins), XALLOC pages are zero pages, XTAB (and BROKEN) pfns and pfns
//     the stream never names are absent;
//   - one blob, kXenStateBlobName: EncodeXenState() of the stream minus its page data (xl config, every
//     non-page record in order, the page layout), from which export rebuilds the stream;
//   - virtual-address hints from the guest's own page tables (halite/x86_page_tables.h), walked from the vCPU
//     registers in the HVM context and from the other address spaces found in memory.
//
// Saving in one pass. Pages go to the writer as they arrive: its staging file holds the only copy (a page sent
// again overwrites its slot), and the one region grows as higher pfns appear. The HVM context (the vCPUs' CR3)
// comes after all page data; then the guest's page tables are walked by reading the staged pages back
// (halite/x86_guest_hints.h). Memory: ~25 bytes per region page in the writer, a bit per pfn named, 24 bytes
// per page that looks like a top-level page table (capped).
//
// Nothing is created under the output name unless everything succeeds (the writer's atomic sink).
#ifndef HALITE_XEN_XEN_CHECKPOINT_H_
#define HALITE_XEN_XEN_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/status.h"
#include "halite/x86_guest_hints.h"
#include "halite/x86_page_tables.h"
#include "halite/byte_streams.h"
#include "halite/xen/xen_save_image.h"
#include "halite/xen/xen_stream_reader.h"

namespace halite::xen {

inline constexpr const char* kXenRegionName = "xen.physmap";
inline constexpr const char* kXenStateBlobName = "xen.state";
inline constexpr const char* kXenMachineType = "xen-hvm";

struct SaveOptions {
  // format and source_name are used; detect_format overrides format with what the first 8 bytes say.
  ReadOptions read;
  bool detect_format = true;
  WriterOptions writer;  // vmm_kind, machine_type and vm_uuid are filled in here
  bool va_walk = true;
  x86::GuestWalkOptions walk;
  uint64_t max_table_candidates = uint64_t{1} << 20;  // pages noted as possible top-level tables (24 bytes each)
  // The region covers pfn 0..max pfn; refuse a stream when a pfn it names would make the region larger than
  // this many pages and more than 16 times the pfns named so far (the writer keeps ~25 bytes per region page).
  uint64_t max_sparse_region_pages = uint64_t{1} << 22;
  // Called after the pages and hints are given and before Finish (hint files from the command line).
  std::function<Status(CheckpointWriter&)> before_finish;
};

// The page-table walk's report (halite/x86_guest_hints.h).
using VaReport = x86::PageTableHintReport;

struct SaveResult {
  StreamFormat format = StreamFormat::kXl;
  ImportStats import;
  uint64_t region_pages = 0;
  uint64_t data_pages = 0, zero_pages = 0, hole_pages = 0;  // final state of the pfns the stream named
  size_t state_blob_bytes = 0;
  double import_seconds = 0;      // the stream read and its pages given to the writer
  VaReport va;
  WriteSummary summary;           // from the writer (its seconds: planning, compression, writing)
};

// Reads a whole stream from `fd` (a file, FIFO, pipe or socket; not closed) and writes the checkpoint `path`.
// Errors: those of the stream reader (kCorrupt / kUnsupported naming the record and offset), kIoError from the
// input or output, kUnsupported for a physmap too large or too sparse for a checkpoint, the writer's.
Result<SaveResult> SaveStreamToCheckpoint(int fd, const std::string& path, SaveOptions options);

struct ExportOptions {
  bool reorder_like_xen417 = false;   // OrderLikeXen417() before writing (default: the order the input had)
  uint64_t cache_bytes = 64ull << 20; // decoded blocks kept; blocks no later page needs are dropped at once
};

struct ExportStats {
  uint64_t data_pages = 0;   // pages whose data was written
  uint64_t blocks_read = 0;  // block reads (a block evicted and needed again counts again)
  uint64_t distinct_blocks = 0;
  uint64_t stream_bytes = 0;
  double seconds = 0;
};

// Reads the Xen state and pages of `reader` and writes the stream to `out` (flushed at the end). Errors:
// kInvalidArgument for a checkpoint not made from a Xen stream, kCorrupt when the state blob or the page map
// disagree with the layout (naming the pfn), the reader's and the sink's.
Status ExportCheckpointToStream(const CheckpointReader& reader, SequentialSink& out, const ExportOptions& options,
                                ExportStats* stats = nullptr);

// Exports to `out` as `hlt-restore xen -o OUT` does (moved from the tool so that a toolstack feeding `xl restore`
// gets the same handling): "-" is standard output and an existing FIFO (or other non-file) is streamed to as it
// is (SIGPIPE ignored, so a reader going away is a kIoError; a failure says a partial stream was written); any
// other path is a file created atomically (`sync`: fsync'd), nothing left when the export fails. Errors: as
// ExportCheckpointToStream, and kIoError naming `out`.
Status ExportCheckpointToPath(const CheckpointReader& reader, const std::string& out, bool sync,
                              const ExportOptions& options, ExportStats* stats);
// Whether ExportCheckpointToPath streams to `out` (standard output or an existing non-file) instead of a new file.
bool StreamsToPath(const std::string& out);

// A SequentialSink over the library's atomic AppendSink (buffered). Commit() after a successful export; destroying it
// without Commit() leaves nothing behind.
class AppendSinkByteSink final : public SequentialSink {
 public:
  explicit AppendSinkByteSink(std::unique_ptr<AppendSink> sink, size_t buffer_size = 1 << 20);
  Status Write(const void* buf, size_t n) override;
  Status Flush() override;
  Status Commit();
  uint64_t position() const { return sink_->position() + len_; }

 private:
  std::unique_ptr<AppendSink> sink_;
  std::vector<uint8_t> buf_;
  size_t len_ = 0;
};

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_CHECKPOINT_H_
