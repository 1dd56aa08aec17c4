// The PACKED PAGE_MAP (format-spec 5.3, since 1.6): packing round-trips dense and sparse maps, the decoder checks a
// packed body before allocating for it, the writer packs exactly when that is shorter, and a packed map is sealed
// after packing in an encrypted file.
#include <catch2/catch.hpp>

#include <random>

#include "halite/bytes.h"
#include "format/index_codec.h"
#include "format/page_map_packing.h"
#include "halite/format_constants.h"

using namespace halite;
using namespace halite::format;

namespace {

std::vector<uint8_t> Words(const std::vector<uint32_t>& words) {
  std::vector<uint8_t> out(words.size() * 4);
  for (size_t i = 0; i < words.size(); ++i) StoreLe32(&out[i * 4], words[i]);
  return out;
}

// A dense map as a mostly idle guest's: stored pages in page order, zero pages, absent ones.
std::vector<uint32_t> RunsMap(size_t pages) {
  std::vector<uint32_t> map(pages, kPageMapZero);
  for (size_t g = 0; g < pages / 8; ++g) map[g] = uint32_t(kPageMapFirstSlot + g);
  for (size_t g = pages - pages / 16; g < pages; ++g) map[g] = kPageMapAbsent;
  return map;
}

// A model whose page map is `map`, with raw blocks of at most 4096 slots holding every slot it references.
IndexModel ModelWith(const std::vector<uint32_t>& map) {
  IndexModel m;
  m.regions.push_back(Region{"ram", 0, map.size() * 4096, 4096, 0});
  m.page_map = map;
  uint32_t slots = 0;
  for (uint32_t v : map) {
    if (v >= kPageMapFirstSlot && v != kPageMapInParent) slots = std::max(slots, v - kPageMapFirstSlot + 1);
  }
  uint64_t offset = 64;
  for (uint32_t first = 0; first < slots; first += 4096) {
    const uint32_t pages = std::min(4096u, slots - first);
    m.blocks.push_back(BlockInfo{offset, pages * 4096u, pages, 0, 0, 0});
    m.restore_order.push_back(uint32_t(m.restore_order.size()));
    offset += pages * 4096u;
  }
  return m;
}

uint64_t IndexOffset(const IndexModel& m) {
  uint64_t end = 64;
  for (const BlockInfo& b : m.blocks) end += b.stored_length;
  return end;
}

// Where the section of `type` starts in `index` (its 16-byte header).
size_t SectionAt(const std::vector<uint8_t>& index, SectionType type) {
  size_t at = 0;
  while (LoadLe32(&index[at]) != uint32_t(type)) at += 16 + (LoadLe64(&index[at + 8]) + 7) / 8 * 8;
  return at;
}

}  // namespace

TEST_CASE("packing round-trips dense and sparse page-map bodies", "[format][pagemap]") {
  std::mt19937 rng(7);
  std::vector<uint32_t> shuffled(5000);
  for (auto& v : shuffled) v = rng();
  for (const auto& words : {RunsMap(65536), shuffled, std::vector<uint32_t>{1, 1}}) {
    const std::vector<uint8_t> plain = Words(words);
    for (bool sparse : {false, true}) {
      auto packed = PackPageMap(plain, sparse);
      REQUIRE(packed.has_value());
      if (packed->size() >= plain.size()) continue;  // not packed by a writer; the reader would refuse it
      auto back = UnpackPageMap(*packed, sparse, plain.size(), !sparse);
      INFO((back ? std::string() : back.error().message()));
      REQUIRE(back.has_value());
      CHECK(*back == plain);
    }
  }
  // Runs of one delta: 65,536 pages (262,144 plain bytes) come to a few dozen bytes.
  auto packed = PackPageMap(Words(RunsMap(65536)), false);
  REQUIRE(packed.has_value());
  CHECK(packed->size() < 200);
}

TEST_CASE("an unpacked page map is checked before anything is allocated for it", "[format][pagemap]") {
  const std::vector<uint8_t> plain = Words(RunsMap(4096));
  auto packed = PackPageMap(plain, false);
  REQUIRE(packed.has_value());
  SECTION("a content size other than the map's") {
    auto r = UnpackPageMap(*packed, false, plain.size() + 4, true);
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("declares 16384 bytes (expected 16388"));
  }
  SECTION("a sparse map larger than the pages allow") {
    auto r = UnpackPageMap(*packed, true, plain.size() - 8, false);
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("expected at most"));
  }
  SECTION("trailing bytes after the frame") {
    auto bytes = *packed;
    bytes.push_back(0);
    CHECK_FALSE(UnpackPageMap(bytes, false, plain.size(), true).has_value());
  }
  SECTION("a truncated frame") {
    auto bytes = *packed;
    bytes.pop_back();
    CHECK_FALSE(UnpackPageMap(bytes, false, plain.size(), true).has_value());
  }
  SECTION("not a frame at all") {
    auto r = UnpackPageMap(std::vector<uint8_t>(16, 0), false, plain.size(), true);
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("not a zstd frame"));
  }
}

TEST_CASE("the index packs the page map when that is shorter, and decodes it to the same map", "[format][pagemap]") {
  IndexModel m = ModelWith(RunsMap(65536));
  REQUIRE(ChoosePageMapPacking(&m).ok());
  CHECK(m.packed_page_map);
  CHECK(MinimumMinorVersion(m) == kFormatMinorPackedPageMap);
  const std::vector<uint8_t> packed_index = EncodeIndex(m);
  IndexModel plain_model = m;
  plain_model.packed_page_map = false;
  const std::vector<uint8_t> plain_index = EncodeIndex(plain_model);
  CHECK(packed_index.size() + 262144 - 200 < plain_index.size());
  auto d = DecodeIndex(packed_index, IndexOffset(m), "t");
  INFO((d ? std::string() : d.error().message()));
  REQUIRE(d.has_value());
  CHECK(d->packed_page_map);
  CHECK(d->page_map == m.page_map);
  CHECK(EncodeIndex(*d) == packed_index);  // re-encoded as stored
  auto p = DecodeIndex(plain_index, IndexOffset(m), "t");
  REQUIRE(p.has_value());
  CHECK_FALSE(p->packed_page_map);
  CHECK(MinimumMinorVersion(*p) == 0);

  SECTION("a map that does not pack shorter stays plain (and the file 1.0)") {
    // Two pages: 8 bytes of map, less than any zstd frame that holds them.
    IndexModel small = ModelWith({kPageMapFirstSlot, kPageMapZero});
    REQUIRE(ChoosePageMapPacking(&small).ok());
    CHECK_FALSE(small.packed_page_map);
    CHECK(MinimumMinorVersion(small) == 0);
  }
  SECTION("a packed map that decodes to a bad slot fails the plain map's rules") {
    IndexModel bad = m;
    bad.page_map[1000] = kPageMapFirstSlot + 9000;  // past the last slot
    auto r = DecodeIndex(EncodeIndex(bad), IndexOffset(bad), "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("references slot 9000"));
  }
  SECTION("the PACKED flag on another section is an error") {
    auto bytes = packed_index;
    StoreLe32(&bytes[SectionAt(bytes, SectionType::kBlocks) + 4], kSectionFlagPacked);
    auto r = DecodeIndex(bytes, IndexOffset(m), "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("reserved section flags 0x4"));
  }
}

TEST_CASE("a child's sparse page map is packed and read back", "[format][pagemap]") {
  std::vector<uint32_t> map(65536, kPageMapInParent);
  for (uint32_t g = 0; g < 6000; ++g) map[g * 10] = g % 3 == 0 ? kPageMapZero : kPageMapFirstSlot + g / 3 * 2 + (g % 3 == 2);
  IndexModel m = ModelWith(map);
  m.parent = ParentSection{};
  m.parent->file_id[0] = 1;
  m.parent->page_count = 65536;
  m.parent->chain_depth = 1;
  m.parent->path_hint = "parent.hlt";
  REQUIRE(ChoosePageMapPacking(&m).ok());
  CHECK(m.packed_page_map);
  auto d = DecodeIndex(EncodeIndex(m), IndexOffset(m), "t");
  INFO((d ? std::string() : d.error().message()));
  REQUIRE(d.has_value());
  CHECK(d->packed_page_map);
  CHECK(d->sparse_page_map);
  CHECK(d->page_map_entries.size() == 6000);
  d->MaterializePageMap();
  CHECK(d->page_map == map);
}

TEST_CASE("an encrypted file's packed page map is sealed after packing", "[format][pagemap][encryption]") {
  IndexModel m = ModelWith(RunsMap(65536));
  m.encryption.present = true;
  m.encryption.cipher = kCipherXChaCha20Poly1305;
  uint64_t offset = 64;
  for (BlockInfo& b : m.blocks) {  // raw blocks sealed: their pages and a tag each
    b.offset = offset;
    b.stored_length += kSealTagSize;
    offset += b.stored_length;
  }
  REQUIRE(ChoosePageMapPacking(&m).ok());
  CHECK(MinimumMinorVersion(m) == kFormatMinorPackedPageMap);
  // A stand-in seal (the real AEAD is tested in encryption_test): the plain body reversed, then a 16-byte tag.
  SectionSealer seal = [](uint32_t, uint32_t, std::span<const uint8_t> plain) {
    std::vector<uint8_t> out(plain.rbegin(), plain.rend());
    out.resize(out.size() + kSealTagSize, 0xAA);
    return out;
  };
  SectionUnsealer unseal = [](uint32_t, uint32_t, std::span<const uint8_t> body) -> Result<std::vector<uint8_t>> {
    return std::vector<uint8_t>(body.rbegin() + kSealTagSize, body.rend());
  };
  std::vector<uint8_t> index = EncodeIndex(m, &seal);
  std::vector<uint8_t> encryption(16 + kEncryptionSectionSize, 0);
  StoreLe32(&encryption[0], uint32_t(SectionType::kEncryption));
  StoreLe64(&encryption[8], kEncryptionSectionSize);
  StoreLe32(&encryption[16], kCipherXChaCha20Poly1305);
  index.insert(index.end(), encryption.begin(), encryption.end());
  // The sealed body is the packed one plus a tag: far below the 262,144 bytes of the plain map.
  const size_t at = SectionAt(index, SectionType::kPageMap);
  CHECK(LoadLe32(&index[at + 4]) == (kSectionFlagSealed | kSectionFlagPacked));
  CHECK(LoadLe64(&index[at + 8]) < 200 + kSealTagSize);
  auto keyless = DecodeIndex(index, IndexOffset(m), "t");
  INFO((keyless ? std::string() : keyless.error().message()));
  REQUIRE(keyless.has_value());
  CHECK(keyless->packed_page_map);
  CHECK(MinimumMinorVersion(*keyless) == kFormatMinorPackedPageMap);
  auto keyed = DecodeIndex(index, IndexOffset(m), "t", &unseal);
  INFO((keyed ? std::string() : keyed.error().message()));
  REQUIRE(keyed.has_value());
  CHECK(keyed->page_map == m.page_map);
}
