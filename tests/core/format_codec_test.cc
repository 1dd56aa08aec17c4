// The pure format codec: header, footer and index encode/decode, one test per rejection path of the envelope.
#include <catch2/catch.hpp>

#include "halite/bytes.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"

using namespace halite;
using namespace halite::format;

namespace {
FileId TestId() {
  FileId id{};
  for (int i = 0; i < 16; ++i) id[i] = uint8_t(i + 1);
  return id;
}
Header TestHeader() {
  Header h;
  h.file_id = TestId();
  return h;
}
}  // namespace

TEST_CASE("header round-trips", "[format]") {
  auto b = EncodeHeader(TestHeader());
  auto h = DecodeHeader(b, "t");
  REQUIRE(h.has_value());
  CHECK(h->file_id == TestId());
  CHECK(h->major == 1);
  CHECK(h->minor == 0);
}

TEST_CASE("header rejections", "[format]") {
  auto good = EncodeHeader(TestHeader());
  auto expect = [](std::array<uint8_t, 64> b, StatusCode code, const std::string& msg) {
    auto h = DecodeHeader(b, "t");
    REQUIRE_FALSE(h.has_value());
    CHECK(h.error().code() == code);
    CHECK_THAT(h.error().message(), Catch::Contains(msg));
  };
  SECTION("bad magic") {
    auto b = good;
    b[3] = 'x';
    expect(b, StatusCode::kCorrupt, "bad magic");
  }
  SECTION("checksum") {
    auto b = good;
    b[57] ^= 1;
    expect(b, StatusCode::kCorrupt, "checksum mismatch");
  }
  // The rules below are checked after the checksum, so each case is encoded with a valid checksum.
  SECTION("newer minor is unsupported, not corrupt") {
    Header h = TestHeader();
    h.minor = format::kFormatMinor + 1;
    expect(EncodeHeader(h), StatusCode::kUnsupported, "format version 1." + std::to_string(format::kFormatMinor + 1));
  }
  SECTION("other major") {
    Header h = TestHeader();
    h.major = 2;
    expect(EncodeHeader(h), StatusCode::kUnsupported, "format version 2.0");
  }
  SECTION("zero file id") {
    Header h;
    expect(EncodeHeader(h), StatusCode::kCorrupt, "file_id is all zero");
  }
  SECTION("reserved flags") {
    Header h = TestHeader();
    h.flags = 4;
    expect(EncodeHeader(h), StatusCode::kCorrupt, "unknown flags");
  }
  SECTION("wrong length") {
    auto h = DecodeHeader(std::span<const uint8_t>(good.data(), 63), "t");
    REQUIRE_FALSE(h.has_value());
  }
}

TEST_CASE("footer rejections", "[format]") {
  Footer f;
  f.file_id = TestId();
  f.index_length = 64;
  f.file_size = 64 + 1000 + 64 + 64;
  f.index_offset = f.file_size - 64 - 64;
  auto good = EncodeFooter(f);
  REQUIRE(DecodeFooter(good, f.file_size, "t").has_value());
  SECTION("size differs from the file") {
    auto r = DecodeFooter(good, f.file_size + 8, "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("file_size"));
  }
  SECTION("too small a file") {
    auto r = DecodeFooter(good, 100, "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("at least 128"));
  }
  SECTION("bad magic") {
    auto b = good;
    b[63] = 1;
    auto r = DecodeFooter(b, f.file_size, "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("bad magic"));
  }
  SECTION("checksum") {
    auto b = good;
    b[2] ^= 1;
    auto r = DecodeFooter(b, f.file_size, "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("checksum mismatch"));
  }
  SECTION("index longer than the file allows") {
    Footer g = f;
    g.index_length = f.file_size;  // more than file_size - 128
    g.index_offset = 0;
    auto r = DecodeFooter(EncodeFooter(g), f.file_size, "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("index_length"));
  }
  SECTION("index not ending at the footer") {
    Footer g = f;
    g.index_offset -= 8;
    auto r = DecodeFooter(EncodeFooter(g), f.file_size, "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("index_offset"));
  }
}

TEST_CASE("index round-trips", "[format]") {
  IndexModel m;
  m.metadata.vmm_kind = VmmKind::kQemu;
  m.metadata.machine_type = "pc-q35-7.2";
  m.metadata.creator = "test";
  m.regions.push_back(Region{"pc.ram", 0, 4 * 4096, 4096, 0});
  m.regions.push_back(Region{"vga.vram", 0xfd000000, 16384, 16384, 0});
  m.page_map = {2, 1, 0, 3, 2, 4, 1, 1};
  // Two blocks of 2 slots (raw), contiguous from offset 64; no blobs; index right after.
  m.blocks.push_back(BlockInfo{64, 8192, 2, kBlockHot, 0x1111, 0});
  m.blocks.push_back(BlockInfo{64 + 8192, 4096, 1, 0, 0x2222, 0});
  m.restore_order = {0, 1};
  m.working_set_blocks = 1;
  auto bytes = EncodeIndex(m);
  auto d = DecodeIndex(bytes, 64 + 8192 + 4096, "t");
  INFO((d.has_value() ? std::string() : d.error().message()));
  REQUIRE(d.has_value());
  CHECK(d->metadata == m.metadata);
  CHECK(d->page_map == m.page_map);
  REQUIRE(d->regions.size() == 2);
  CHECK(d->regions[1].first_page == 4);
  CHECK(d->blocks[1].first_slot == 2);
  CHECK(d->restore_order == m.restore_order);
  // The same bytes decoded against a different index offset break the layout rule.
  auto bad = DecodeIndex(bytes, 64 + 8192 + 4096 + 8, "t");
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message(), Catch::Contains("unaccounted"));
}

TEST_CASE("skippable sections are kept, re-encoded and raise the minimum minor version", "[format]") {
  IndexModel m;
  m.regions.push_back(Region{"ram", 0, 4096, 4096, 0});
  m.page_map = {kPageMapZero};
  CHECK(MinimumMinorVersion(m) == 0);
  m.skippable_sections.push_back({kSkippableSectionBit | 1, {'a', 'b', 'c'}});
  m.skippable_sections.push_back({kSkippableSectionBit | 7, {}});
  CHECK(MinimumMinorVersion(m) == kFormatMinorSkippableSections);
  auto bytes = EncodeIndex(m);
  auto d = DecodeIndex(bytes, 64, "t");
  INFO((d.has_value() ? std::string() : d.error().message()));
  REQUIRE(d.has_value());
  REQUIRE(d->skippable_sections.size() == 2);
  CHECK(d->skippable_sections[0].type == (kSkippableSectionBit | 1));
  CHECK(d->skippable_sections[0].body == std::vector<uint8_t>{'a', 'b', 'c'});
  CHECK(d->skippable_sections[1].body.empty());
  CHECK(EncodeIndex(*d) == bytes);
  SECTION("a MAC section still follows them and covers them") {
    m.mac.present = true;
    auto with_mac = EncodeIndex(m);
    size_t mac_at = with_mac.size();
    auto mac = EncodeMacSection(m.mac);
    with_mac.insert(with_mac.end(), mac.begin(), mac.end());
    auto dm = DecodeIndex(with_mac, 64, "t");
    REQUIRE(dm.has_value());
    CHECK(dm->mac.present);
    CHECK(dm->mac_section_offset == mac_at);  // the MAC input (5.8) ends after the skippable sections
  }
  SECTION("an unknown type without the skippable bit is an error") {
    m.skippable_sections[0].type = 0x7e57;
    auto bad = DecodeIndex(EncodeIndex(m), 64, "t");
    REQUIRE_FALSE(bad.has_value());
    CHECK_THAT(bad.error().message(), Catch::Contains("unknown section type 32343 (not skippable"));
  }
}

TEST_CASE("ByteCursor never reads past its input", "[format]") {
  std::vector<uint8_t> b = {1, 2, 3};
  ByteCursor c(b, 0);
  CHECK(c.U16() == 0x0201);
  CHECK(c.U32() == 0);
  CHECK_FALSE(c.ok());
  CHECK(c.U8() == 0);
}
