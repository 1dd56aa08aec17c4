// The layout planner and the hint-file parsers.
#include <catch2/catch.hpp>

#include "halite/hint_files.h"
#include "writer/layout_planner.h"

using namespace halite;
using halite::writer::GlobalRun;

TEST_CASE("planner orders access, then VA, then physical", "[planner]") {
  std::vector<writer::PlannedPageKind> storable(20, writer::PlannedPageKind::kContent);
  storable[3] = writer::PlannedPageKind::kZero;
  std::vector<GlobalRun> access = {{10, 2}, {3, 1}, {5, 1}, {10, 1}};
  std::vector<GlobalRun> va = {{15, 3}, {0, 2}, {11, 1}};
  auto halite = writer::PlanPageOrder(LayoutPolicy::kHalite, storable, access, va);
  CHECK(halite.accessed == 3);
  std::vector<uint32_t> head(halite.order.begin(), halite.order.begin() + 8);
  CHECK(head == std::vector<uint32_t>{10, 11, 5, 15, 16, 17, 0, 1});
  CHECK(halite.order.size() == 19);
  auto access_only = writer::PlanPageOrder(LayoutPolicy::kAccess, storable, access, va);
  CHECK(access_only.order[3] == 0);  // then physical
  auto va_only = writer::PlanPageOrder(LayoutPolicy::kVa, storable, access, va);
  CHECK(va_only.accessed == 0);
  CHECK(va_only.order[0] == 15);
  auto phys = writer::PlanPageOrder(LayoutPolicy::kPhysical, storable, access, va);
  CHECK(phys.order[0] == 0);
  CHECK(phys.order[3] == 4);
}

TEST_CASE("hint files parse pages, runs, regions and address spaces", "[hints]") {
  std::vector<Region> regions = {{"pc.ram", 0, 100 * 4096, 4096, 0}, {"0000:00:02.0/vga.vram", 0, 10 * 4096, 4096, 100},
                                 {"ram", 0, 50 * 4096, 4096, 110}};
  auto r = ParseVaHints("# comment\n5\n0x10 3  # trailing\n\n\npc.ram:7 2\n0000:00:02.0/vga.vram:9\n", "va.txt", regions);
  REQUIRE(r.has_value());
  REQUIRE(r->size() == 4);
  CHECK((*r)[0] == PageRun{{2, 5}, 1, 0});  // unprefixed pages belong to the region named "ram"
  CHECK((*r)[1] == PageRun{{2, 16}, 3, 0});
  CHECK((*r)[2] == PageRun{{0, 7}, 2, 1});
  CHECK((*r)[3] == PageRun{{1, 9}, 1, 1});
  auto t = ParseReplayTrace("1\n2 w\npc.ram:3 r\n", "t", regions);
  REQUIRE(t.has_value());
  CHECK((*t)[1].write);
  CHECK((*t)[2].page == PageRef{0, 3});
}

TEST_CASE("hint files reject bad lines naming file and line", "[hints]") {
  std::vector<Region> regions = {{"ram", 0, 10 * 4096, 4096, 0}};
  auto expect = [&](const char* text, const char* msg) {
    auto r = ParseAccessTrace(text, "trace.txt", regions);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(r.error().message(), Catch::Contains(msg));
  };
  expect("1\nxyz\n", "trace.txt:2: expected a page number");
  expect("10\n", "outside region");
  expect("8 3\n", "outside region");
  expect("1 0\n", "positive page count");
  expect("1 2 3\n", "expected PAGE or PAGE COUNT");
  expect("vga:1\n", "unknown region \"vga\"");
  expect("-1\n", "expected a page number");
  auto t = ParseReplayTrace("1 x\n", "t", regions);
  CHECK_FALSE(t.has_value());
  // A trace written by FormatAccessTrace parses back.
  std::vector<PageRef> pages = {{0, 3}, {0, 9}};
  auto back = ParseAccessTrace(FormatAccessTrace(pages, regions), "f", regions);
  REQUIRE(back.has_value());
  CHECK((*back)[1].first == PageRef{0, 9});
}
