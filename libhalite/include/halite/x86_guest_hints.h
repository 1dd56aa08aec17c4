// Virtual-address hints for a checkpoint from the guest's own page tables, read back from the writer.
//
// Any x86-64 VMM integration does the same four steps, so they live here once:
//   1. while pages stream into the CheckpointWriter, note those that may be top-level page tables
//      (TopLevelTableCandidates::Observe: cheap, it stops at the first entry that cannot be one);
//   2. at the end, turn each vCPU's control registers into a paging root;
//   3. walk every root, and the other processes' roots found among the candidates, reading table pages back
//      from the writer's staged pages (CheckpointWriter::ReadPage: no integration keeps a copy of guest memory);
//   4. map the walks' guest-physical runs onto the writer's regions through the guest's memory map and give
//      them to the writer (AddVaRuns).
// A guest whose tables cannot be walked (not in long mode, roots absent) is not an error: the report says why
// nothing was added. Guest memory is untrusted; the walk limits of halite/x86_page_tables.h apply.
#ifndef HALITE_X86_GUEST_HINTS_H_
#define HALITE_X86_GUEST_HINTS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "halite/checkpoint_types.h"
#include "halite/checkpoint_writer.h"
#include "halite/export.h"
#include "halite/status.h"
#include "halite/x86_page_tables.h"

namespace halite::x86 {

// The registers that say where a vCPU's page tables are.
struct HALITE_EXPORT VcpuControlRegisters {
  uint32_t vcpu = 0;
  uint64_t cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
};

// Pages that looked like top-level tables as they streamed by, with the fingerprint of their kernel half, so
// that at the end only those sharing a vCPU root's kernel half are read back. 24 bytes a candidate.
class HALITE_EXPORT TopLevelTableCandidates {
 public:
  struct Entry {
    PageRef where;
    uint64_t kernel_half_fingerprint = 0;
  };
  explicit TopLevelTableCandidates(uint64_t max_entries = uint64_t{1} << 20) : max_entries_(max_entries) {}

  // Notes `page` if it can be a top-level table. A page given again is noted again; the walk reads the final
  // content and checks it once more, so stale entries cost a read and nothing else.
  void Observe(PageRef where, std::span<const uint8_t, kGuestPageSize> page);

  const std::vector<Entry>& entries() const { return entries_; }
  bool truncated() const { return truncated_; }  // max_entries reached: later candidates were dropped

 private:
  uint64_t max_entries_;
  std::vector<Entry> entries_;
  bool truncated_ = false;
};

struct HALITE_EXPORT PageTableHintReport {
  std::string skipped;          // empty when the walk ran; otherwise why not
  std::string notes;            // vCPUs whose registers were not usable, and why
  uint32_t vcpus = 0;           // vCPUs given
  uint32_t cpu_roots = 0;       // distinct vCPU roots walked
  uint32_t pti_kernel_copies = 0;
  uint32_t scan_roots = 0;      // other address spaces found among the candidates
  uint32_t kernel_alias_roots = 0;     // candidates whose user half only aliases the kernel's (trampoline_pgd)
  uint64_t kernel_alias_entries = 0;   // user-half entries of walked spaces skipped as aliases of the kernel half
  uint64_t candidates = 0;      // pages noted while streaming
  uint64_t table_pages = 0;     // page-table pages read, all spaces
  uint64_t missing_tables = 0;  // entries naming a table page the checkpoint does not have
  uint64_t runs = 0;            // VA runs, all spaces
  uint64_t hint_runs = 0;       // runs given to the writer (split at ranges; pages outside RAM dropped)
  uint64_t mapped_pages = 0;    // distinct guest pages mapped by any walk and present in the checkpoint
  uint64_t mapped_nonzero_pages = 0;
  // The same without the kernel's 2 MiB / 1 GiB mappings (Linux's direct map covers all memory): the pages whose
  // place the hints really decide.
  uint64_t mapped_nonzero_small_pages = 0;
  uint64_t nonzero_pages = 0;   // pages with content in the writer's regions
  bool truncated = false;       // a walk limit or the candidate limit was hit
  double seconds = 0;
  double coverage() const { return nonzero_pages ? double(mapped_nonzero_pages) / double(nonzero_pages) : 0; }
  double small_coverage() const {
    return nonzero_pages ? double(mapped_nonzero_small_pages) / double(nonzero_pages) : 0;
  }
};

// Steps 2-4 above. `memory_map` says where the writer's regions are in guest-physical memory (empty: each
// region at its guest_phys_base); ranges are clipped to their region. Errors: reading the writer's staged pages,
// AddVaRuns; never the guest's content.
HALITE_EXPORT Result<PageTableHintReport> AddPageTableHints(CheckpointWriter& writer,
                                                            std::span<const VcpuControlRegisters> vcpus,
                                                            std::span<const GuestMemoryRange> memory_map,
                                                            const TopLevelTableCandidates& candidates,
                                                            const GuestWalkOptions& options = {});

// What hlt-save prints of a walk: "  va walk ...", "  va coverage ...", "  va notes ..." lines (or
// "  va walk          skipped: WHY").
HALITE_EXPORT std::string PageTableHintReportText(const PageTableHintReport& report);

}  // namespace halite::x86

#endif  // HALITE_X86_GUEST_HINTS_H_
