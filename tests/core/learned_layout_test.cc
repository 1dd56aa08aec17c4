// Learned layouts (halite/learned_layout.h) and the rewrite under them (halite/checkpoint_rewrite.h): what the
// learned file holds, when a restore takes it, when it is not written.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_rewrite.h"
#include "halite/checkpoint_writer.h"
#include "halite/learned_layout.h"
#include "support/temp_dir.h"

using namespace halite;

namespace {

constexpr uint64_t kPages = 1024;  // 16 blocks of 64

std::vector<uint8_t> PageContent(uint64_t page, uint32_t salt) {
  std::vector<uint8_t> p(4096);
  uint64_t x = page * 0x9E3779B97F4A7C15ull + salt + 1;
  for (size_t i = 0; i < p.size(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const uint64_t v = (x & 0x0F0F0F0F0F0F0F0Full) | page;  // compressible, distinct per page
    std::memcpy(p.data() + i, &v, 8);
  }
  return p;
}

// A checkpoint whose working set is pages 0..63 (one hot block); the rest in physical order.
std::string MakeCheckpoint(const halite::testing::TempDir& dir, const std::string& name, uint32_t salt) {
  const std::string path = dir.File(name);
  WriterOptions o;
  o.deterministic = true;
  auto w = CheckpointWriter::Create(path, o);
  REQUIRE(w);
  REQUIRE((*w)->AddRegion("ram", 0, kPages * 4096, 4096));
  for (uint64_t p = 0; p < kPages; ++p) REQUIRE((*w)->PutPage(0, p, PageContent(p, salt)).ok());
  const PageRun hot{PageRef{0, 0}, 64, 0};
  REQUIRE((*w)->AddAccessedPages(std::span(&hot, 1)).ok());
  REQUIRE((*w)->Finish());
  return path;
}

std::vector<uint64_t> HotPages(const CheckpointReader& r) {
  std::vector<uint64_t> pages;
  for (uint32_t i = 0; i < r.working_set_blocks(); ++i) {
    for (const BlockMember& m : r.BlockMembers(r.restore_order()[i])) pages.push_back(m.page);
  }
  std::sort(pages.begin(), pages.end());
  return pages;
}

}  // namespace

TEST_CASE("learned layout: the working set then the blocks the restore waited for with the same content", "[learned]") {
  halite::testing::TempDir dir;
  const std::string golden = MakeCheckpoint(dir, "golden.hlt", 1);
  auto source = CheckpointReader::Open(golden);
  REQUIRE(source);
  std::string why;
  CHECK(OpenLearnedLayout(golden, **source, {}, &why) == nullptr);
  CHECK_THAT(why, Catch::Contains("no learned layout yet"));

  // The restore waited for pages 700 and 130 (in that order) and for a page of the working set.
  const std::vector<PageRef> demanded{{0, 700}, {0, 5}, {0, 130}, {0, 701}};
  auto learned = LearnLayout(golden, **source, demanded, WriterOptions{});
  REQUIRE(learned);
  CHECK(learned->path == golden + ".learned");
  CHECK(learned->hot_blocks_before == 1);
  CHECK(learned->demanded_blocks == 3);
  CHECK(learned->new_blocks == 2);
  CHECK(learned->trace_pages == 3 * 64);

  auto opened = OpenLearnedLayout(golden, **source, {}, &why);
  REQUIRE(opened != nullptr);
  const CheckpointReader& l = *opened;
  REQUIRE(l.VerifyAll().ok());
  // Its working set: the old one and the two blocks around pages 700 and 130, the block of 700 first.
  std::vector<uint64_t> expect;
  for (uint64_t p = 0; p < 64; ++p) expect.push_back(p);
  for (uint64_t p = 128; p < 192; ++p) expect.push_back(p);
  for (uint64_t p = 640; p < 704; ++p) expect.push_back(p);
  CHECK(HotPages(l) == expect);
  const auto second_hot = l.BlockMembers(l.restore_order()[1]);
  CHECK(std::any_of(second_hot.begin(), second_hot.end(), [](const BlockMember& m) { return m.page == 700; }));
  std::vector<uint8_t> page(4096);
  for (uint64_t p = 0; p < kPages; ++p) {
    REQUIRE(l.ReadPage(p, page).ok());
    REQUIRE(page == PageContent(p, 1));
  }
  CHECK(l.metadata().creator == (*source)->metadata().creator);
  CHECK(l.metadata().vmm_kind == (*source)->metadata().vmm_kind);
}

TEST_CASE("learned layout: another golden under the same name is not restored through it", "[learned]") {
  halite::testing::TempDir dir;
  const std::string golden = MakeCheckpoint(dir, "golden.hlt", 1);
  {
    auto source = CheckpointReader::Open(golden);
    REQUIRE(source);
    const std::vector<PageRef> demanded{{0, 900}};
    REQUIRE(LearnLayout(golden, **source, demanded, WriterOptions{}));
  }
  // The golden is replaced (a new save under the same name): its learned file is stale.
  const std::string other = MakeCheckpoint(dir, "other.hlt", 2);
  REQUIRE(std::rename(other.c_str(), golden.c_str()) == 0);
  auto source = CheckpointReader::Open(golden);
  REQUIRE(source);
  std::string why;
  CHECK(OpenLearnedLayout(golden, **source, {}, &why) == nullptr);
  CHECK_THAT(why, Catch::Contains("was learned from another checkpoint"));
}

TEST_CASE("learned layout: nothing written when nothing new was waited for or another restore writes it",
          "[learned]") {
  halite::testing::TempDir dir;
  const std::string golden = MakeCheckpoint(dir, "golden.hlt", 1);
  auto source = CheckpointReader::Open(golden);
  REQUIRE(source);
  const std::vector<PageRef> in_working_set{{0, 3}, {0, 60}};
  auto none = LearnLayout(golden, **source, in_working_set, WriterOptions{});
  REQUIRE(none);
  CHECK(none->path.empty());
  CHECK_THAT(none->skipped, Catch::Contains("in the working set already"));

  const int fd = ::open((golden + ".learned.lock").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX) == 0);
  const std::vector<PageRef> demanded{{0, 900}};
  auto busy = LearnLayout(golden, **source, demanded, WriterOptions{});
  ::close(fd);
  REQUIRE(busy);
  CHECK(busy->path.empty());
  CHECK_THAT(busy->skipped, Catch::Contains("another restore is writing"));
  CHECK(::access((golden + ".learned").c_str(), F_OK) != 0);
}
