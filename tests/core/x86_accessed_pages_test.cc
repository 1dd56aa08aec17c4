// Accessed-bit sampling (halite/x86_accessed_pages.h) on page tables built in memory: what a sample reports,
// what it clears, and what it never writes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "halite/x86_accessed_pages.h"
#include "support/guest_page_tables.h"

using namespace halite;
using namespace halite::x86;
using halite::testing::Guest;
using halite::testing::kA;
using halite::testing::kKernelHalf;
using halite::testing::kP;
using Page = halite::testing::Page;

namespace {

constexpr uint64_t kD = 1u << 6;
constexpr uint64_t kAddrMask = 0x000FFFFFFFFFF000ull;

// Sets the accessed bit along the walk of `va` from `root`, as the processor does when it translates it.
void Touch(Guest& g, uint64_t root, uint64_t va, int leaf_level = 1) {
  uint64_t table = root;
  for (int level = 4; level >= leaf_level; --level) {
    const size_t i = (va >> (12 + 9 * (level - 1))) & 511;
    const uint64_t e = g.Get(table, i);
    g.Set(table, i, e | kA);
    table = (e & kAddrMask) >> 12;
  }
}

std::vector<uint64_t> Pfns(const AccessSample& s) {
  std::vector<uint64_t> out;
  for (const auto& w : s.spaces) {
    for (const VaRun& r : w.runs) {
      for (uint64_t p = 0; p < r.pages; ++p) out.push_back(r.pfn + p);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Two processes sharing one kernel half: a kernel-half 4 KiB page and the direct map's 2 MiB page, each
// process two user pages. The leaves are created with the accessed bit set, as an OS maps pages it faults in.
struct TwoProcesses {
  Guest g;
  uint64_t kernel_root, a, b;
  TwoProcesses() {
    kernel_root = g.NewTable();
    g.Map(kernel_root, kKernelHalf + 0x1000, 0x50, 1, kA);       // e.g. a vmalloc page
    g.Map(kernel_root, kKernelHalf + 0x40000000, 0x200, 2, kA);  // direct map, 2 MiB
    a = g.NewTable();
    b = g.NewTable();
    for (uint64_t root : {a, b}) {
      for (size_t i = 256; i < 512; ++i) g.Set(root, i, g.Get(kernel_root, i));
    }
    g.Map(a, 0x400000, 0x10, 1, kA);
    g.Map(a, 0x401000, 0x11, 1, kA | kD);
    g.Map(b, 0x400000, 0x20, 1, kA);
    g.Map(b, 0x7000000, 0x21, 1, kA);
    for (uint64_t root : {a, b}) {
      for (size_t i = 0; i < 512; ++i) {
        if (g.Get(root, i) & kP) g.Set(root, i, g.Get(root, i) | kA);
      }
    }
  }
};

}  // namespace

TEST_CASE("accessed bits: the first sample clears, later ones report what was touched in between", "[accessed]") {
  TwoProcesses t;
  Guest& g = t.g;
  AccessedBitSampler sampler(g.Reader(), g.Writer());
  const PagingRoot a{t.a, 4};

  auto first = sampler.Sample(std::span(&a, 1));
  REQUIRE(first);
  CHECK(first->spaces.empty());  // everything accumulated since boot: not a measurement
  CHECK(first->live_roots == 1);
  CHECK(first->measured_roots == 0);
  CHECK(first->entries_cleared > 0);

  auto idle = sampler.Sample(std::span(&a, 1));
  REQUIRE(idle);
  CHECK(idle->measured_roots == 1);
  CHECK(Pfns(*idle).empty());
  CHECK(idle->tables_written == 0);

  Touch(g, t.a, 0x401000);
  Touch(g, t.kernel_root, kKernelHalf + 0x1000);
  auto touched = sampler.Sample(std::span(&a, 1));
  REQUIRE(touched);
  CHECK(Pfns(*touched) == std::vector<uint64_t>{0x11, 0x50});

  // Reported once: the bits are clear again.
  auto again = sampler.Sample(std::span(&a, 1));
  REQUIRE(again);
  CHECK(Pfns(*again).empty());
}

TEST_CASE("accessed bits: the dirty bit and the top level are never written", "[accessed]") {
  TwoProcesses t;
  Guest& g = t.g;
  const auto root_before = g.PageAt(t.a);
  AccessedBitSampler sampler(g.Reader(), g.Writer());
  const PagingRoot a{t.a, 4};
  REQUIRE(sampler.Sample(std::span(&a, 1)));
  CHECK(g.PageAt(t.a) == root_before);
  // The leaf of 0x401000: accessed cleared, dirty kept.
  uint64_t table = t.a;
  for (int level = 4; level > 1; --level) {
    table = (g.Get(table, (uint64_t{0x401000} >> (12 + 9 * (level - 1))) & 511) & kAddrMask) >> 12;
  }
  const uint64_t leaf = g.Get(table, (0x401000 >> 12) & 511);
  CHECK((leaf & kA) == 0);
  CHECK((leaf & kD) != 0);
  CHECK((leaf & kAddrMask) >> 12 == 0x11);
}

TEST_CASE("accessed bits: a root not on a vCPU is never written, a new one is measured from its second sample",
          "[accessed]") {
  TwoProcesses t;
  Guest& g = t.g;
  // Process b is not running: nothing of its user half may be written (its tables could be freed pages).
  std::vector<std::pair<uint64_t, Page>> b_tables;
  {
    auto walk = WalkAddressSpace(g.Reader(), PagingRoot{t.b, 4}, WalkLimits{.user_half_only = true});
    REQUIRE(walk);
    for (uint64_t pfn : walk->table_pfns) b_tables.emplace_back(pfn, g.PageAt(pfn));
  }
  AccessedBitSampler sampler(g.Reader(), g.Writer());
  const PagingRoot a{t.a, 4}, b{t.b, 4};
  REQUIRE(sampler.Sample(std::span(&a, 1)));
  REQUIRE(sampler.Sample(std::span(&a, 1)));
  for (const auto& [pfn, page] : b_tables) CHECK(g.PageAt(pfn) == page);

  // b comes onto a vCPU: its first sample clears what it accumulated, the next reports.
  const std::array<PagingRoot, 2> both{a, b};
  auto meet = sampler.Sample(both);
  REQUIRE(meet);
  CHECK(meet->live_roots == 2);
  CHECK(meet->measured_roots == 1);
  CHECK(Pfns(*meet).empty());
  Touch(g, t.b, 0x7000000);
  auto later = sampler.Sample(both);
  REQUIRE(later);
  CHECK(later->measured_roots == 2);
  CHECK(Pfns(*later) == std::vector<uint64_t>{0x21});
}

TEST_CASE("accessed bits: samples become an access trace without the direct map, each page once", "[accessed]") {
  TwoProcesses t;
  Guest& g = t.g;
  AccessedBitSampler sampler(g.Reader(), g.Writer());
  const PagingRoot a{t.a, 4};
  std::vector<AccessSample> samples;
  REQUIRE(sampler.Sample(std::span(&a, 1)));
  Touch(g, t.a, 0x400000);
  Touch(g, t.kernel_root, kKernelHalf + 0x40000000, 2);  // the direct map: left out of the trace
  auto s1 = sampler.Sample(std::span(&a, 1));
  REQUIRE(s1);
  CHECK(Pfns(*s1).size() == 1 + 512);
  samples.push_back(*s1);
  Touch(g, t.a, 0x400000);
  Touch(g, t.a, 0x401000);
  auto s2 = sampler.Sample(std::span(&a, 1));
  REQUIRE(s2);
  samples.push_back(*s2);

  // Guest memory: one region at guest-physical 0 holding pages 0..0x3ff.
  const std::vector<GuestMemoryRange> map{{0, 0x400 * 4096, 0, 0}};
  const auto runs = AccessedPageRuns(samples, map);
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].first == PageRef{0, 0x10});  // sample 1
  CHECK(runs[0].count == 1);
  CHECK(runs[1].first == PageRef{0, 0x11});  // sample 2: 0x10 was given already
  CHECK(runs[1].count == 1);
}

TEST_CASE("accessed bits: a write failure stops the sample", "[accessed]") {
  TwoProcesses t;
  Guest& g = t.g;
  AccessedBitSampler sampler(g.Reader(), [](uint64_t pfn, std::span<const uint8_t, 4096>) -> Status {
    return Status::IoError("guest memory: page " + std::to_string(pfn) + " not writable");
  });
  const PagingRoot a{t.a, 4};
  auto s = sampler.Sample(std::span(&a, 1));
  REQUIRE_FALSE(s);
  CHECK(s.error().code() == StatusCode::kIoError);
  const PagingRoot missing{0x9999, 4};
  AccessedBitSampler none(g.Reader(), g.Writer());
  CHECK_FALSE(none.Sample(std::span(&missing, 1)));
}
