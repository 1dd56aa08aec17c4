// Gathering a running QEMU's guest RAM back into transparent huge pages before a live save pauses the guest.
//
// QEMU 7.2's background snapshot, inside the pause (its `setup-time`), reads one byte of every page of guest RAM
// and then write-protects all of it through userfaultfd; while the snapshot runs it lifts the protection page by
// page. Lifting 4 KiB of a 2 MiB huge page splits it, so after one live save the guest's RAM is mapped in 4 KiB
// pages, and the next live save's setup walks 512 times as many entries. Measured here at 2 GiB (TCG): THP-backed
// RAM fell from 2 GiB to 48 MiB after a first background snapshot, and the second one's setup took 129-168 ms
// against 24 ms after gathering (bench/results/2026-11-28-live-save-thp). The kernel's khugepaged would gather
// them too, but at its default pace (4096 pages every 10 s) that takes about 20 minutes for 2 GiB.
//
// So a live save asks the kernel to collapse them now (process_madvise(MADV_COLLAPSE), Linux 6.1), while the guest
// still runs, for the same ranges khugepaged would collapse: those holding at least 512 - max_ptes_none pages of
// the guest's own (/sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none, default 511: one page). Ranges
// that hold only never-written memory (none or the shared zero page) are left alone, so that gathering never
// turns memory the guest never used into memory the host must hold. It is an optimisation: anything that stops it
// (THP off, an old kernel, no CAP_SYS_NICE over QEMU, ...) leaves a reason in the report and the save goes on.
#ifndef HALITE_QEMU_QEMU_THP_REGATHER_H_
#define HALITE_QEMU_QEMU_THP_REGATHER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "halite/qemu/qemu_guest_info.h"
#include "halite/qemu/qemu_qmp_client.h"
#include "halite/qemu/qemu_saved_state.h"

namespace halite::qemu {

constexpr uint64_t kHugePageBytes = 2ull << 20;
constexpr uint32_t kPagesPerHugePage = 512;

// A range of QEMU's virtual memory that holds guest RAM in 4 KiB host pages.
struct HostRamRange {
  std::string block;  // the RAMBlock's name, for messages
  uint64_t address = 0;
  uint64_t bytes = 0;
};

struct ThpRegatherReport {
  std::string skipped;       // empty when it ran; otherwise why nothing was asked of the kernel
  uint64_t ranges = 0;       // 2 MiB ranges looked at
  uint64_t candidates = 0;   // of those, holding enough of the guest's own pages to be collapsed
  uint64_t collapsed = 0;    // the kernel collapsed them (or they were huge already)
  uint64_t failed = 0;       // it could not (no free huge page, pages pinned, ...): left as they are
  std::string first_failure; // the first failure's errno text
  double ms = 0;             // wall time, the guest running meanwhile
};

// khugepaged's rule: at most `max_ptes_none` of a huge page's 512 entries may be empty (none or the zero page).
// Returns the fewest own pages a range needs (at least 1).
uint32_t MinOwnPagesToCollapse(uint32_t max_ptes_none);

// Collapses the 2 MiB-aligned ranges of `ranges` in process `pid` that hold at least MinOwnPagesToCollapse pages
// of the guest's own (OwnPages, halite/qemu/qemu_ram_mapping.h). Never fails: what stops it is in report.skipped.
ThpRegatherReport RegatherHugePages(pid_t pid, const std::vector<HostRamRange>& ranges);

// Where QEMU (behind `qmp`) maps the RAMBlocks of 4 KiB host pages and at least 2 MiB that the guest sees at
// offset 0 of a range of `guest_ram` (gpa2hva, checked against /proc/PID/maps). Blocks it cannot place are left
// out: gathering is an optimisation.
std::vector<HostRamRange> GuestRamHostRanges(QmpClient& qmp, const std::vector<RamBlockInfo>& blocks,
                                             const std::vector<GuestRamRange>& guest_ram);

// One line for the save reports ("" when nothing ran and nothing needs saying).
std::string ThpRegatherReportText(const ThpRegatherReport& r);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_THP_REGATHER_H_
