// The x86-64 guest page-table walker, on page tables built in memory.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <random>

#include "halite/checkpoint_writer.h"
#include "halite/x86_guest_hints.h"
#include "halite/x86_page_tables.h"
#include "support/guest_page_tables.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::x86;

namespace {

using halite::testing::Guest;
using halite::testing::kA;
using halite::testing::kKernelHalf;
using halite::testing::kP;
using halite::testing::kPs;
using halite::testing::kRw;
using halite::testing::kTable;
using halite::testing::kUs;
using Page = halite::testing::Page;

std::vector<VaRun> Runs(const AddressSpaceWalk& w) { return w.runs; }

}  // namespace

TEST_CASE("page walk: control registers select the paging mode", "[x86walk]") {
  const uint64_t pg = 1ull << 31, pae = 1u << 5, la57 = 1u << 12, lma = 1u << 10;
  auto r4 = PagingRootFromRegisters(pg | 1, 0x1234000 | 0x5a5 /* PCID */ | (1ull << 63), pae, lma | (1u << 8));
  REQUIRE(r4);
  CHECK(r4->table_pfn == 0x1234);
  CHECK(r4->levels == 4);
  auto r5 = PagingRootFromRegisters(pg | 1, 0x2000, pae | la57, lma);
  REQUIRE(r5);
  CHECK(r5->levels == 5);
  CHECK(PagingRootFromRegisters(1, 0x1000, 0, 0).status().code() == StatusCode::kUnsupported);       // no paging
  CHECK(PagingRootFromRegisters(pg, 0x1000, pae, 0).status().code() == StatusCode::kUnsupported);    // PAE
  CHECK(PagingRootFromRegisters(pg, 0x1000, 0, 0).status().code() == StatusCode::kUnsupported);      // 32-bit
  CHECK(PagingRootFromRegisters(pg, 0x1000, 0, lma).status().code() == StatusCode::kCorrupt);        // LMA w/o PAE
  CHECK(PagingRootFromRegisters(pg, 1ull << 55, pae, lma).status().code() == StatusCode::kCorrupt);  // reserved
}

TEST_CASE("page walk: 4-level mappings come out in virtual-address order as maximal runs", "[x86walk]") {
  Guest g;
  uint64_t root = g.NewTable();
  // User: 3 pages contiguous in both spaces, then a VA-adjacent page elsewhere, then a gap.
  g.Map(root, 0x400000, 0x10);
  g.Map(root, 0x401000, 0x11);
  g.Map(root, 0x402000, 0x12);
  g.Map(root, 0x403000, 0x40);
  g.Map(root, 0x7fff0000, 0x41);
  // Kernel half (canonical sign extension): mapped out of order on purpose.
  g.Map(root, kKernelHalf + 0x5000, 0x31);
  g.Map(root, kKernelHalf + 0x4000, 0x30);
  auto w = WalkAddressSpace(g.Reader(), PagingRoot{root, 4});
  REQUIRE(w);
  std::vector<VaRun> want = {
      {0x400000, 0x10, 3, 1}, {0x403000, 0x40, 1, 1}, {0x7fff0000, 0x41, 1, 1}, {kKernelHalf + 0x4000, 0x30, 2, 1}};
  CHECK(Runs(*w) == want);
  CHECK(w->stats.leaves_4k == 7);
  CHECK(w->stats.mapped_pages == 7);
  CHECK(w->stats.tables == 1 + 5 + 3);  // root; user PDPT, 2 PDs, 2 PTs (0x7fff0000 is in another GiB); kernel 3
  CHECK(!w->stats.truncated);
  CHECK(w->runs.back().kernel_half());

  WalkLimits user;
  user.user_half_only = true;
  auto u = WalkAddressSpace(g.Reader(), PagingRoot{root, 4}, user);
  REQUIRE(u);
  CHECK(u->runs.size() == 3);
}

TEST_CASE("page walk: 5-level paging (LA57)", "[x86walk]") {
  Guest g(5);
  uint64_t root = g.NewTable();
  const uint64_t high_user = 0x0000800000000000ull;  // beyond 48 bits: only with 5 levels
  const uint64_t kernel = 0xff00000000000000ull;     // first canonical kernel address, 5 levels
  g.Map(root, 0x1000, 0x20);
  g.Map(root, high_user, 0x21);
  g.Map(root, high_user + 0x1000, 0x22);
  g.Map(root, kernel + 0x200000, 0x400, 2);
  auto w = WalkAddressSpace(g.Reader(), PagingRoot{root, 5});
  REQUIRE(w);
  std::vector<VaRun> want = {{0x1000, 0x20, 1, 1}, {high_user, 0x21, 2, 1}, {kernel + 0x200000, 0x400, 512, 2}};
  CHECK(Runs(*w) == want);
  CHECK(w->stats.leaves_2m == 1);
  // The same tables read as 4 levels see other addresses (the PML5 is taken for a PML4), never crash.
  auto w4 = WalkAddressSpace(g.Reader(), PagingRoot{root, 4});
  REQUIRE(w4);
}

TEST_CASE("page walk: 2 MiB and 1 GiB pages, merging, clipping and reserved bits", "[x86walk]") {
  Guest g;
  uint64_t root = g.NewTable();
  g.Map(root, 0x40000000, 0x0, 3);            // 1 GiB: pfns 0..0x3ffff
  g.Map(root, 0x80000000, 0x40000, 3);        // continues both: merged
  g.Map(root, 0xc0000000, 0x200, 2);          // 2 MiB
  g.Map(root, 0xc0200000, 0x400, 2);          // continues both
  g.Map(root, 0xc0400000, 0x600, 1);          // 4 KiB continuing both, but a different leaf size: new run
  g.Map(root, 0xc0600000, 0x800 | 0x2, 2);    // misaligned 2 MiB page: bits 20:13 set -> bad entry
  g.Map(root, 0xc0800000, 0xa00 | 0x1, 2);    // bit 12 of a 2 MiB leaf is PAT, not an address bit
  g.Map(root, 0x100000000, 0x7fe00, 2);       // crosses max_pfn: clipped
  g.Map(root, 0x100200000, 0x90000, 2);       // entirely beyond max_pfn (MMIO): dropped
  WalkLimits lim;
  lim.max_pfn = 0x7ff7f;
  auto w = WalkAddressSpace(g.Reader(), PagingRoot{root, 4}, lim);
  REQUIRE(w);
  std::vector<VaRun> want = {{0x40000000, 0x0, 0x7ff80, 3},  // the second 1 GiB page clipped at max_pfn
                             {0xc0000000, 0x200, 1024, 2},
                             {0xc0400000, 0x600, 1, 1},
                             {0xc0800000, 0xa00, 512, 2},
                             {0x100000000, 0x7fe00, 0x180, 2}};
  CHECK(Runs(*w) == want);
  CHECK(w->stats.leaves_1g == 2);
  CHECK(w->stats.leaves_2m == 5);
  CHECK(w->stats.bad_entries == 1);
  CHECK(w->stats.outside_leaves == 1);
}

TEST_CASE("page walk: PS in a PML4 entry, tables beyond memory and missing tables are skipped", "[x86walk]") {
  Guest g;
  uint64_t root = g.NewTable();
  g.Map(root, 0x1000, 0x50);
  g.Set(root, 1, (0x60ull << 12) | kTable | kPs);  // PS is reserved in a PML4 entry
  g.Set(root, 2, (0x9999999ull << 12) | kTable);   // beyond max_pfn
  g.Set(root, 3, (0x777ull << 12) | kTable);       // not in memory
  WalkLimits lim;
  lim.max_pfn = 0xfffff;
  auto w = WalkAddressSpace(g.Reader(), PagingRoot{root, 4}, lim);
  REQUIRE(w);
  CHECK(w->runs.size() == 1);
  CHECK(w->stats.bad_entries == 2);
  CHECK(w->stats.missing_tables == 1);

  auto missing = WalkAddressSpace(g.Reader(), PagingRoot{0x5555, 4}, lim);
  CHECK(missing.status().code() == StatusCode::kNotFound);
  auto bad_levels = WalkAddressSpace(g.Reader(), PagingRoot{root, 3}, lim);
  CHECK(bad_levels.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("page walk: cycles and tables shared many times are walked once", "[x86walk]") {
  Guest g;
  uint64_t root = g.NewTable();
  g.Map(root, 0x1000, 0x50);
  uint64_t pdpt = g.Get(root, 0) >> 12 & 0xFFFFFFFFFF;
  uint64_t pd = g.Get(pdpt, 0) >> 12 & 0xFFFFFFFFFF;
  g.Set(pdpt, 1, (root << 12) | kTable);  // PDPT -> PML4 as a PD: a cycle back to the root
  g.Set(pd, 1, (pd << 12) | kTable);      // PD -> itself as a PT
  g.Set(root, 1, (root << 12) | kTable);  // PML4 -> itself as a PDPT (a recursive self-map, as Windows has)
  // Every entry of every level of a second tree points to one table: 512^4 paths, one table a level.
  uint64_t t = g.NewTable();
  for (size_t i = 0; i < 512; ++i) g.Set(t, i, (t << 12) | kTable);
  g.Set(root, 300, (t << 12) | kTable);
  auto w = WalkAddressSpace(g.Reader(), PagingRoot{root, 4});
  REQUIRE(w);
  CHECK(!w->stats.truncated);
  // At most one read per (table, level): 5 distinct pages here, 4 levels.
  CHECK(w->stats.tables <= 5 * 4);
  CHECK(g.reads == w->stats.tables);
  CHECK(w->stats.revisited_tables > 1000);
  // Tables read as PTs map table pages as data: at most 512 leaves per table read.
  CHECK(w->stats.leaves_4k <= w->stats.tables * 512);
}

TEST_CASE("page walk: limits stop hostile tables", "[x86walk]") {
  Guest g;
  uint64_t root = g.NewTable();
  for (uint64_t i = 0; i < 4096; ++i) g.Map(root, 0x200000 * i, 0x10000 + 2 * i);  // 4096 PTs, non-adjacent
  WalkLimits lim;
  lim.max_tables = 100;
  auto w = WalkAddressSpace(g.Reader(), PagingRoot{root, 4}, lim);
  REQUIRE(w);
  CHECK(w->stats.truncated);
  CHECK(w->stats.tables == 100);
  lim = WalkLimits{};
  lim.max_runs = 10;
  w = WalkAddressSpace(g.Reader(), PagingRoot{root, 4}, lim);
  REQUIRE(w);
  CHECK(w->stats.truncated);
  CHECK(w->runs.size() == 10);
}

TEST_CASE("page walk: random memory as page tables terminates within bounds", "[x86walk]") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::map<uint64_t, Page> mem;
    for (uint64_t pfn = 0; pfn < 64; ++pfn) {
      Page p;
      for (size_t i = 0; i < 512; ++i) {
        uint64_t e = rng();
        if (round % 2) e = (e & 0x3f000) | (e & 0x8000000000000fffull);  // aim targets at the 64 pages
        std::memcpy(p.data() + 8 * i, &e, 8);
      }
      mem[pfn] = p;
    }
    GuestPageReader read = [&](uint64_t pfn, std::span<uint8_t, 4096> out) -> Result<bool> {
      auto it = mem.find(pfn);
      if (it == mem.end()) return false;
      std::memcpy(out.data(), it->second.data(), 4096);
      return true;
    };
    WalkLimits lim;
    lim.max_pfn = 63;
    auto w = WalkAddressSpace(read, PagingRoot{uint64_t(round % 64), 4 + round % 2}, lim);
    REQUIRE(w);
    CHECK(w->stats.tables <= 64 * 5);
    for (const VaRun& r : w->runs) CHECK(r.pfn + r.pages - 1 <= 63);
    auto all = WalkGuestAddressSpaces(read, std::vector<PagingRoot>{{0, 4}}, std::vector<uint64_t>{0, 1, 2, 3, 4});
    REQUIRE(all);
  }
}

TEST_CASE("page walk: reader errors stop the walk", "[x86walk]") {
  Guest g;
  uint64_t root = g.NewTable();
  g.Map(root, 0x1000, 0x50);
  auto inner = g.Reader();
  GuestPageReader failing = [&](uint64_t pfn, std::span<uint8_t, 4096> out) -> Result<bool> {
    if (pfn != root) return Status::IoError("spool: read of pfn " + std::to_string(pfn) + " failed", 5);
    return inner(pfn, out);
  };
  auto w = WalkAddressSpace(failing, PagingRoot{root, 4});
  CHECK(w.status().code() == StatusCode::kIoError);
}

namespace {

// A Linux-like guest: a kernel top-level table with a direct map (1 GiB and 2 MiB pages), kernel text in 2 MiB
// pages and vmalloc in 4 KiB pages; processes whose tables copy the kernel half; a kernel thread's table with no
// user half; a table of another "kernel"; and a page of data that looks like nothing.
struct LinuxGuest {
  Guest g{4, 0x8000};
  uint64_t kernel_pgd = 0;
  std::vector<uint64_t> process_pgds;
  uint64_t kthread_pgd = 0, foreign_pgd = 0, pti_user_copy = 0;

  LinuxGuest() {
    kernel_pgd = g.NewTable();
    g.NewTable();  // keep the next PGD on an even pfn
    g.Map(kernel_pgd, 0xffff888000000000ull, 0x0, 3);          // direct map: first GiB
    for (uint64_t i = 0; i < 16; ++i) g.Map(kernel_pgd, 0xffff888040000000ull + (i << 21), 0x40000 + (i << 9), 2);
    g.Map(kernel_pgd, 0xffffffff81000000ull, 0x1000, 2);        // kernel text
    for (uint64_t i = 0; i < 8; ++i) g.Map(kernel_pgd, 0xffffc90000000000ull + (i << 12), 0x7000 - 3 * i);  // vmalloc
    for (int p = 0; p < 3; ++p) {
      g.AlignNext();
      uint64_t pgd = g.NewTable();
      g.NewTable();  // the PTI user copy's slot
      for (size_t i = 256; i < 512; ++i) g.Set(pgd, i, g.Get(kernel_pgd, i) & ~(p == 1 ? kA : 0));
      for (uint64_t i = 0; i < 4; ++i) g.Map(pgd, 0x400000 + (i << 12), 0x5000 + 100 * p + 7 * i);
      g.Map(pgd, 0x7ffd0000 + (uint64_t(p) << 12), 0x6000 + p);
      process_pgds.push_back(pgd);
    }
    // PTI: process 2 also has a user copy at pfn+1 with the same user half and a near-empty kernel half.
    pti_user_copy = process_pgds[2] + 1;
    for (size_t i = 0; i < 256; ++i) g.Set(pti_user_copy, i, g.Get(process_pgds[2], i));
    g.Set(pti_user_copy, 511, g.Get(kernel_pgd, 511));  // the entry trampoline's half
    kthread_pgd = g.NewTable();
    for (size_t i = 256; i < 512; ++i) g.Set(kthread_pgd, i, g.Get(kernel_pgd, i));
    foreign_pgd = g.NewTable();
    g.Map(foreign_pgd, 0x1000, 0x5555);
    g.Map(foreign_pgd, kKernelHalf, 0x5556);
    g.Fill(0x9000, 0x11);  // odd bytes everywhere: not a table
  }
};

}  // namespace

TEST_CASE("page walk: other address spaces share the kernel half", "[x86walk]") {
  LinuxGuest lg;
  Guest& g = lg.g;
  std::vector<uint64_t> candidates = g.AllPfns();

  auto scan = FindSharedKernelRoots(g.Reader(), std::vector<PagingRoot>{{lg.process_pgds[0], 4}}, candidates);
  REQUIRE(scan);
  std::vector<PagingRoot> want = {{lg.process_pgds[1], 4}, {lg.process_pgds[2], 4}};
  CHECK(scan->roots == want);           // the accessed bit does not matter (process 1 has it clear)
  CHECK(scan->empty_user_half == 2);    // the kernel's own table and the kernel thread's
  CHECK(scan->other_kernel >= 1);       // the foreign table (and the PTI user copy)
  CHECK(scan->duplicates == 1);         // the known root itself
  CHECK(scan->not_tables > 0);

  RootScanLimits few;
  few.max_roots = 1;
  auto capped = FindSharedKernelRoots(g.Reader(), std::vector<PagingRoot>{{lg.process_pgds[0], 4}}, candidates, few);
  REQUIRE(capped);
  CHECK(capped->roots.size() == 1);
  CHECK(capped->truncated);

  // A known root with an empty kernel half matches nothing.
  auto none = FindSharedKernelRoots(g.Reader(), std::vector<PagingRoot>{{lg.foreign_pgd + 100, 4}}, candidates);
  REQUIRE(none);
  CHECK(none->roots.empty());
}

TEST_CASE("page walk: a whole guest, kernel half walked once, hints ordered for the planner", "[x86walk]") {
  LinuxGuest lg;
  Guest& g = lg.g;
  // vCPU 0 runs process 0; vCPU 1 runs process 2 in user mode on its PTI user copy; vCPU 2 the same as vCPU 0.
  std::vector<PagingRoot> cpus = {{lg.process_pgds[0], 4}, {lg.pti_user_copy, 4}, {lg.process_pgds[0], 4}};
  GuestWalkOptions opt;
  opt.limits.max_pfn = 0x7ffff;  // 2 GiB of memory
  auto gw = WalkGuestAddressSpaces(g.Reader(), cpus, g.AllPfns(), opt);
  REQUIRE(gw);
  CHECK(gw->cpu_roots == 2);
  CHECK(gw->pti_kernel_copies == 1);
  REQUIRE(gw->spaces.size() == 3);
  CHECK(gw->spaces[0].root.table_pfn == lg.process_pgds[0]);
  CHECK(gw->spaces[1].root.table_pfn == lg.process_pgds[2]);
  CHECK(gw->spaces[2].root.table_pfn == lg.process_pgds[1]);
  CHECK(!gw->spaces[0].user_half_only);
  CHECK(gw->spaces[1].user_half_only);
  CHECK(gw->spaces[2].user_half_only);
  CHECK(gw->spaces[1].runs.size() == 5);  // 4 scattered user pages and the stack page
  CHECK(gw->spaces[0].stats.leaves_1g == 1);

  // Two regions: below 1 GiB and from 1 GiB; the direct map crosses the boundary.
  std::vector<Region> regions = {{"low", 0, 1ull << 30, 4096, 0}, {"high", 1ull << 30, 1ull << 30, 4096, 0x40000}};
  std::vector<PageRun> hints = ToPageRuns(gw->spaces, regions);
  REQUIRE(!hints.empty());
  // User halves first (space 0's first page), then kernel 4 KiB (vmalloc), then the large pages.
  CHECK(hints.front() == PageRun{PageRef{0, 0x5000}, 1, 0});
  size_t first_vmalloc = 0, first_large = 0;
  for (size_t i = 0; i < hints.size(); ++i) {
    if (!first_vmalloc && hints[i].first == PageRef{0, 0x7000}) first_vmalloc = i;
    if (!first_large && hints[i].count >= 512) first_large = i;
  }
  CHECK(first_vmalloc == 3 * 5);  // after the 5 user runs of each of the 3 spaces
  CHECK(first_large > first_vmalloc);
  // The 1 GiB direct-map page lies in region 0, the 2 MiB ones in region 1 at page 0.
  bool saw_high = false;
  for (const PageRun& r : hints) saw_high |= r.first.region == 1 && r.first.page == 0 && r.count == 16 * 512;
  CHECK(saw_high);

  // Distinct pages mapped: 1 GiB + 16 x 2 MiB + 2 MiB of text (inside the first GiB) + vmalloc and user pages
  // (inside the first GiB too).
  uint64_t mapped = CountMappedPages(gw->spaces, [](uint64_t) { return true; });
  CHECK(mapped == (1ull << 18) + 16 * 512);
  uint64_t high_only = CountMappedPages(gw->spaces, [](uint64_t pfn) { return pfn >= 0x40000; });
  CHECK(high_only == 16 * 512);
  // Without the kernel's large pages: the user pages (3 x 5, process 2's stack page counted once each) and
  // the 8 vmalloc pages.
  uint64_t small = CountMappedPages(gw->spaces, [](uint64_t) { return true; }, false);
  CHECK(small == 3 * 5 + 8);

  // Without the scan only the vCPU roots are walked; with total limits the walk stops early.
  opt.find_shared_kernel_roots = false;
  auto cpus_only = WalkGuestAddressSpaces(g.Reader(), cpus, g.AllPfns(), opt);
  REQUIRE(cpus_only);
  CHECK(cpus_only->spaces.size() == 2);
  opt.find_shared_kernel_roots = true;
  opt.max_total_tables = 3;
  auto limited = WalkGuestAddressSpaces(g.Reader(), cpus, g.AllPfns(), opt);
  REQUIRE(limited);
  CHECK(limited->truncated);

  auto no_root = WalkGuestAddressSpaces(g.Reader(), std::vector<PagingRoot>{{0x12345, 4}}, {}, opt);
  CHECK(no_root.status().code() == StatusCode::kNotFound);
  auto nothing = WalkGuestAddressSpaces(g.Reader(), {}, {}, opt);
  REQUIRE(nothing);
  CHECK(nothing->spaces.empty());
}

TEST_CASE("page walk: a user half aliasing the kernel half (Linux's trampoline_pgd) is no process's memory",
          "[x86walk]") {
  LinuxGuest lg;
  Guest& g = lg.g;
  constexpr uint64_t kAddr = 0x000FFFFFFFFFF000ull;
  const size_t direct = (0xffff888000000000ull >> 39) & 511;  // the direct map's top-level entry
  const uint64_t direct_pud = (g.Get(lg.kernel_pgd, direct) & kAddr) >> 12;
  // trampoline_pgd: the kernel half, and entry 0 = the direct map's own PUD, so that virtual address 0 maps
  // physical memory one to one (the real-mode trampoline needs that).
  const uint64_t tramp = g.NewTable();
  for (size_t i = 256; i < 512; ++i) g.Set(tramp, i, g.Get(lg.kernel_pgd, i));
  g.Set(tramp, 0, g.Get(lg.kernel_pgd, direct));
  // With memory KASLR the kernel copies one entry of the direct map's PUD into a PUD of its own instead: over a
  // direct map in 2 MiB pages, that entry names the direct map's PMD table (here the one of the 2 MiB pages at
  // 1 GiB).
  const uint64_t kaslr = g.NewTable(), kaslr_pud = g.NewTable();
  for (size_t i = 256; i < 512; ++i) g.Set(kaslr, i, g.Get(lg.kernel_pgd, i));
  g.Set(kaslr_pud, 1, g.Get(direct_pud, 1));
  g.Set(kaslr, 0, (kaslr_pud << 12) | kTable);

  // The scan: the trampoline is no process; the KASLR one passes (its PUD is its own) and is walked below.
  auto scan = FindSharedKernelRoots(g.Reader(), std::vector<PagingRoot>{{lg.process_pgds[0], 4}},
                                    std::vector<uint64_t>{tramp, kaslr, lg.process_pgds[1]});
  REQUIRE(scan);
  CHECK(scan->kernel_aliases == 1);
  CHECK(scan->roots == std::vector<PagingRoot>{{kaslr, 4}, {lg.process_pgds[1], 4}});

  // Walked on its own, the trampoline maps its kernel half and nothing in the user half.
  auto w = WalkAddressSpace(g.Reader(), PagingRoot{tramp, 4});
  REQUIRE(w);
  CHECK(w->stats.kernel_alias_entries == 1);
  CHECK(w->stats.leaves_1g == 1);  // the direct map's first GiB, once (kernel half)
  REQUIRE(!w->runs.empty());
  CHECK(std::none_of(w->runs.begin(), w->runs.end(), [](const VaRun& r) { return !r.kernel_half(); }));
  for (size_t i = 1; i < w->runs.size(); ++i) CHECK(w->runs[i - 1].va < w->runs[i].va);

  // A whole guest whose vCPU runs on the trampoline (a CPU coming up), the KASLR copy among the candidates: the
  // user-half runs are the three processes' pages only, and the hints start with them, not with physical memory.
  GuestWalkOptions opt;
  opt.limits.max_pfn = 0x7ffff;
  auto gw = WalkGuestAddressSpaces(g.Reader(), std::vector<PagingRoot>{{tramp, 4}}, g.AllPfns(), opt);
  REQUIRE(gw);
  uint64_t user_pages = 0, aliases = 0;
  for (const auto& space : gw->spaces) {
    aliases += space.stats.kernel_alias_entries;
    for (const VaRun& r : space.runs) user_pages += r.kernel_half() ? 0 : r.pages;
  }
  CHECK(user_pages == 3 * 5);
  CHECK(aliases == 2);  // the trampoline's entry 0, the KASLR copy's PMD
  std::vector<Region> regions = {{"ram", 0, 2ull << 30, 4096, 0}};
  std::vector<PageRun> hints = ToPageRuns(gw->spaces, regions);
  REQUIRE(!hints.empty());
  CHECK(hints.front() == PageRun{PageRef{0, 0x5000}, 1, 1});  // process 0's first page; space 0 is the trampoline
}

// ---- AddPageTableHints: the whole walk over a writer's staged pages (halite/x86_guest_hints.h) ----

namespace {

VcpuControlRegisters LongMode(uint32_t vcpu, uint64_t root_pfn) {
  // CR0.PE|PG, CR4.PAE, EFER.LME|LMA.
  return VcpuControlRegisters{vcpu, 0x80000001ull, root_pfn << 12, 0x20, 0x500};
}

// Stages the guest's pages into a writer whose two regions sit in guest-physical memory in the other order
// ("high" first: gpa 1..2 GiB; "low": 0..1 GiB), noting top-level table candidates as a streaming save would.
struct StagedGuest {
  testing::TempDir dir;
  std::unique_ptr<CheckpointWriter> writer;
  TopLevelTableCandidates candidates;
  std::vector<GuestMemoryRange> map = {{0, 1ull << 30, 1, 0}, {1ull << 30, 1ull << 30, 0, 0}};
  uint64_t nonzero = 0;

  explicit StagedGuest(Guest& g) {
    auto created = CheckpointWriter::Create(dir.File("c.hlt"), {});
    REQUIRE(created);
    writer = std::move(*created);
    REQUIRE(writer->AddRegion("high", 0, 1ull << 30));  // guest_phys_base wrong on purpose: the map decides
    REQUIRE(writer->AddRegion("low", 0, 1ull << 30));
    Page page;
    auto read = g.Reader();
    for (uint64_t pfn : g.AllPfns()) {
      REQUIRE(*read(pfn, page));
      const PageRef where = pfn < 0x40000 ? PageRef{1, pfn} : PageRef{0, pfn - 0x40000};
      REQUIRE(writer->PutPage(where.region, where.page, page).ok());
      candidates.Observe(where, page);
      nonzero += page != Page{} ? 1 : 0;
    }
  }
};

}  // namespace

TEST_CASE("guest hints: the walk reads the tables back from the writer and maps frames through the memory map",
          "[x86walk][hints]") {
  LinuxGuest lg;
  StagedGuest staged(lg.g);
  const std::vector<VcpuControlRegisters> vcpus = {LongMode(0, lg.process_pgds[0]), LongMode(1, lg.pti_user_copy)};
  auto report = AddPageTableHints(*staged.writer, vcpus, staged.map, staged.candidates);
  REQUIRE(report);
  INFO(report->skipped << " / " << report->notes);
  CHECK(report->skipped.empty());
  CHECK(report->vcpus == 2);
  CHECK(report->cpu_roots == 2);
  CHECK(report->pti_kernel_copies == 1);
  CHECK(report->scan_roots == 1);  // process 1 (kthread and foreign tables do not qualify)
  CHECK(report->missing_tables == 0);
  CHECK(!report->truncated);
  CHECK(report->nonzero_pages == staged.nonzero);
  // The 1 GiB direct map covers every page given (all below 1 GiB): all of them are mapped.
  CHECK(report->mapped_nonzero_pages == staged.nonzero);

  // The same walk straight over guest memory, mapped through the same map, gives as many hints.
  std::vector<PagingRoot> roots = {{lg.process_pgds[0], 4}, {lg.pti_user_copy, 4}};
  GuestWalkOptions opt;
  opt.limits.max_pfn = 0x7ffff;
  auto direct = WalkGuestAddressSpaces(lg.g.Reader(), roots, lg.g.AllPfns(), opt);
  REQUIRE(direct);
  std::vector<PageRun> expected = ToPageRuns(direct->spaces, staged.map);
  CHECK(report->hint_runs == expected.size());
  // The first user page (pfn 0x5000) is in region "low" (index 1) at page 0x5000; the 2 MiB pages above 1 GiB
  // in region "high" from page 0.
  REQUIRE(!expected.empty());
  CHECK(expected.front() == PageRun{PageRef{1, 0x5000}, 1, 0});
  bool saw_high = false;
  for (const PageRun& r : expected) saw_high |= r.first.region == 0 && r.first.page == 0 && r.count == 16 * 512;
  CHECK(saw_high);
  REQUIRE(staged.writer->Finish());
}

TEST_CASE("guest hints: guests that cannot be walked are reported, not errors", "[x86walk][hints]") {
  LinuxGuest lg;
  StagedGuest staged(lg.g);
  // Paging off (real mode) on the only vCPU.
  std::vector<VcpuControlRegisters> real_mode = {{0, 0x10, 0, 0, 0}};
  auto r = AddPageTableHints(*staged.writer, real_mode, staged.map, staged.candidates);
  REQUIRE(r);
  CHECK(r->skipped.find("64-bit paging") != std::string::npos);
  CHECK(r->notes.find("vCPU 0") != std::string::npos);
  CHECK(r->hint_runs == 0);
  // A root the checkpoint does not have.
  std::vector<VcpuControlRegisters> lost = {LongMode(0, 0x7000f)};
  r = AddPageTableHints(*staged.writer, lost, staged.map, staged.candidates);
  REQUIRE(r);
  CHECK(r->skipped.find("not in the checkpoint") != std::string::npos);
  // A memory map naming no region of the writer.
  std::vector<GuestMemoryRange> elsewhere = {{0, 1ull << 30, 7, 0}};
  r = AddPageTableHints(*staged.writer, std::vector{LongMode(0, lg.process_pgds[0])}, elsewhere, staged.candidates);
  REQUIRE(r);
  CHECK(r->skipped.find("memory map") != std::string::npos);
  // No vCPU at all.
  r = AddPageTableHints(*staged.writer, {}, staged.map, staged.candidates);
  REQUIRE(r);
  CHECK(!r->skipped.empty());
}

TEST_CASE("guest hints: the candidate list is capped and says so", "[x86walk][hints]") {
  LinuxGuest lg;
  Page page;
  auto read = lg.g.Reader();
  TopLevelTableCandidates few(2);
  for (uint64_t pfn : lg.g.AllPfns()) {
    REQUIRE(*read(pfn, page));
    few.Observe(PageRef{0, pfn}, page);
  }
  CHECK(few.entries().size() == 2);
  CHECK(few.truncated());
  // Random bytes are never a candidate.
  std::mt19937_64 rng(7);
  TopLevelTableCandidates none;
  for (int i = 0; i < 100; ++i) {
    for (size_t j = 0; j < page.size(); j += 8) {
      uint64_t v = rng();
      std::memcpy(page.data() + j, &v, 8);
    }
    none.Observe(PageRef{0, uint64_t(i)}, page);
  }
  CHECK(none.entries().empty());
}
