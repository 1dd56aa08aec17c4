// Placing pages in a postcopy destination's memory directly, through QEMU's own userfaultfd, instead of sending
// them in its migration stream (where one QEMU thread parses and places them 4 KiB at a time).
//
// After POSTCOPY_LISTEN the destination has registered guest RAM with a userfaultfd. pidfd_getfd(2) duplicates
// that descriptor into this process (it needs ptrace-attach permission over QEMU: given when this process
// launched QEMU as the same user; refused with EPERM/EACCES for a QEMU of another user or under a strict
// kernel.yama.ptrace_scope). UFFDIO_COPY then copies from this process's memory into QEMU's, a whole run per
// ioctl and from several threads at once; UFFDIO_ZEROPAGE maps zero runs. QEMU's fault thread still reports
// the guest's faults as page requests on the return path.
//
// Rules the users of this header keep (qemu_checkpoint_restore.cc): a block is placed either directly or
// through the stream after LISTEN, never both (PushRestoreChannel::PlaceBlocksDirectly checks the stream side,
// DirectUffdSink the other); every stored page is in before RAM END (QEMU's cleanup unregisters the range; a
// page never placed reads as zero, so zero pages need not be placed).
//
// hugetlbfs-backed RAMBlocks (2 MiB host pages): the kernel fills such a mapping only a whole, aligned huge page
// per UFFDIO_COPY, and has no UFFDIO_ZEROPAGE for it. The engine gives each host page whole in one batch
// (halite/page_sink.h); DirectUffdSink puts its runs together and places it with one UFFDIO_COPY, zero pages
// included (an all-zero host page is copied from zeros).
#ifndef HALITE_QEMU_QEMU_DIRECT_PLACEMENT_H_
#define HALITE_QEMU_QEMU_DIRECT_PLACEMENT_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "halite/page_sink.h"
#include "halite/qemu/qemu_stream_input.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/qemu/qemu_stream_format.h"
#include "halite/status.h"

namespace halite::qemu {

// Duplicates the userfaultfd (`anon_inode:[userfaultfd]` in /proc/PID/fd) of process `pid` into this process.
// Errors: kUnsupported with the errno when this process may not (EPERM/EACCES: no ptrace permission over it;
// ENOSYS: a kernel older than 5.6), kNotFound when it has none or more than one (not in postcopy yet, or
// ambiguous), kIoError otherwise.
Result<UniqueFd> DuplicateUserfaultfd(pid_t pid);
// Whether DuplicateUserfaultfd may work, asked before anything is sent: duplicates one of `pid`'s descriptors
// and closes the copy. Errors as above (kUnsupported: not permitted).
Status CheckCanDuplicateFds(pid_t pid);

// The host virtual address of RAMBlock `block`'s offset 0 in QEMU, from HMP `gpa2hva` of the guest-physical
// address where that offset is mapped (`gpa`), checked against /proc/PID/maps: [address, address + size) must
// lie in one writable mapping of the kind the block's pages need (pid <= 0 skips that check): for 4 KiB host
// pages a private anonymous one (not a file, not shared memory); for larger ones (`host_page_size`) a hugetlbfs
// one of that page size (its KernelPageSize in /proc/PID/smaps), shared or private, aligned to it. Errors:
// kNotFound when the address is not mapped, belongs to another block (QEMU names it) or to another kind of
// mapping, kCorrupt for an answer not understood, the QMP errors.
Result<uint64_t> RamBlockHostAddress(QmpClient& qmp, pid_t pid, const std::string& block, uint64_t gpa,
                                     uint64_t size, uint64_t host_page_size = kTargetPageSize);

// One region of the checkpoint as the direct sink sees it: host_address 0 means "not placed directly".
struct DirectRegion {
  uint64_t host_address = 0;
  uint64_t pages = 0;
  uint64_t host_page_size = kTargetPageSize;  // 2 MiB for hugetlbfs: placed a whole host page per UFFDIO_COPY
};

struct DirectPlacementStats {
  uint64_t pages_copied = 0;   // placed by UFFDIO_COPY
  uint64_t pages_zeroed = 0;   // placed by UFFDIO_ZEROPAGE
  uint64_t pages_existed = 0;  // EEXIST: populated already (not an error)
  uint64_t copy_ioctls = 0;
  uint64_t zero_ioctls = 0;
  uint64_t partial_fills = 0;  // an ioctl that filled part of its range (continued from there)
  uint64_t retries = 0;        // EAGAIN with nothing filled (the address space was changing)
  uint64_t wakes = 0;
  // ENOENT on a zero run: QEMU had ended postcopy and unregistered its memory (a request answered after the end
  // of the stream); such a page reads as zero without us, which is what it is.
  uint64_t zero_pages_after_end = 0;
};

// A PageSink that places runs of the regions given a host address through `uffd` (borrowed; it must stay open
// while the sink is used). Each run is one UFFDIO_COPY (or UFFDIO_ZEROPAGE) without waking; the batch's runs
// are woken at the end. In a region with larger host pages, the runs of each host page (which must follow each
// other in the batch, covering it exactly) are put together and placed with one UFFDIO_COPY. A page placed twice
// by this sink is a kInternal error (a checked invariant); a page (host page) found populated (EEXIST) is counted
// and left. Errors: kInvalidArgument for a run of a region not placed directly or outside it, or a host page
// begun inside or left incomplete by the batch (nothing of it is placed), kIoError when the owner's memory is
// gone (QEMU exited: ESRCH) or an ioctl fails. Thread-safe.
class DirectUffdSink final : public PageSink {
 public:
  DirectUffdSink(int uffd, std::vector<DirectRegion> regions);

  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override;
  // Nothing is in the destination before the engine places it (POSTCOPY_ADVISE discarded its RAM).
  bool IsPresent(PageRef) const override { return false; }

  bool IsDirect(uint32_t region) const { return region < regions_.size() && regions_[region].host_address != 0; }
  // Placed by this sink (or found populated by it). Lock-free.
  bool IsPlaced(PageRef page) const;
  DirectPlacementStats stats() const;
  // Called just before the end of the stream is sent, when every page QEMU needs is in: from then on QEMU may
  // unregister its memory at any moment, and a zero run that meets that (ENOENT) is done, not an error.
  void MarkStreamEnding() { stream_ending_.store(true, std::memory_order_release); }

 private:
  // Places `len` bytes at dst: from `src`, or zero pages when src is null; `step` is the unit the kernel fills
  // (4 KiB, or the host page size), so EEXIST skips one step.
  Status Place(uint64_t dst, const uint8_t* src, uint64_t len, uint64_t step);
  // Places the host page of `region` at page `first` with one UFFDIO_COPY, its bytes put together from `runs`
  // (which cover it).
  Status PlaceHostPage(uint32_t region, uint64_t first, std::span<const PageInstall> runs);

  const int uffd_;
  const std::vector<DirectRegion> regions_;
  std::vector<uint8_t> zeros_;  // one largest host page of zeros: an all-zero huge page is copied from it
  std::vector<std::unique_ptr<std::atomic<uint64_t>[]>> placed_;  // per region, one bit a page
  std::atomic<uint64_t> pages_copied_{0}, pages_zeroed_{0}, pages_existed_{0}, copy_ioctls_{0}, zero_ioctls_{0},
      partial_fills_{0}, retries_{0}, wakes_{0}, zero_pages_after_end_{0};
  std::atomic<bool> stream_ending_{false};
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_DIRECT_PLACEMENT_H_
