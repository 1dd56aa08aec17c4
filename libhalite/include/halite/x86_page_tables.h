// Guest page-table walker for x86-64: virtual-address adjacency from saved guest memory, for any VMM.
//
// A checkpoint's locality planner wants pages that are neighbours in a guest's virtual address space to sit in
// the same block. This walker reads a guest's own page tables out of its saved memory (through a callback, so it
// works on a Xen stream spool, a QEMU RAM capture or a checkpoint alike), enumerates the present mappings of an
// address space in virtual-address order, and returns them as runs; it also finds the other address spaces of a
// Linux guest (every process's top-level table copies the kernel half, entries 256..511, of the kernel's).
//
// Supported: 4-level and 5-level (CR4.LA57) long-mode paging, 2 MiB and 1 GiB pages. Ignored: permissions, NX,
// protection keys, PAT, dirty bits, accessed bits (unless WalkLimits::accessed_only); PCID bits and CR3 bit 63
// are masked. Not supported: 32-bit and PAE
// paging (a guest in those modes gets kUnsupported from PagingRootFromRegisters), EPT/NPT of nested guests.
//
// Guest memory is untrusted: every walk is bounded. A table page is walked at most once per level and address
// space (so cycles, self-maps and tables shared many times cost nothing extra), the number of table pages read
// and of runs kept is capped (WalkLimits), entries pointing beyond the guest's memory or with reserved bits set
// are skipped and counted. Work is at most 512 entries per table read.
//
// Thread-safety: the functions keep no state between calls; the reader callback is called from the calling
// thread only.
#ifndef HALITE_X86_PAGE_TABLES_H_
#define HALITE_X86_PAGE_TABLES_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "halite/export.h"
#include "halite/checkpoint_types.h"
#include "halite/hint_files.h"
#include "halite/status.h"

namespace halite::x86 {

inline constexpr uint64_t kGuestPageSize = 4096;

// Reads guest-physical page `pfn` into `out`. Returns true when `out` was filled, false when the page does not
// exist (a hole, not saved, outside guest memory). An error stops the walk and is returned by it unchanged.
using GuestPageReader = std::function<Result<bool>(uint64_t pfn, std::span<uint8_t, kGuestPageSize> out)>;

// The top-level table of one address space.
struct HALITE_EXPORT PagingRoot {
  uint64_t table_pfn = 0;  // the PML4 (4 levels) or PML5 (5 levels) page
  int levels = 4;          // 4 or 5
  bool operator==(const PagingRoot&) const = default;
};

// From a vCPU's control registers: paging on (CR0.PG), long mode active (EFER.LMA), CR4.LA57 selects 5 levels.
// The PCID bits (CR3 11:0) and CR3 bit 63 are masked. Errors: kUnsupported naming the mode (paging off, 32-bit
// or PAE paging), kCorrupt for inconsistent registers (LMA without PAE, CR3 beyond 52 bits).
HALITE_EXPORT Result<PagingRoot> PagingRootFromRegisters(uint64_t cr0, uint64_t cr3, uint64_t cr4, uint64_t efer);

struct HALITE_EXPORT WalkLimits {
  // Highest guest page that exists. Entries naming a table above it are skipped as bad; leaves above it
  // (MMIO, framebuffers) are dropped, and large leaves are clipped at it.
  uint64_t max_pfn = (uint64_t{1} << 40) - 1;
  uint64_t max_tables = uint64_t{1} << 20;  // table pages read (4 GiB of page tables)
  uint64_t max_runs = uint64_t{1} << 22;    // runs kept (24 bytes each)
  // Walk only entries 0..255 of the top-level table (the user half): for address spaces whose kernel half was
  // already walked through another root.
  bool user_half_only = false;
  // Walk only entries 256..511 (the kernel half), e.g. once for all the address spaces that share it.
  bool kernel_half_only = false;
  // Follow only entries whose accessed bit (bit 5) is set, below the top-level table: the mappings the guest used
  // since the bits were last cleared (halite/x86_accessed_pages.h). The processor sets the bit in every entry it
  // uses for a translation, so an entry without it hides nothing used beneath it. The top level's bits are
  // ignored: its kernel half is one copy per process while the tables below are shared, so the copy walked may be
  // that of a process that did not run.
  bool accessed_only = false;
};

// Guest-physical pages pfn..pfn+pages-1 mapped at va..va+pages*4096-1. Runs are maximal: two leaves of the same
// size that continue each other in both spaces are one run.
struct HALITE_EXPORT VaRun {
  uint64_t va = 0;          // canonical (sign-extended)
  uint64_t pfn = 0;
  uint64_t pages = 0;
  uint8_t leaf_level = 1;   // 1: 4 KiB pages, 2: 2 MiB pages, 3: 1 GiB pages
  bool kernel_half() const { return va >> 63; }
  bool operator==(const VaRun&) const = default;
};

struct HALITE_EXPORT WalkStats {
  uint64_t tables = 0;            // table pages read, the top level included
  uint64_t missing_tables = 0;    // entries naming a table page the reader does not have
  uint64_t bad_entries = 0;       // present entries skipped: reserved bits set, or naming a table beyond max_pfn
  uint64_t revisited_tables = 0;  // entries naming a table already walked at that level (shared tables, cycles)
  uint64_t outside_leaves = 0;    // leaves whose first page is beyond max_pfn (dropped)
  // User-half entries naming a table of the kernel half (or equal to a kernel-half top-level entry): aliases of
  // kernel mappings, skipped. Linux's trampoline_pgd maps all physical memory at virtual address 0 through the
  // direct map's own tables; walked, it would look like a process mapping every page in physical order.
  uint64_t kernel_alias_entries = 0;
  uint64_t not_accessed_entries = 0;  // present entries skipped for a clear accessed bit (accessed_only)
  uint64_t leaves_4k = 0, leaves_2m = 0, leaves_1g = 0;
  uint64_t mapped_pages = 0;      // pages in the runs (a page mapped twice counts twice)
  bool truncated = false;         // a limit stopped the walk early
};

struct HALITE_EXPORT AddressSpaceWalk {
  PagingRoot root;
  bool user_half_only = false;
  std::vector<VaRun> runs;          // ascending virtual-address order (user half first, then the kernel half)
  std::vector<uint64_t> table_pfns; // the table pages read, in walk order
  WalkStats stats;
};

// Enumerates the present mappings of one address space, the kernel half's first (so that user-half entries
// aliasing it are known and skipped: WalkStats::kernel_alias_entries). Errors: those of the reader, and kNotFound
// when the root table itself is absent. Hostile tables cannot make it loop or exceed the limits (it stops and sets
// truncated).
HALITE_EXPORT Result<AddressSpaceWalk> WalkAddressSpace(const GuestPageReader& read, const PagingRoot& root,
                                          const WalkLimits& limits = {});

// ---- Other address spaces: top-level tables that share the kernel half of a known one ----

// True when `page` can be a top-level table: every entry is zero or present with a target at most max_pfn and
// no page-size bit, and at least one entry of the kernel half (256..511) is present. Cheap (stops at the first
// bad entry): meant to pre-filter every page of guest memory while it streams by.
HALITE_EXPORT bool LooksLikeTopLevelTable(std::span<const uint8_t, kGuestPageSize> page, uint64_t max_pfn);
// A hash of entries 256..511 with the accessed bit masked (hardware sets it per copy). Equal kernel halves have
// equal fingerprints; callers confirm a match by comparing the entries (FindSharedKernelRoots does).
HALITE_EXPORT uint64_t KernelHalfFingerprint(std::span<const uint8_t, kGuestPageSize> page);

struct HALITE_EXPORT RootScanLimits {
  uint64_t max_pfn = (uint64_t{1} << 40) - 1;
  uint32_t max_roots = 1024;          // new roots returned at most
  uint32_t min_kernel_entries = 2;    // a known root whose kernel half has fewer present entries is not matched
  uint32_t max_checked_subtables = 16;  // user-half entries of a candidate whose table is checked to look valid
};

struct HALITE_EXPORT RootScan {
  std::vector<PagingRoot> roots;  // new roots, in candidate order
  uint64_t candidates = 0;        // distinct candidate pages examined
  uint64_t not_tables = 0;        // did not look like a top-level table (or a sub-table did not look valid)
  uint64_t other_kernel = 0;      // a table, but its kernel half matches no known root
  uint64_t empty_user_half = 0;   // matched, but no user mapping (kernel threads' tables, the kernel's own)
  uint64_t kernel_aliases = 0;    // matched, but the user half only aliases the kernel half (trampoline_pgd)
  uint64_t duplicates = 0;        // same page as a known root, or the same content as a root already found
  bool truncated = false;         // max_roots reached
};

// Reads each candidate page (e.g. every non-zero page of guest memory, or those that passed
// LooksLikeTopLevelTable while streaming) and keeps those whose kernel half equals a known root's and whose user
// half maps something of its own (entries aliasing the kernel half do not count) through tables that look valid.
// The new roots take the levels of the root they match.
// Errors: the reader's.
HALITE_EXPORT Result<RootScan> FindSharedKernelRoots(const GuestPageReader& read, std::span<const PagingRoot> known,
                                       std::span<const uint64_t> candidate_pfns, const RootScanLimits& limits = {});

// ---- All of it in one call ----

struct HALITE_EXPORT GuestWalkOptions {
  WalkLimits limits;                 // per address space; max_pfn also bounds the root scan
  bool find_shared_kernel_roots = true;
  uint32_t max_roots = 1024;         // roots found by the scan, on top of the vCPUs'
  uint64_t max_total_tables = uint64_t{1} << 21;  // across all address spaces
  uint64_t max_total_runs = uint64_t{1} << 23;
  // Linux page-table isolation: a vCPU in user mode runs on the user copy (the odd page of an 8 KiB pair) whose
  // kernel half is nearly empty. Use the even page (the kernel copy, same user half) instead when it looks so.
  bool prefer_pti_kernel_copy = true;
};

struct HALITE_EXPORT GuestWalk {
  std::vector<AddressSpaceWalk> spaces;  // vCPU roots first (deduplicated), then the roots the scan found
  uint32_t cpu_roots = 0;                // distinct roots from the vCPUs
  uint32_t pti_kernel_copies = 0;        // vCPU roots replaced by their PTI kernel copy
  RootScan scan;
  bool truncated = false;                // a total limit stopped the walks early (see each space's stats too)
};

// Walks every vCPU root (duplicates dropped), then looks for other address spaces among `candidate_pfns` (empty:
// no scan) and walks them too. The kernel half shared by several roots is walked once, with the first root that
// has it; the others get their user half only, in which entries naming a table of that kernel half are aliases and
// skipped. Errors: the reader's; kNotFound when no vCPU root table exists.
HALITE_EXPORT Result<GuestWalk> WalkGuestAddressSpaces(const GuestPageReader& read, std::span<const PagingRoot> cpu_roots,
                                         std::span<const uint64_t> candidate_pfns,
                                         const GuestWalkOptions& options = {});

// ---- For the checkpoint writer ----

// Where guest-physical memory is: bytes gpa..gpa+size-1 are region `region` from byte `region_offset` on. A VMM
// may split a region (QEMU's pc.ram sits on both sides of the PCI hole below 4 GiB), so the map is a list.
struct HALITE_EXPORT GuestMemoryRange {
  uint64_t gpa = 0;
  uint64_t size = 0;
  uint32_t region = 0;
  uint64_t region_offset = 0;
  bool operator==(const GuestMemoryRange&) const = default;
};
// The map of a VMM whose every region is one range at its guest_phys_base.
HALITE_EXPORT std::vector<GuestMemoryRange> RegionsAsMemoryMap(std::span<const Region> regions);

// Converts walks into the writer's virtual-address hints (CheckpointWriter::AddVaRuns): guest-physical pages are
// mapped to (region, page) through each region's guest_phys_base and size, runs are split at region boundaries
// and pages outside every region are dropped; address_space is the walk's index. Order: the user halves of all
// spaces (each in VA order), then the kernel halves' 4 KiB mappings, then their large-page mappings last (the
// kernel's direct map of all memory in 2 MiB/1 GiB pages would otherwise claim every page in physical order
// before any process's mappings are seen).
HALITE_EXPORT std::vector<PageRun> ToPageRuns(std::span<const AddressSpaceWalk> walks, std::span<const Region> regions);
// The same through a memory map (ranges that are not page-aligned are ignored; pages in no range are dropped).
HALITE_EXPORT std::vector<PageRun> ToPageRuns(std::span<const AddressSpaceWalk> walks,
                                              std::span<const GuestMemoryRange> memory_map);

// Distinct guest pages mapped by any walk for which `count(pfn)` is true (e.g. "the page is not all zeros"):
// the numerator of VA coverage. Without `kernel_large_pages`, the kernel half's 2 MiB and 1 GiB mappings are
// left out: on Linux they map all memory (the direct map), so they say little about locality.
HALITE_EXPORT uint64_t CountMappedPages(std::span<const AddressSpaceWalk> walks, const std::function<bool(uint64_t pfn)>& count,
                          bool kernel_large_pages = true);

}  // namespace halite::x86

#endif  // HALITE_X86_PAGE_TABLES_H_
