// A checkpoint region read as a flat image: bytes, block decoding once, runs for the page cache, errors.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "halite/image_server/checkpoint_image.h"
#include "image_test_support.h"

using namespace halite;
using namespace halite::image_server;
using namespace halite::image_server::testing;

TEST_CASE("an image reads as the region's memory, at any offset and length, cut short at the end") {
  auto t = MakeCheckpoint(4 << 20, 7);
  auto img = CheckpointImage::Open(t->reader, "ram");
  REQUIRE(img.has_value());
  CHECK((*img)->size() == t->ram.size());
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    const uint64_t off = rng() % t->ram.size();
    const size_t len = 1 + rng() % (3 * 4096);
    std::vector<uint8_t> buf(len);
    auto n = (*img)->Read(off, buf);
    REQUIRE(n.has_value());
    REQUIRE(*n == std::min<uint64_t>(len, t->ram.size() - off));
    REQUIRE(std::memcmp(buf.data(), t->ram.data() + off, *n) == 0);
  }
  std::vector<uint8_t> past(4096);
  auto n = (*img)->Read(t->ram.size(), past);
  REQUIRE(n.has_value());
  CHECK(*n == 0);
  // The other region is an image of its own.
  auto rom = CheckpointImage::Open(t->reader, "rom");
  REQUIRE(rom.has_value());
  std::vector<uint8_t> all(t->rom.size());
  REQUIRE((*rom)->Read(0, all).has_value());
  CHECK(all == t->rom);
  CHECK(!CheckpointImage::Open(t->reader, "vram").has_value());
}

TEST_CASE("the first read of a block returns all its pages of the image as runs, the next reads decode nothing") {
  auto t = MakeCheckpoint(4 << 20, 11);
  auto img = CheckpointImage::Open(t->reader, "ram").value();
  uint32_t block = 0;
  const uint64_t page = StoredRamPage(*t, &block);
  std::vector<uint8_t> buf(4096);
  std::vector<DecodedBlock> decoded;
  REQUIRE(img->Read(page * 4096, buf, &decoded).has_value());
  REQUIRE(decoded.size() == 1);
  CHECK(decoded[0].block == block);
  // Every ram page of the block is in a run, with its own content.
  size_t members = 0;
  for (const auto& m : t->reader->BlockMembers(block)) members += m.page < t->ram.size() / 4096;
  CHECK(decoded[0].pages() == members);
  for (const auto& run : decoded[0].runs) {
    for (size_t i = 0; i < run.slots.size(); ++i) {
      const uint8_t* content = decoded[0].data->data() + uint64_t{run.slots[i]} * 4096;
      REQUIRE(std::memcmp(content, t->ram.data() + run.image_offset + i * 4096, 4096) == 0);
    }
    if (&run != &decoded[0].runs.front()) CHECK(run.image_offset > (&run - 1)->image_offset);
  }
  decoded.clear();
  REQUIRE(img->Read(page * 4096, buf, &decoded).has_value());
  CHECK(decoded.empty());
  CHECK(img->Stats().blocks_decoded == 1);
  CHECK(img->WasDecoded(block));
}

TEST_CASE("zero pages read as zeros without decoding a block") {
  auto t = MakeCheckpoint(4 << 20, 5);
  auto img = CheckpointImage::Open(t->reader, "ram").value();
  uint64_t zero_page = UINT64_MAX;
  for (uint64_t p = 0; p < t->ram.size() / 4096 && zero_page == UINT64_MAX; ++p) {
    if (t->reader->Locate(p).kind != PageKind::kStored) zero_page = p;
  }
  REQUIRE(zero_page != UINT64_MAX);
  std::vector<uint8_t> buf(4096, 0xff);
  REQUIRE(img->Read(zero_page * 4096, buf).has_value());
  CHECK(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0; }));
  CHECK(img->Stats().blocks_decoded == 0);
  CHECK(img->Stats().zero_pages_read == 1);
}

TEST_CASE("eight threads reading one block at once decode it once") {
  auto t = MakeCheckpoint(4 << 20, 13, 64);
  auto img = CheckpointImage::Open(t->reader, "ram").value();
  uint32_t block = 0;
  const uint64_t page = StoredRamPage(*t, &block, 8);
  std::atomic<int> mismatches{0}, got_block{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      std::vector<uint8_t> buf(4096);
      std::vector<DecodedBlock> decoded;
      auto n = img->Read(page * 4096, buf, &decoded);
      if (!n || std::memcmp(buf.data(), t->ram.data() + page * 4096, 4096) != 0) mismatches++;
      got_block += static_cast<int>(decoded.size());
    });
  }
  for (auto& th : threads) th.join();
  CHECK(mismatches == 0);
  CHECK(got_block == 1);  // one reader hands the block on for the page cache
  CHECK(img->Stats().blocks_decoded == 1);
}

TEST_CASE("a corrupt block is never returned: every read of its pages fails, the rest read fine") {
  auto t = MakeCheckpoint(4 << 20, 17);
  uint32_t block = 0;
  const uint64_t page = StoredRamPage(*t, &block);
  DamageBlock(*t, block);
  auto img = CheckpointImage::Open(t->reader, "ram").value();
  std::vector<uint8_t> buf(4096);
  for (int i = 0; i < 2; ++i) {
    std::vector<DecodedBlock> decoded;
    auto n = img->Read(page * 4096, buf, &decoded);
    REQUIRE(!n.has_value());
    CHECK(n.error().code() == StatusCode::kCorrupt);
    CHECK(decoded.empty());
  }
  CHECK(img->Stats().read_errors == 2);
  CHECK(!img->WasDecoded(block));
  // Pages of other blocks still read.
  for (uint64_t p = 0; p < t->ram.size() / 4096; ++p) {
    const PageLocation loc = t->reader->Locate(p);
    if (loc.kind == PageKind::kStored && loc.block == block) continue;
    REQUIRE(img->Read(p * 4096, buf).has_value());
    REQUIRE(std::memcmp(buf.data(), t->ram.data() + p * 4096, 4096) == 0);
  }
}

TEST_CASE("the restore order lists each block with pages of the image once") {
  auto t = MakeCheckpoint(2 << 20, 19);
  auto img = CheckpointImage::Open(t->reader, "ram").value();
  auto order = img->RestoreOrder();
  std::set<uint32_t> seen(order.begin(), order.end());
  CHECK(seen.size() == order.size());
  for (uint64_t p = 0; p < t->ram.size() / 4096; ++p) {
    const PageLocation loc = t->reader->Locate(p);
    if (loc.kind == PageKind::kStored) REQUIRE(seen.count(loc.block) == 1);
  }
  auto d = img->Decode(order.front());
  REQUIRE(d.has_value());
  CHECK(d->pages() > 0);
}
