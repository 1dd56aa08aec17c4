// The codec's cut frames and piece-by-piece decoding (codec/zstd_codec.h): what streamed faults stand on.
#include <algorithm>
#include <catch2/catch.hpp>
#include <tuple>
#include <vector>

#include "codec/zstd_codec.h"
#include "support/synthetic_memory.h"

using namespace halite;

namespace {

constexpr size_t kPage = 4096;

// Decodes `frame` piece by piece into a buffer of `size` bytes; checks every reported prefix against `want`.
struct Decoded {
  Status status;
  std::vector<size_t> ready;
  bool prefixes_final = true;
};
Decoded DecodeInPieces(std::span<const uint8_t> frame, const codec::Dictionary* dict, std::span<const uint8_t> want) {
  codec::Decompressor d;
  std::vector<uint8_t> out(want.size(), 0xee);
  Decoded r;
  r.status = d.DecompressExact(frame, dict, out, [&](size_t n) {
    r.prefixes_final = r.prefixes_final && n <= out.size() && std::equal(out.begin(), out.begin() + ptrdiff_t(n), want.begin());
    r.ready.push_back(n);
    return Status::Ok();
  });
  return r;
}

}  // namespace

TEST_CASE("a cut frame decodes piece by piece, one report per cut, and whole as before", "[codec]") {
  const std::vector<uint8_t> raw = testing::SyntheticBytes(64 * kPage, 3);
  codec::Compressor c;
  for (size_t cut_pages : {0u, 4u, 8u, 16u}) {
    INFO("cut " << cut_pages << " pages");
    std::vector<uint8_t> frame;
    REQUIRE(c.Compress(raw, 3, nullptr, &frame, cut_pages * kPage).ok());
    REQUIRE(frame.size() < raw.size());
    Decoded d = DecodeInPieces(frame, nullptr, raw);
    REQUIRE(d.status.ok());
    CHECK(d.prefixes_final);
    REQUIRE_FALSE(d.ready.empty());
    CHECK(d.ready.back() == raw.size());
    CHECK(std::is_sorted(d.ready.begin(), d.ready.end()));
    // Uncut: zstd's own 128 KiB blocks.
    CHECK(d.ready.size() == (cut_pages ? 64 / cut_pages : 2));
    if (cut_pages) CHECK(d.ready.front() == cut_pages * kPage);
    // The one-call decoder reads the same frame.
    codec::Decompressor whole;
    std::vector<uint8_t> out(raw.size());
    REQUIRE(whole.DecompressExact(frame, nullptr, out).ok());
    CHECK(out == raw);
  }
}

TEST_CASE("a cut frame with a dictionary decodes piece by piece", "[codec]") {
  std::vector<uint8_t> samples;
  for (uint64_t s = 0; s < 64; ++s) {
    auto page = testing::SyntheticBytes(kPage, 100 + s % 8);
    samples.insert(samples.end(), page.begin(), page.end());
  }
  auto bytes = codec::TrainDictionary(samples, kPage, 16 * 1024);
  REQUIRE_FALSE(bytes.empty());  // deterministic samples: training works on them
  auto dict = codec::Dictionary::Create(bytes, 3);
  REQUIRE(dict.has_value());
  std::vector<uint8_t> raw(samples.begin(), samples.begin() + 32 * kPage);
  codec::Compressor c;
  std::vector<uint8_t> frame;
  REQUIRE(c.Compress(raw, 3, dict->get(), &frame, 8 * kPage).ok());
  Decoded d = DecodeInPieces(frame, dict->get(), raw);
  REQUIRE(d.status.ok());
  CHECK(d.prefixes_final);
  CHECK(d.ready.size() == 4);
  // Without its dictionary the frame is refused before a byte is decoded.
  Decoded none = DecodeInPieces(frame, nullptr, raw);
  CHECK(none.status.code() == StatusCode::kCorrupt);
  CHECK(none.ready.empty());
}

TEST_CASE("one decoder takes turns between dictionaries, each frame decoded against its own", "[codec]") {
  // A decoder keeps a copy of the last dictionary it decoded against (the frame's content goes right after it):
  // frames of other dictionaries, in turn, piece by piece and in one call, and a dictionary made after another
  // was freed (an address may come back; the copy must not be taken for the new one).
  auto make = [](uint64_t seed) {
    std::vector<uint8_t> samples;
    for (uint64_t s = 0; s < 64; ++s) {
      auto page = testing::SyntheticBytes(kPage, seed + s % 8);
      samples.insert(samples.end(), page.begin(), page.end());
    }
    auto dict = codec::Dictionary::Create(codec::TrainDictionary(samples, kPage, 16 * 1024), 3);
    REQUIRE(dict.has_value());
    std::vector<uint8_t> raw(samples.begin() + 16 * kPage, samples.begin() + 48 * kPage), frame;
    codec::Compressor c;
    REQUIRE(c.Compress(raw, 3, dict->get(), &frame, 8 * kPage).ok());
    return std::make_tuple(*dict, raw, frame);
  };
  codec::Decompressor d;
  auto check = [&d](const codec::Dictionary* dict, const std::vector<uint8_t>& raw, const std::vector<uint8_t>& frame) {
    std::vector<uint8_t> out(raw.size());
    REQUIRE(d.DecompressExact(frame, dict, out).ok());
    CHECK(out == raw);
    std::fill(out.begin(), out.end(), 0);
    REQUIRE(d.DecompressExact(frame, dict, out, [](size_t) { return Status::Ok(); }).ok());
    CHECK(out == raw);
  };
  auto [a, raw_a, frame_a] = make(100);
  auto [b, raw_b, frame_b] = make(300);
  REQUIRE(a->serial() != b->serial());
  for (int turn = 0; turn < 2; ++turn) {
    check(a.get(), raw_a, frame_a);
    check(b.get(), raw_b, frame_b);
  }
  // Against the other dictionary, a frame decodes to other bytes or is refused; never to its own content.
  std::vector<uint8_t> out(raw_a.size());
  Status wrong = d.DecompressExact(frame_a, b.get(), out);
  CHECK((!wrong.ok() || out != raw_a));
  a.reset();
  auto [c, raw_c, frame_c] = make(500);
  check(c.get(), raw_c, frame_c);
  check(b.get(), raw_b, frame_b);
}

TEST_CASE("piece-by-piece decoding refuses what the one-call decoder refuses, before any piece", "[codec]") {
  const std::vector<uint8_t> raw = testing::SyntheticBytes(16 * kPage, 9);
  codec::Compressor c;
  std::vector<uint8_t> frame;
  REQUIRE(c.Compress(raw, 3, nullptr, &frame, 4 * kPage).ok());
  // Wrong expected size, trailing bytes, a truncated frame.
  std::vector<uint8_t> bigger(raw);
  bigger.resize(raw.size() + kPage);
  Decoded wrong_size = DecodeInPieces(frame, nullptr, bigger);
  CHECK(wrong_size.status.code() == StatusCode::kCorrupt);
  CHECK(wrong_size.ready.empty());
  std::vector<uint8_t> trailing(frame);
  trailing.push_back(0);
  Decoded t = DecodeInPieces(trailing, nullptr, raw);
  CHECK(t.status.code() == StatusCode::kCorrupt);
  CHECK(t.ready.empty());
  Decoded cut = DecodeInPieces(std::span<const uint8_t>(frame).first(frame.size() - 3), nullptr, raw);
  CHECK(cut.status.code() == StatusCode::kCorrupt);
  CHECK(cut.ready.empty());
}

TEST_CASE("a progress callback's error stops decoding and comes back unchanged", "[codec]") {
  const std::vector<uint8_t> raw = testing::SyntheticBytes(16 * kPage, 11);
  codec::Compressor c;
  std::vector<uint8_t> frame;
  REQUIRE(c.Compress(raw, 3, nullptr, &frame, 4 * kPage).ok());
  codec::Decompressor d;
  std::vector<uint8_t> out(raw.size());
  int calls = 0;
  Status s = d.DecompressExact(frame, nullptr, out, [&](size_t) {
    return ++calls == 2 ? Status::IoError("sink gone") : Status::Ok();
  });
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message() == "sink gone");
  CHECK(calls == 2);
  // The context is usable again afterwards.
  REQUIRE(d.DecompressExact(frame, nullptr, out).ok());
  CHECK(out == raw);
}

TEST_CASE("independent frames decode from any frame first, a bad frame anywhere is refused before any range",
          "[codec]") {
  const std::vector<uint8_t> raw = testing::SyntheticBytes(64 * kPage, 5);
  codec::Compressor c;
  std::vector<uint8_t> payload;
  REQUIRE(c.CompressFrames(raw, 3, nullptr, &payload, 16 * kPage, 8 * kPage).ok());
  auto frames = codec::SplitFrames(payload, nullptr, raw.size(), kPage);
  REQUIRE(frames.has_value());
  REQUIRE(frames->size() == 4);
  for (size_t first_page : {0u, 17u, 40u, 63u}) {
    INFO("page " << first_page << " first");
    codec::Decompressor d;
    std::vector<uint8_t> out(raw.size(), 0xee);
    std::vector<std::pair<size_t, size_t>> ranges;
    bool final_when_reported = true;
    Status s = d.DecompressFrames(payload, nullptr, out, first_page * kPage, [&](size_t b, size_t e) {
      final_when_reported = final_when_reported && std::equal(out.begin() + ptrdiff_t(b), out.begin() + ptrdiff_t(e),
                                                               raw.begin() + ptrdiff_t(b));
      ranges.emplace_back(b, e);
      return Status::Ok();
    });
    REQUIRE(s.ok());
    CHECK(out == raw);
    CHECK(final_when_reported);
    REQUIRE(ranges.size() == 8);  // 4 frames of 2 pieces
    CHECK(ranges[0].first == first_page / 16 * 16 * kPage);
    CHECK(ranges[1].first == ranges[0].second);  // the faulting page's frame whole before any other
    // Then the frames after it, then those before it (wrapping round): a guest goes on forward from its fault.
    std::vector<size_t> frame_order;
    for (size_t i = 0; i < ranges.size(); i += 2) frame_order.push_back(ranges[i].first / (16 * kPage));
    const size_t lead = first_page / 16;
    for (size_t k = 0; k < frame_order.size(); ++k) CHECK(frame_order[k] == (lead + k) % 4);
  }
  // The last frame cut short: SplitFrames fails on it, so nothing is decoded or reported, whichever frame first.
  std::vector<uint8_t> cut(payload.begin(), payload.end() - 7);
  codec::Decompressor d;
  std::vector<uint8_t> out(raw.size());
  size_t reported = 0;
  Status s = d.DecompressFrames(cut, nullptr, out, 0, [&](size_t, size_t) {
    ++reported;
    return Status::Ok();
  });
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("frame 3"));
  CHECK(reported == 0);
  // One frame where two are required.
  std::vector<uint8_t> one;
  REQUIRE(c.Compress(raw, 3, nullptr, &one, 8 * kPage).ok());
  CHECK_THAT(codec::SplitFrames(one, nullptr, raw.size(), kPage).error().message(), Catch::Contains("expected at least 2"));
}
