// Frames compressed against a prefix (codec::FrameReference::Prefix): what BASED blocks (format-spec 5.4, since 1.4)
// stand on. A page partly rewritten costs about what changed against its old version; the prefix is raw content
// whatever its first bytes; the frame names no dictionary, and decodes only with its prefix.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "codec/zstd_codec.h"
#include "support/synthetic_memory.h"

using namespace halite;

namespace {

constexpr size_t kPage = 4096;

// The pages of `base` with 8 bytes in every 64 rewritten.
std::vector<uint8_t> Rewritten(std::vector<uint8_t> base) {
  for (size_t at = 0; at < base.size(); at += 64) {
    const uint64_t v = at * 0x9E3779B97F4A7C15ull;
    std::memcpy(&base[at + 16], &v, 8);
  }
  return base;
}

}  // namespace

TEST_CASE("a frame coded against a prefix costs what changed and decodes only with that prefix", "[codec]") {
  const std::vector<uint8_t> base = testing::SyntheticBytes(64 * kPage, 11);
  const std::vector<uint8_t> changed = Rewritten(std::vector<uint8_t>(base.begin(), base.begin() + 8 * kPage));
  codec::Compressor c;
  std::vector<uint8_t> alone, based;
  REQUIRE(c.Compress(changed, 3, nullptr, &alone, 8 * kPage).ok());
  REQUIRE(c.Compress(changed, 3, codec::FrameReference::Prefix(base), &based, 8 * kPage).ok());
  CHECK(based.size() * 2 < alone.size());  // 1/8 of the bytes changed: far less than the pages alone
  codec::Decompressor d;
  std::vector<uint8_t> out(changed.size());
  REQUIRE(d.DecompressExact(based, codec::FrameReference::Prefix(base), out).ok());
  CHECK(out == changed);
  // Piece by piece, too.
  std::fill(out.begin(), out.end(), 0);
  size_t reports = 0;
  REQUIRE(d.DecompressExact(based, codec::FrameReference::Prefix(base), out, [&](size_t) {
            ++reports;
            return Status::Ok();
          }).ok());
  CHECK(out == changed);
  CHECK(reports >= 1);
  // Without the prefix it cannot decode; with another one it does not give the pages back.
  CHECK_FALSE(d.DecompressExact(based, nullptr, out).ok());
  std::vector<uint8_t> other = base;
  other[100] ^= 0xff;
  other[2 * kPage + 7] ^= 0xff;
  Status s = d.DecompressExact(based, codec::FrameReference::Prefix(other), out);
  CHECK((!s.ok() || out != changed));
  // The output may not overlap the prefix.
  std::vector<uint8_t> both(base.size() + changed.size());
  std::memcpy(both.data(), base.data(), base.size());
  CHECK(d.DecompressExact(based, codec::FrameReference::Prefix(std::span<const uint8_t>(both).first(base.size())),
                          std::span<uint8_t>(both).subspan(base.size() - kPage, changed.size()))
            .code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a prefix is raw content even when it starts like a zstd dictionary", "[codec]") {
  std::vector<uint8_t> base = testing::SyntheticBytes(16 * kPage, 12);
  const uint8_t magic[] = {0x37, 0xA4, 0x30, 0xEC, 1, 0, 0, 0};  // a dictionary's magic and ID: page data may be so
  std::memcpy(base.data(), magic, sizeof magic);
  const std::vector<uint8_t> changed = Rewritten(base);
  codec::Compressor c;
  std::vector<uint8_t> frame;
  REQUIRE(c.Compress(changed, 3, codec::FrameReference::Prefix(base), &frame).ok());
  codec::Decompressor d;
  std::vector<uint8_t> out(changed.size());
  REQUIRE(d.DecompressExact(frame, codec::FrameReference::Prefix(base), out).ok());
  CHECK(out == changed);
  REQUIRE(d.DecompressExact(frame, codec::FrameReference::Prefix(base), out, [](size_t) { return Status::Ok(); }).ok());
  CHECK(out == changed);
}

TEST_CASE("independent frames coded against one prefix decode from any frame first", "[codec]") {
  const std::vector<uint8_t> base = testing::SyntheticBytes(32 * kPage, 13);
  const std::vector<uint8_t> changed = Rewritten(base);
  codec::Compressor c;
  std::vector<uint8_t> payload;
  REQUIRE(c.CompressFrames(changed, 3, codec::FrameReference::Prefix(base), &payload, 8 * kPage, 4 * kPage).ok());
  auto frames = codec::SplitFrames(payload, nullptr, changed.size(), kPage);  // no dictionary named
  REQUIRE(frames.has_value());
  CHECK(frames->size() == 4);
  codec::Decompressor d;
  for (size_t first : {size_t(0), 20 * kPage}) {
    std::vector<uint8_t> out(changed.size(), 0xee);
    std::vector<size_t> begins;
    REQUIRE(d.DecompressFrames(payload, codec::FrameReference::Prefix(base), out, first, [&](size_t b, size_t) {
               begins.push_back(b);
               return Status::Ok();
             }).ok());
    CHECK(out == changed);
    REQUIRE_FALSE(begins.empty());
    CHECK(begins.front() == (first / (8 * kPage)) * 8 * kPage);  // the frame holding `first` came first
  }
}
