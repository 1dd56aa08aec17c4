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

TEST_CASE("region names with spaces, '#' and '%' are escaped by the writer and decoded by the parsers", "[hints]") {
  CHECK(EscapeHintRegionName("pc.ram") == "pc.ram");
  CHECK(EscapeHintRegionName("0000:00:02.0/vga.vram") == "0000:00:02.0/vga.vram");
  CHECK(EscapeHintRegionName("my region") == "my%20region");
  CHECK(EscapeHintRegionName("#1\tbios") == "%231%09bios");
  CHECK(EscapeHintRegionName("50%") == "50%25");
  CHECK(EscapeHintRegionName(std::string("\x7f\x01", 2)) == "%7F%01");

  // Every printable ASCII byte, alone and inside a name, survives FormatAccessTrace and each parser.
  std::vector<Region> regions;
  auto add = [&](std::string name) {
    uint64_t first = regions.empty() ? 0 : regions.back().first_page + regions.back().page_count();
    regions.push_back(Region{std::move(name), 0, 4 * 4096, 4096, first});
  };
  add("ram");
  for (char c = 0x20; c < 0x7f; ++c) {
    if (c != 'a') add(std::string(1, c));
    add(std::string("a") + c + " b#%" + c);
  }
  std::vector<PageRef> pages;
  for (uint32_t r = 0; r < regions.size(); ++r) pages.push_back({r, r % 4});
  const std::string text = FormatAccessTrace(pages, regions);
  auto back = ParseAccessTrace(text, "trace.txt", regions);
  INFO((back ? std::string() : back.error().ToString()));
  REQUIRE(back.has_value());
  REQUIRE(back->size() == pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    INFO(regions[pages[i].region].name);
    CHECK((*back)[i] == PageRun{pages[i], 1, 0});
  }
  // The same lines as VA hints and as a replay trace (with a write marker).
  std::string replay;
  for (const PageRef& p : pages) replay += EscapeHintRegionName(regions[p.region].name) + ":" + std::to_string(p.page) + " w\n";
  auto va = ParseVaHints(text, "va.txt", regions);
  REQUIRE(va.has_value());
  CHECK(*va == *back);
  auto accesses = ParseReplayTrace(replay, "replay.txt", regions);
  REQUIRE(accesses.has_value());
  REQUIRE(accesses->size() == pages.size());
  for (size_t i = 0; i < pages.size(); ++i) CHECK((*accesses)[i] == TraceAccess{pages[i], true});

  // Escapes decode in either case, also of bytes that need none; a bad one is an error naming file and line.
  auto mixed = ParseAccessTrace("%61%61%20b%23%25a:2\n%72%61%6D:1\n", "m.txt", regions);
  REQUIRE(mixed.has_value());
  REQUIRE(mixed->size() == 2);
  CHECK(regions[(*mixed)[0].first.region].name == "aa b#%a");
  CHECK((*mixed)[1].first.region == 0);
  for (const char* bad : {"my%2:1\n", "my%zz:1\n", "my%:1\n", "%g0:1\n"}) {
    auto r = ParseAccessTrace(std::string("ram:0\n") + bad, "bad.txt", regions);
    INFO(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(r.error().message(), Catch::StartsWith("bad.txt:2: bad escape"));
  }
}
