// Which pages a running x86-64 guest touches, from the accessed bits of its own page tables.
//
// Halite lays a checkpoint out by the order in which the guest touched its pages while it was saved; a guest
// saved stopped touches nothing, so its working set has to be observed before the save. The processor (or
// QEMU's TCG, which emulates it) sets bit 5 of every page-table entry it uses to translate an address; clearing
// the bits and walking the tables again some time later shows which mappings the guest used in between, under
// any VMM and any accelerator, with no help from the host kernel. Samples taken one after another order the
// working set coarsely: the pages of sample 1 were touched before those first seen in sample 2.
//
// Only live tables are ever written. A page that once held a top-level table (an exited process's) keeps its
// content after it is freed, and the pages it names may hold anything by now: clearing "accessed bits" there
// would corrupt guest data. So a sample walks only the roots loaded on the vCPUs at that moment (their tables
// are what the processor itself would walk), and the kernel half they share. A process is measured from the
// second sample that finds it on a vCPU: the first one clears what it accumulated since it started. Processes
// that never run at a sample are not seen; processes that run often (the ones whose pages a restore needs
// first) are.
//
// What it sees and what it does not: 4 KiB and 2 MiB mappings; kernel accesses through Linux's direct map (2 MiB
// and 1 GiB pages covering all memory) say little per page and are left out by AccessedPageRuns. A translation
// cached in a TLB sets no bit again until it is evicted (TCG flushes its TLB on every CR3 write, hardware keeps
// global pages longer): samples under-report rather than invent accesses. Under a shadow-paging hypervisor the
// host's shadow entries are not invalidated by the clearing: accesses through them go unseen.
//
// Writing: only the accessed bit of present entries below the top level is cleared, only while every vCPU is
// stopped (the caller's job), and the dirty bit is never touched. Operating systems already expect the bit to
// change under them (the processor sets it; they clear it with atomic operations to age pages); clearing it makes
// pages look idle once, as the guest's own aging does.
//
// Thread-safety: a sampler keeps which roots it has cleared between calls and is used from one thread.
#ifndef HALITE_X86_ACCESSED_PAGES_H_
#define HALITE_X86_ACCESSED_PAGES_H_

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_set>
#include <vector>

#include "halite/checkpoint_types.h"
#include "halite/export.h"
#include "halite/status.h"
#include "halite/x86_page_tables.h"

namespace halite::x86 {

// Writes guest-physical page `pfn` from `page`. Errors stop the sample and are returned unchanged.
using GuestPageWriter = std::function<Status(uint64_t pfn, std::span<const uint8_t, kGuestPageSize> page)>;

struct HALITE_EXPORT AccessSample {
  // The accessed mappings since the previous sample: the kernel half's (once it was cleared before) and the user
  // halves of the roots cleared by an earlier sample, each in virtual-address order.
  std::vector<AddressSpaceWalk> spaces;
  uint32_t live_roots = 0;      // distinct roots on the vCPUs
  uint32_t measured_roots = 0;  // of which cleared by an earlier sample (their accesses are in `spaces`)
  uint64_t tables_read = 0;     // table pages walked
  uint64_t tables_written = 0;  // table pages whose accessed bits were cleared
  uint64_t entries_cleared = 0;
  bool truncated = false;       // a walk limit was hit
};

class HALITE_EXPORT AccessedBitSampler {
 public:
  // `limits` bound each walk as for WalkAddressSpace (max_pfn: the guest's highest page); the half and
  // accessed_only fields are set here.
  AccessedBitSampler(GuestPageReader read, GuestPageWriter write, WalkLimits limits = {});

  // With every vCPU stopped, `live_roots` being the roots the vCPUs have loaded (PagingRootFromRegisters): walks
  // the kernel half and each root's user half, through accessed entries only where the bits were cleared by an
  // earlier sample and through every entry otherwise, then clears the accessed bit of every present entry of the
  // tables read below the top level. Errors: the reader's and the writer's; kNotFound when no root is in memory.
  Result<AccessSample> Sample(std::span<const PagingRoot> live_roots);

 private:
  Status ClearAccessedBits(const AddressSpaceWalk& walk, AccessSample* sample);

  GuestPageReader read_;
  GuestPageWriter write_;
  WalkLimits limits_;
  bool kernel_cleared_ = false;
  std::unordered_set<uint64_t> cleared_roots_;  // top-level table pfns whose user half was cleared
};

// The pages of successive samples as the writer's access trace (CheckpointWriter::AddAccessedPages): sample by
// sample, each as ToPageRuns orders it (user halves first, in virtual-address order), without the kernel half's
// 2 MiB and 1 GiB mappings; a page an earlier sample gave already is left out. Pages outside every range of
// `memory_map` are dropped.
HALITE_EXPORT std::vector<PageRun> AccessedPageRuns(std::span<const AccessSample> samples,
                                                   std::span<const GuestMemoryRange> memory_map);

}  // namespace halite::x86

#endif  // HALITE_X86_ACCESSED_PAGES_H_
