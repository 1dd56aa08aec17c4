// The lazy Xen pager's logic, without Xen: which pages to page out, what to load on each paging event, and the
// skeleton stream that creates the domain. The hypervisor side is behind PagingOps (xen_pager_xenctrl.h
// implements it with libxenctrl, libxenforeignmemory and libxenevtchn; tests implement it in memory).
//
// Lazy restore on Xen, xenpaging-style (see README.md in this directory):
//   1. `hlt-xen-pager skeleton CKPT -o STREAM`: the checkpoint's stream with every page that carries data turned
//      into XALLOC (populate, no data). `xl restore -p STREAM` then creates the domain, paused, with its memory
//      allocated and zero, its devices and vCPUs restored: fast, whatever the guest's size.
//   2. `hlt-xen-pager serve --domain D CKPT`: enables paging on the domain, pages out (nominates and evicts)
//      every page the checkpoint stores; a page the hypervisor will not page out (in use by a backend or QEMU)
//      gets its content written at once. Zero pages stay as the skeleton left them. Then it unpauses the domain.
//   3. Each paging event (the guest touched a paged-out page) loads the whole locality block holding that page:
//      every page of the block still paged out is prepared with its content (Xen makes a prepared page
//      guest-accessible at once), then the request is answered. Between events the blocks are loaded in the
//      checkpoint's restore order (working set first), until every page is in; then paging is disabled.
//
// Not thread-safe: one thread drives a PagerCore.
#ifndef HALITE_XEN_PAGER_XEN_PAGER_CORE_H_
#define HALITE_XEN_PAGER_XEN_PAGER_CORE_H_

#include <cstdint>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/status.h"
#include "halite/byte_streams.h"
#include "halite/xen/xen_save_image.h"

namespace halite::xen::pager {

// One request from the hypervisor's paging ring (vm_event_request_t, reason MEM_PAGING).
struct PagingRequest {
  uint64_t gfn = 0;
  uint32_t vcpu_id = 0;
  uint32_t flags = 0;       // VM_EVENT_FLAG_*, echoed in the response (VCPU_PAUSED unpauses the vCPU)
  bool drop = false;        // MEM_PAGING_DROP_PAGE: the guest gave the page up (ballooning); do not load it
  bool evict_fail = false;  // MEM_PAGING_EVICT_FAIL: the page was touched between nominate and evict
};

// The hypervisor operations the pager needs. Errors are kIoError naming the gfn and errno.
class PagingOps {
 public:
  virtual ~PagingOps() = default;
  // Nominates then evicts `gfn`. Returns false when the hypervisor refuses because the page is in use (EBUSY):
  // the page stays resident and the caller writes its content with Write().
  virtual Result<bool> Evict(uint64_t gfn) = 0;
  // Gives a paged-out gfn its content (XENMEM_paging_op_prep with a buffer): guest-accessible at once.
  virtual Status Load(uint64_t gfn, const uint8_t* page) = 0;
  // Writes the content of a resident gfn (foreign mapping).
  virtual Status Write(uint64_t gfn, const uint8_t* page) = 0;
  // Answers a request (the vCPU resumes).
  virtual Status Respond(const PagingRequest& request) = 0;
};

struct PagerStats {
  uint64_t stored_pages = 0;         // pages with content in the checkpoint's physmap
  uint64_t evicted = 0;              // paged out before the guest ran
  uint64_t written_unevictable = 0;  // in use, written before the guest ran
  uint64_t requests = 0;             // paging events
  uint64_t requests_for_loaded = 0;  // events for pages already loaded (raced with the loader, evict-fail)
  uint64_t dropped = 0;
  uint64_t fault_blocks = 0, fault_pages = 0;            // loaded because of an event
  uint64_t background_blocks = 0, background_pages = 0;  // loaded by the restore-order loader
};

class PagerCore {
 public:
  // Both must outlive the core. Errors: kInvalidArgument when the checkpoint was not made from a Xen stream.
  static Result<std::unique_ptr<PagerCore>> Create(const CheckpointReader& reader, PagingOps& ops);

  // Step 2: pages out every stored page (the domain must be paused). Errors: the ops' and the reader's.
  Status EvictAll();
  // Step 3: one paging event.
  Status OnRequest(const PagingRequest& request);
  // The loader: loads the next block of the restore order with pages still out. False when nothing is left.
  Result<bool> LoadNextBlock();
  bool done() const { return paged_out_ == 0; }
  uint64_t paged_out() const { return paged_out_; }
  const PagerStats& stats() const { return stats_; }

 private:
  enum class State : uint8_t { kNone, kPagedOut, kResident, kDropped };
  PagerCore(const CheckpointReader& reader, PagingOps& ops, uint32_t region);
  Status LoadBlock(uint32_t block, bool fault, uint64_t* loaded);
  Status ReadBlock(uint32_t block);

  const CheckpointReader& reader_;
  PagingOps& ops_;
  uint32_t region_;
  uint64_t first_page_ = 0, pages_ = 0;
  std::vector<State> state_;  // per gfn of the physmap
  uint64_t paged_out_ = 0;
  size_t next_in_order_ = 0;
  std::vector<uint8_t> block_;
  PagerStats stats_;
};

// The checkpoint's stream with every page that carries data turned into XALLOC: creates the domain with its
// memory allocated but not filled. Same records, same batches.
XenSaveImage MakeLazySkeleton(const XenSaveImage& image);
// Decodes the checkpoint's Xen state and writes the skeleton stream to `out`. Errors: as
// ExportCheckpointToStream.
Status ExportSkeleton(const CheckpointReader& reader, SequentialSink& out);

}  // namespace halite::xen::pager

#endif  // HALITE_XEN_PAGER_XEN_PAGER_CORE_H_
