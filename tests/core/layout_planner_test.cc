// The layout planner on its own: no file, no compression, only the plan (format-spec 10).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>

#include "halite/format_constants.h"
#include "writer/layout_planner.h"

using namespace halite;
using namespace halite::writer;
using format::kPageMapAbsent;
using format::kPageMapFirstSlot;
using format::kPageMapZero;

namespace {

// A guest of `kinds.size()` pages; content pages carry `content[g]` (equal values = equal bytes).
struct Guest {
  std::vector<PlannedPageKind> kinds;
  std::vector<int> content;
  std::vector<codec::Hash128> hashes;
  std::vector<GlobalRun> access, va;
  std::vector<PlannerRegion> regions;
  int comparisons = 0;
  // Hashes derive from content; `collide` gives every page the same hash, so only the byte check separates them.
  void Hash(bool collide = false) {
    hashes.assign(kinds.size(), {});
    for (size_t g = 0; g < kinds.size(); ++g) {
      if (kinds[g] == PlannedPageKind::kContent) hashes[g] = {collide ? 1u : uint64_t(content[g]) + 1, 7};
    }
  }
  Result<BlockPlan> Plan(LayoutPolicy policy, uint32_t block_pages) {
    PlannerInput in;
    in.policy = policy;
    in.block_pages = block_pages;
    in.pages = kinds;
    in.hashes = hashes;
    in.access = access;
    in.va = va;
    in.regions = regions;
    return PlanBlocks(in, [this](uint64_t a, uint64_t b) -> Result<bool> {
      ++comparisons;
      return content[a] == content[b];
    });
  }
};

Guest Distinct(size_t n) {
  Guest g;
  g.kinds.assign(n, PlannedPageKind::kContent);
  for (size_t i = 0; i < n; ++i) g.content.push_back(int(i) + 1000);
  g.Hash();
  return g;
}

}  // namespace

TEST_CASE("planner: zero and absent pages are never stored", "[planner]") {
  Guest g = Distinct(6);
  g.kinds[1] = PlannedPageKind::kZero;
  g.kinds[4] = PlannedPageKind::kAbsent;
  g.Hash();
  auto plan = g.Plan(LayoutPolicy::kPhysical, 64);
  REQUIRE(plan.has_value());
  CHECK(plan->page_map[1] == kPageMapZero);
  CHECK(plan->page_map[4] == kPageMapAbsent);
  CHECK(plan->slot_page == std::vector<uint32_t>{0, 2, 3, 5});
  CHECK(plan->zero_pages == 1);
  CHECK(plan->absent_pages == 1);
  CHECK(plan->page_map[5] == kPageMapFirstSlot + 3);
}

TEST_CASE("planner: duplicates share the slot of the first copy in plan order, confirmed byte for byte",
          "[planner]") {
  Guest g = Distinct(8);
  g.content[6] = g.content[2];  // same bytes as page 2
  g.Hash();
  g.access = {{6, 1}};  // page 6 comes first in plan order: it is the copy stored
  auto plan = g.Plan(LayoutPolicy::kHalite, 64);
  REQUIRE(plan.has_value());
  CHECK(plan->slot_page[0] == 6);
  CHECK(plan->page_map[2] == plan->page_map[6]);
  CHECK(plan->duplicate_pages == 1);
  CHECK(g.comparisons == 1);
  SECTION("equal hashes with other bytes keep their own slots") {
    Guest c = Distinct(5);
    c.Hash(/*collide=*/true);
    auto p = c.Plan(LayoutPolicy::kPhysical, 64);
    REQUIRE(p.has_value());
    CHECK(p->slot_page.size() == 5);
    CHECK(p->duplicate_pages == 0);
  }
  SECTION("a failing comparison fails the plan") {
    PlannerInput in;
    in.block_pages = 4;
    in.pages = g.kinds;
    in.hashes = g.hashes;
    auto p = PlanBlocks(in, [](uint64_t, uint64_t) -> Result<bool> { return Status::IoError("staging read"); });
    REQUIRE_FALSE(p.has_value());
    CHECK(p.error().code() == StatusCode::kIoError);
  }
}

TEST_CASE("planner: blocks of block_pages slots, cut where the working set ends", "[planner]") {
  Guest g = Distinct(20);
  g.access = {{10, 5}};  // 5 hot pages, block_pages 4: hot blocks of 4 and 1, then the rest
  g.va = {{0, 3}};
  auto plan = g.Plan(LayoutPolicy::kHalite, 4);
  REQUIRE(plan.has_value());
  REQUIRE(plan->blocks.size() == 6);  // 4+1 hot, then 15 cold in 4+4+4+3
  CHECK(plan->blocks[0].hot);
  CHECK(plan->blocks[1].hot);
  CHECK(plan->blocks[1].pages == 1);
  CHECK_FALSE(plan->blocks[2].hot);
  CHECK(plan->blocks[5].pages == 3);
  CHECK(plan->accessed_pages == 5);
  CHECK(plan->working_set_blocks == 2);
  CHECK(plan->restore_order == std::vector<uint32_t>{0, 1, 2, 3, 4, 5});
  // Slots follow the plan: access (10..14), then VA (0..2), then physical.
  CHECK(std::vector<uint32_t>(plan->slot_page.begin(), plan->slot_page.begin() + 8) ==
        std::vector<uint32_t>{10, 11, 12, 13, 14, 0, 1, 2});
  for (size_t b = 0; b < plan->blocks.size(); ++b) {
    const auto& bl = plan->blocks[b];
    for (uint64_t s = bl.first_slot; s < bl.first_slot + bl.pages; ++s) {
      CHECK(plan->page_map[plan->slot_page[s]] == kPageMapFirstSlot + s);
    }
  }
}

TEST_CASE("planner: each policy uses its own hints", "[planner]") {
  Guest g = Distinct(12);
  g.access = {{9, 2}};
  g.va = {{4, 2}};
  auto first_slots = [&](LayoutPolicy p) {
    auto plan = g.Plan(p, 64);
    REQUIRE(plan.has_value());
    return std::vector<uint32_t>(plan->slot_page.begin(), plan->slot_page.begin() + 4);
  };
  CHECK(first_slots(LayoutPolicy::kHalite) == std::vector<uint32_t>{9, 10, 4, 5});
  CHECK(first_slots(LayoutPolicy::kAccess) == std::vector<uint32_t>{9, 10, 0, 1});
  CHECK(first_slots(LayoutPolicy::kVa) == std::vector<uint32_t>{4, 5, 0, 1});
  CHECK(first_slots(LayoutPolicy::kPhysical) == std::vector<uint32_t>{0, 1, 2, 3});
  auto va = g.Plan(LayoutPolicy::kVa, 64);
  REQUIRE(va.has_value());
  CHECK(va->working_set_blocks == 0);  // only the access trace makes a working set
}

TEST_CASE("planner: edge cases", "[planner]") {
  SECTION("no pages") {
    Guest g;
    auto plan = g.Plan(LayoutPolicy::kHalite, 64);
    REQUIRE(plan.has_value());
    CHECK(plan->blocks.empty());
    CHECK(plan->page_map.empty());
  }
  SECTION("all zero") {
    Guest g;
    g.kinds.assign(9, PlannedPageKind::kZero);
    g.content.assign(9, 0);
    g.Hash();
    auto plan = g.Plan(LayoutPolicy::kHalite, 64);
    REQUIRE(plan.has_value());
    CHECK(plan->blocks.empty());
    CHECK(plan->zero_pages == 9);
  }
  SECTION("one page, block_pages 1") {
    Guest g = Distinct(1);
    auto plan = g.Plan(LayoutPolicy::kHalite, 1);
    REQUIRE(plan.has_value());
    REQUIRE(plan->blocks.size() == 1);
    CHECK(plan->blocks[0].pages == 1);
  }
  SECTION("block_pages at the limit and beyond") {
    Guest g = Distinct(5000);
    auto plan = g.Plan(LayoutPolicy::kPhysical, format::kMaxBlockPages);
    REQUIRE(plan.has_value());
    REQUIRE(plan->blocks.size() == 2);
    CHECK(plan->blocks[0].pages == 4096);
    CHECK(plan->blocks[1].pages == 904);
    CHECK_FALSE(g.Plan(LayoutPolicy::kPhysical, 0).has_value());
    CHECK_FALSE(g.Plan(LayoutPolicy::kPhysical, format::kMaxBlockPages + 1).has_value());
  }
  SECTION("hints past the end and repeated are ignored") {
    Guest g = Distinct(4);
    g.access = {{2, 100}, {2, 1}, {50, 3}};
    auto plan = g.Plan(LayoutPolicy::kHalite, 64);
    REQUIRE(plan.has_value());
    CHECK(plan->accessed_pages == 2);
    CHECK(plan->slot_page == std::vector<uint32_t>{2, 3, 0, 1});
  }
}

TEST_CASE("a child stores again the unchanged pages of blocks that mostly changed, and only those",
          "[planner][chain]") {
  // 128 pages, physical order, 16-page blocks: block 0 has 8 changed pages, block 2 one, the rest none; pages
  // 100..103 are zero in both (references that a flat checkpoint does not store either).
  std::vector<PlannedPageKind> kinds(128, PlannedPageKind::kInParent);
  for (uint64_t g = 0; g < 8; ++g) kinds[g] = PlannedPageKind::kContent;
  kinds[40] = PlannedPageKind::kContent;
  for (uint64_t g = 100; g < 104; ++g) kinds[g] = PlannedPageKind::kZero;
  PlannerInput in;
  in.policy = LayoutPolicy::kPhysical;
  in.block_pages = 16;
  in.pages = kinds;
  std::vector<bool> keep(128);
  std::vector<uint64_t> expected;
  for (uint64_t g = 8; g < 16; ++g) expected.push_back(g);
  CHECK(PagesToStoreAgain(in, keep, 0.25) == expected);
  CHECK(PagesToStoreAgain(in, keep, 0.5) == expected);  // exactly half changed
  CHECK(PagesToStoreAgain(in, keep, 0.6).empty());
  CHECK(PagesToStoreAgain(in, keep, 2.0).empty());
  keep[9] = true;  // no bytes for it: stays a reference
  expected.erase(expected.begin() + 1);
  CHECK(PagesToStoreAgain(in, keep, 0.25) == expected);
  // With fraction 0 every block with a change is whole again; the zero pages never are.
  std::vector<uint64_t> all = PagesToStoreAgain(in, std::vector<bool>(128), 0.0);
  CHECK(all.size() == 8 + 15);
  CHECK(std::find(all.begin(), all.end(), 100) == all.end());
  // The flat layout's order decides the groups: with the access trace first, the changed pages are grouped with
  // whatever the trace puts beside them.
  std::vector<GlobalRun> access = {{40, 1}, {64, 15}};
  in.policy = LayoutPolicy::kAccess;
  in.access = access;
  std::vector<uint64_t> by_access = PagesToStoreAgain(in, std::vector<bool>(128), 0.0);
  CHECK(std::find(by_access.begin(), by_access.end(), 64) != by_access.end());
  CHECK(std::find(by_access.begin(), by_access.end(), 41) == by_access.end());
}

namespace {

// The block holding slot s.
size_t BlockOfSlot(const BlockPlan& plan, uint64_t s) {
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    if (s >= plan.blocks[b].first_slot && s < plan.blocks[b].first_slot + plan.blocks[b].pages) return b;
  }
  FAIL("slot " << s << " is in no block");
  return SIZE_MAX;
}

// Every stored page of each host page of `unit` pages in [first, first + count) lives in one block.
void CheckHostPagesWhole(const BlockPlan& plan, uint64_t first, uint64_t count, uint64_t unit) {
  for (uint64_t hp = first; hp < first + count; hp += unit) {
    size_t block = SIZE_MAX;
    for (uint64_t g = hp; g < hp + unit; ++g) {
      if (plan.page_map[g] < kPageMapFirstSlot || plan.page_map[g] == format::kPageMapInParent) continue;
      const size_t b = BlockOfSlot(plan, plan.page_map[g] - kPageMapFirstSlot);
      INFO("host page at " << hp << ", page " << g);
      if (block == SIZE_MAX) block = b;
      CHECK(b == block);
    }
  }
}

}  // namespace

TEST_CASE("planner: a large host page is planned whole and never split between blocks", "[planner][hugepage]") {
  // Region 0: 8 pages of 4 KiB host pages; region 1: 4 host pages of 8 pages (32 KiB host pages).
  Guest g = Distinct(40);
  g.regions = {{0, 8, 1}, {8, 32, 8}};
  // Host page 0 of region 1 (pages 8..15): 6 stored pages; host page 1 (16..23): 2; host page 2 (24..31): 2;
  // host page 3 (32..39): all zero.
  for (uint64_t p : {9u, 12u}) g.kinds[p] = PlannedPageKind::kZero;
  for (uint64_t p = 16; p < 24; ++p) {
    g.kinds[p] = p == 17 || p == 22 ? PlannedPageKind::kContent : PlannedPageKind::kZero;
  }
  for (uint64_t p = 24; p < 32; ++p) {
    g.kinds[p] = p == 25 || p == 30 ? PlannedPageKind::kContent : PlannedPageKind::kAbsent;
  }
  for (uint64_t p = 32; p < 40; ++p) g.kinds[p] = PlannedPageKind::kZero;
  g.Hash();
  SECTION("a hint on one page brings its whole host page, in page order") {
    g.access = {{22, 1}, {3, 1}};
    auto plan = g.Plan(LayoutPolicy::kHalite, 4);
    REQUIRE(plan.has_value());
    CHECK(std::vector<uint32_t>(plan->slot_page.begin(), plan->slot_page.begin() + 3) ==
          std::vector<uint32_t>{17, 22, 3});
    CHECK(plan->accessed_pages == 3);
    CHECK(plan->working_set_blocks == 1);
    CheckHostPagesWhole(*plan, 8, 32, 8);
  }
  SECTION("blocks end before a host page that does not fit; a bigger one gets a block of its own") {
    auto plan = g.Plan(LayoutPolicy::kPhysical, 4);
    REQUIRE(plan.has_value());
    // Physical: 0..7 (4 + 4), host page 0's six stored pages (one block of 6), host pages 1 and 2 (2 + 2).
    std::vector<uint32_t> sizes;
    for (const auto& b : plan->blocks) sizes.push_back(b.pages);
    CHECK(sizes == std::vector<uint32_t>{4, 4, 6, 4});
    CheckHostPagesWhole(*plan, 8, 32, 8);
    // With 3-slot blocks, host pages 1 and 2 no longer fit together.
    auto three = g.Plan(LayoutPolicy::kPhysical, 3);
    REQUIRE(three.has_value());
    sizes.clear();
    for (const auto& b : three->blocks) sizes.push_back(b.pages);
    CHECK(sizes == std::vector<uint32_t>{3, 3, 2, 6, 2, 2});
    CheckHostPagesWhole(*three, 8, 32, 8);
  }
  SECTION("4 KiB host pages are cut as before") {
    g.regions.clear();
    auto plan = g.Plan(LayoutPolicy::kPhysical, 4);
    REQUIRE(plan.has_value());
    std::vector<uint32_t> sizes;
    for (const auto& b : plan->blocks) sizes.push_back(b.pages);
    CHECK(sizes == std::vector<uint32_t>{4, 4, 4, 4, 2});
  }
}

TEST_CASE("planner: a page of a large host page is a duplicate only of a page of the same host page",
          "[planner][hugepage]") {
  Guest g = Distinct(24);
  g.regions = {{0, 8, 1}, {8, 16, 8}};
  g.content[2] = 7;    // a 4 KiB page
  g.content[10] = 7;   // host page 0 of region 1
  g.content[11] = 7;   // the same host page
  g.content[20] = 7;   // host page 1
  g.content[21] = 7;   // host page 1
  g.Hash();
  auto plan = g.Plan(LayoutPolicy::kPhysical, 64);
  REQUIRE(plan.has_value());
  auto slot = [&](uint32_t p) { return plan->page_map[p] - kPageMapFirstSlot; };
  CHECK(slot(11) == slot(10));
  CHECK(slot(21) == slot(20));
  CHECK(slot(10) != slot(2));
  CHECK(slot(20) != slot(10));
  CHECK(plan->duplicate_pages == 2);
  CheckHostPagesWhole(*plan, 8, 16, 8);
}

TEST_CASE("planner: a host page larger than a block's limit is split at the limit", "[planner][hugepage]") {
  const uint64_t unit = 2 * format::kMaxBlockPages + 10;
  Guest g = Distinct(unit + 3);
  g.regions = {{0, unit, uint32_t(unit)}, {unit, 3, 1}};
  auto plan = g.Plan(LayoutPolicy::kPhysical, 64);
  REQUIRE(plan.has_value());
  std::vector<uint32_t> sizes;
  for (const auto& b : plan->blocks) sizes.push_back(b.pages);
  // The host page's last 10 pages and the 4 KiB pages after it share a block.
  CHECK(sizes == std::vector<uint32_t>{format::kMaxBlockPages, format::kMaxBlockPages, 13});
}

TEST_CASE("a child's store-again groups follow host pages too", "[planner][chain][hugepage]") {
  // Two host pages of 8; one page of the first changed, block_pages 4: the whole first host page is one group.
  std::vector<PlannedPageKind> kinds(16, PlannedPageKind::kInParent);
  kinds[3] = PlannedPageKind::kContent;
  std::vector<PlannerRegion> regions = {{0, 16, 8}};
  PlannerInput in;
  in.policy = LayoutPolicy::kPhysical;
  in.block_pages = 4;
  in.pages = kinds;
  in.regions = regions;
  std::vector<uint64_t> expected = {0, 1, 2, 4, 5, 6, 7};
  CHECK(PagesToStoreAgain(in, std::vector<bool>(16), 0.1) == expected);
  CHECK(PagesToStoreAgain(in, std::vector<bool>(16), 0.2).empty());  // 1 of 8 changed
}

TEST_CASE("planner: pages coded against the parent come last, in blocks of one key each, in key order", "[planner]") {
  Guest g = Distinct(40);
  g.access = {{2, 2}};  // pages 2 and 3: the working set, never based
  std::vector<uint32_t> keys(40, kNoBase);
  for (uint64_t p : {3, 5, 6, 7, 30, 31}) keys[p] = 9;  // key 9: a group of the parent's view
  for (uint64_t p : {10, 20}) keys[p] = 4;              // key 4: another, restored before it
  PlannerInput in;
  in.policy = LayoutPolicy::kHalite;
  in.block_pages = 4;
  in.pages = g.kinds;
  in.hashes = g.hashes;
  in.access = g.access;
  in.base_keys = keys;
  auto plan = PlanBlocks(in, [&](uint64_t a, uint64_t b) -> Result<bool> { return g.content[a] == g.content[b]; });
  REQUIRE(plan);
  // Hot block first (pages 2, 3: page 3's key ignored), then the unkeyed pages, then key 4's pages, then key 9's.
  std::vector<std::vector<uint32_t>> blocks;
  for (const PlannedBlock& b : plan->blocks) {
    blocks.emplace_back(plan->slot_page.begin() + long(b.first_slot), plan->slot_page.begin() + long(b.first_slot + b.pages));
  }
  REQUIRE(plan->blocks.size() >= 4);
  CHECK(blocks.front() == std::vector<uint32_t>{2, 3});
  CHECK(plan->blocks.front().hot);
  CHECK(plan->blocks.front().base_key == kNoBase);
  const size_t n = plan->blocks.size();
  CHECK(blocks[n - 3] == std::vector<uint32_t>{10, 20});
  CHECK(plan->blocks[n - 3].base_key == 4);
  CHECK(blocks[n - 2] == std::vector<uint32_t>{5, 6, 7, 30});  // at most block_pages a block, in plan order
  CHECK(blocks[n - 1] == std::vector<uint32_t>{31});
  CHECK(plan->blocks[n - 2].base_key == 9);
  CHECK(plan->blocks[n - 1].base_key == 9);
  for (size_t b = 1; b + 3 < n; ++b) CHECK(plan->blocks[b].base_key == kNoBase);
  // The page map follows the slots' new places.
  for (uint64_t p = 0; p < 40; ++p) {
    const uint32_t v = plan->page_map[p];
    REQUIRE(v >= kPageMapFirstSlot);
    CHECK(plan->slot_page[v - kPageMapFirstSlot] == p);
  }
  // Keys of another length are refused.
  std::vector<uint32_t> short_keys(39, kNoBase);
  in.base_keys = short_keys;
  CHECK(PlanBlocks(in, [](uint64_t, uint64_t) -> Result<bool> { return false; }).error().code() ==
        StatusCode::kInvalidArgument);
}
