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
// Saving in two passes. The stream's HVM context (the vCPUs' CR3) comes after all page data, and the highest pfn
// (the region's size, which the writer needs before the first page) is known only at the end, so pages cannot
// go to the writer as they arrive. Import keeps, per pfn, where its last copy is: in the input itself when the
// input is a regular file (read back with pread; nothing copied), otherwise in an unlinked spool file next to the
// output (about the size of the guest's non-zero memory). After the stream ends the page tables are walked from
// there, and the pages go to the writer in pfn order. Memory: 8 bytes per pfn named plus 16 bytes per page that
// looks like a top-level page table, capped.
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
#include "halite/x86_page_tables.h"
#include "halite/xen/xen_io.h"
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
  // Where the page spool goes when the input cannot be read again; default: the output's directory.
  std::string spool_dir;
  bool va_walk = true;
  x86::GuestWalkOptions walk;
  uint64_t max_table_candidates = uint64_t{1} << 20;  // pages kept as possible top-level tables (16 bytes each)
  // The region covers pfn 0..max pfn; refuse streams whose highest pfn would make it larger than this many
  // pages and more than 16 times the pfns the stream names (the writer keeps ~25 bytes per region page).
  uint64_t max_sparse_region_pages = uint64_t{1} << 22;
  // Called after the pages and hints are given and before Finish (hint files from the command line).
  std::function<Status(CheckpointWriter&)> before_finish;
};

struct VaReport {
  std::string skipped;          // empty when the walk ran; otherwise why not
  std::string notes;            // vCPUs whose registers were not usable, and why
  uint32_t vcpus = 0;           // vCPUs in the HVM context
  uint32_t cpu_roots = 0;       // distinct vCPU roots walked
  uint32_t pti_kernel_copies = 0;
  uint32_t scan_roots = 0;      // other address spaces found in memory
  uint64_t candidates = 0;      // pages that looked like top-level tables while streaming
  uint64_t table_pages = 0;     // page-table pages read, all spaces
  uint64_t runs = 0;            // VA runs, all spaces
  uint64_t hint_runs = 0;       // runs given to the writer (split at the region, outside pages dropped)
  uint64_t mapped_pages = 0;    // distinct guest pages mapped by any walk
  uint64_t mapped_nonzero_pages = 0;
  // The same without the kernel's 2 MiB / 1 GiB mappings (Linux's direct map covers all memory): the pages whose
  // place the hints really decide.
  uint64_t mapped_nonzero_small_pages = 0;
  uint64_t nonzero_pages = 0;   // pages with non-zero content in the checkpoint
  bool truncated = false;       // a walk limit was hit
  double seconds = 0;
  double coverage() const { return nonzero_pages ? double(mapped_nonzero_pages) / double(nonzero_pages) : 0; }
  double small_coverage() const {
    return nonzero_pages ? double(mapped_nonzero_small_pages) / double(nonzero_pages) : 0;
  }
};

struct SaveResult {
  StreamFormat format = StreamFormat::kXl;
  ImportStats import;
  uint64_t region_pages = 0;
  uint64_t data_pages = 0, zero_pages = 0, hole_pages = 0;  // final state of the pfns the stream named
  bool reread_input = false;      // pages were read back from the input file (no spool)
  uint64_t spool_bytes = 0;
  size_t state_blob_bytes = 0;
  double import_seconds = 0, pages_seconds = 0;  // stream import; giving the pages to the writer
  VaReport va;
  WriteSummary summary;           // from the writer (its seconds: planning, compression, writing)
};

// Reads a whole stream from `fd` (a file, FIFO, pipe or socket; not closed) and writes the checkpoint `path`.
// Errors: those of the stream reader (kCorrupt / kUnsupported naming the record and offset), kIoError from the
// input, spool or output, kUnsupported for a physmap too large or too sparse for a checkpoint, the writer's.
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
Status ExportCheckpointToStream(const CheckpointReader& reader, ByteSink& out, const ExportOptions& options,
                                ExportStats* stats = nullptr);

// A ByteSink over the library's atomic AppendSink (buffered). Commit() after a successful export; destroying it
// without Commit() leaves nothing behind.
class AppendSinkByteSink final : public ByteSink {
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
