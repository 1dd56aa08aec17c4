// The writer's read-back before Finish (what the page-table walk reads guest memory through), pages given
// again, pages taken back, and a region that grows as a stream goes.
#include <catch2/catch.hpp>

#include <array>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "support/temp_dir.h"

using namespace halite;
using PageContent = CheckpointWriter::PageContent;

namespace {

std::array<uint8_t, 4096> Pattern(uint64_t page, uint8_t version) {
  std::array<uint8_t, 4096> p;
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(page * 31 + i * 7 + version * 101 + 1);
  return p;
}

}  // namespace

TEST_CASE("writer read-back: the last copy of a page, zero pages, absent pages, forgotten pages", "[writer]") {
  testing::TempDir dir;
  auto w = CheckpointWriter::Create(dir.File("c.hlt"), {});
  REQUIRE(w);
  CheckpointWriter& writer = **w;
  // 600 pages: more than the staging buffer holds (256), so rewrites reach both the file and the buffer.
  const uint64_t pages = 600;
  REQUIRE(writer.AddRegion("ram", 0, pages * 4096));
  for (uint64_t p = 0; p < pages; p += 2) REQUIRE(writer.PutPage(0, p, Pattern(p, 0)).ok());
  for (uint64_t p = 0; p < pages; p += 6) REQUIRE(writer.PutPage(0, p, Pattern(p, 1)).ok());  // given again
  REQUIRE(writer.PutZeroPages(0, 1, 1).ok());
  REQUIRE(writer.ForgetPages(0, 4, 1).ok());

  std::array<uint8_t, 4096> out;
  for (uint64_t p = 0; p < pages; ++p) {
    INFO("page " << p);
    auto got = writer.ReadPage(0, p, out);
    REQUIRE(got);
    if (p == 1) {
      CHECK(writer.ContentOf(0, p) == PageContent::kZero);
      CHECK(*got);
      CHECK(out == std::array<uint8_t, 4096>{});
    } else if (p % 2 || p == 4) {
      CHECK(writer.ContentOf(0, p) == PageContent::kAbsent);
      CHECK(!*got);
    } else {
      CHECK(writer.ContentOf(0, p) == PageContent::kData);
      CHECK(*got);
      CHECK(out == Pattern(p, p % 6 == 0 ? 1 : 0));
    }
  }
  CHECK(writer.ContentOf(0, pages) == PageContent::kAbsent);  // outside the region
  CHECK(writer.ContentOf(1, 0) == PageContent::kAbsent);      // no such region
  REQUIRE(writer.Finish());

  // The checkpoint holds the last copies, and nothing for the forgotten page.
  auto reader = CheckpointReader::Open(dir.File("c.hlt"));
  REQUIRE(reader);
  for (uint64_t p : {0, 2, 6, 8, 300, 594, 598}) {
    REQUIRE((*reader)->ReadPage(p, out).ok());
    CHECK(out == Pattern(p, p % 6 == 0 ? 1 : 0));
  }
  CHECK((*reader)->Locate(4).kind == PageKind::kAbsent);
  CHECK((*reader)->Locate(1).kind == PageKind::kZero);
}

TEST_CASE("writer: the last region grows, never shrinks, and only the last one", "[writer]") {
  testing::TempDir dir;
  auto w = CheckpointWriter::Create(dir.File("c.hlt"), {});
  REQUIRE(w);
  CheckpointWriter& writer = **w;
  CHECK(writer.ExtendLastRegion(8192).code() == StatusCode::kInvalidArgument);  // no region yet
  REQUIRE(writer.AddRegion("a", 0, 4096));
  REQUIRE(writer.AddRegion("b", 1 << 20, 4096));
  CHECK(writer.PutPage(1, 5, Pattern(5, 0)).code() == StatusCode::kInvalidArgument);
  REQUIRE(writer.ExtendLastRegion(6 * 4096).ok());
  CHECK(writer.regions()[1].size == 6 * 4096);
  REQUIRE(writer.PutPage(1, 5, Pattern(5, 0)).ok());
  CHECK(writer.ExtendLastRegion(4096).code() == StatusCode::kInvalidArgument);      // smaller
  CHECK(writer.ExtendLastRegion(6 * 4096 + 1).code() == StatusCode::kInvalidArgument);  // not a page multiple
  CHECK(writer.ExtendLastRegion(uint64_t{1} << 44).code() == StatusCode::kInvalidArgument);  // beyond 2^31 pages
  REQUIRE(writer.PutPage(0, 0, Pattern(0, 0)).ok());
  REQUIRE(writer.Finish());
  auto reader = CheckpointReader::Open(dir.File("c.hlt"));
  REQUIRE(reader);
  REQUIRE((*reader)->regions().size() == 2);
  CHECK((*reader)->regions()[1].size == 6 * 4096);
  std::array<uint8_t, 4096> out;
  REQUIRE((*reader)->ReadPage((*reader)->GlobalPage(PageRef{1, 5}), out).ok());
  CHECK(out == Pattern(5, 0));
}
