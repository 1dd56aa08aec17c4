// Fuzz target: block and blob payload decoding (codec::Decompressor::DecompressExact, with and without a
// dictionary), and the compressor round trip.
//
// Input: u8 flags, u32le expected raw length (taken modulo one block, 16 MiB + 1), u32le dictionary length
// (modulo the 1 MiB limit + 1), that many dictionary bytes, then the payload. flags bit 0: use the dictionary
// bytes (they must make a Dictionary, as the reader's DICTIONARY section must); without it, dictionary bytes (when
// there are any) are a prefix instead, raw content as a BASED block's base is (format 1.4, 5.4:
// codec::FrameReference::Prefix), which every decode and round trip below uses; bit 1: also compress the payload
// bytes as raw content (with the dictionary when there is one) at level (flags >> 2) % 8 - 2 and check they
// decompress back exactly. bit 5: decode the payload as independent frames (format 1.3, FRAMED:
// codec::Decompressor::DecompressFrames, whole pages), from frame (flags >> 6) of 4 first, reporting ranges that
// must stay inside the output, never overlap and cover it on success; with bit 1, whole pages of the payload are
// also compressed as independent frames and decoded back.
#include <algorithm>
#include <memory>
#include <vector>

#include "codec/zstd_codec.h"
#include "fuzz_input.h"
#include "halite/format_constants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halite;
  fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.U8();
  const size_t raw_length = in.Range(0, uint64_t{format::kMaxBlockPages} * format::kPageSize);
  const size_t dict_length = in.Range(0, uint64_t{format::kMaxDictionaryLength});
  auto dict_bytes = in.Bytes(dict_length);
  auto payload = in.Rest();

  std::shared_ptr<const codec::Dictionary> dict;
  if (flags & 1) {
    auto d = codec::Dictionary::Create(std::vector<uint8_t>(dict_bytes.begin(), dict_bytes.end()), 3);
    if (!d) {
      FUZZ_CHECK(d.error().code() == StatusCode::kCorrupt);
      return 0;
    }
    dict = *d;
  }
  // What every frame here is decoded (and compressed) against: the dictionary, a prefix, or nothing.
  const codec::FrameReference ref = dict ? codec::FrameReference(dict.get())
                                         : codec::FrameReference::Prefix(std::span<const uint8_t>(dict_bytes));
  codec::Decompressor decompressor;
  std::unique_ptr<uint8_t[]> out(new uint8_t[raw_length + 1]);
  Status s = decompressor.DecompressExact(payload, ref, std::span<uint8_t>(out.get(), raw_length));
  FUZZ_CHECK_MSG(s.ok() || s.code() == StatusCode::kCorrupt, s.ToString());
  // The same context must work again after any failure (the reader reuses one per thread).
  if (!s.ok()) {
    Status again = decompressor.DecompressExact(payload, ref, std::span<uint8_t>(out.get(), raw_length));
    FUZZ_CHECK(again.code() == s.code());
  }

  if (flags & 0x20) {
    const size_t pages_length = raw_length / format::kPageSize * format::kPageSize;
    size_t reported = 0;
    const size_t first = pages_length / 4 * size_t(flags >> 6);
    Status f = decompressor.DecompressFrames(payload, ref, std::span<uint8_t>(out.get(), pages_length), first,
                                             [&](size_t b, size_t e) {
                                               FUZZ_CHECK(b < e && e <= pages_length);
                                               reported += e - b;
                                               return Status::Ok();
                                             });
    FUZZ_CHECK_MSG(f.ok() || f.code() == StatusCode::kCorrupt, f.ToString());
    FUZZ_CHECK(reported <= pages_length);
    if (f.ok()) FUZZ_CHECK(reported == pages_length);
    if ((flags & 2) && payload.size() >= 2 * format::kPageSize) {
      const auto whole = payload.first(payload.size() / format::kPageSize * format::kPageSize);
      codec::Compressor compressor;
      std::vector<uint8_t> packed;
      Status c = compressor.CompressFrames(whole, 1, ref, &packed, format::kPageSize * (1 + (flags >> 6)),
                                           format::kPageSize);
      FUZZ_CHECK_MSG(c.ok(), c.ToString());
      std::vector<uint8_t> back(whole.size());
      const size_t frame_bytes = format::kPageSize * (1 + (flags >> 6));
      Status d = whole.size() > frame_bytes ? decompressor.DecompressFrames(packed, ref, back, whole.size() - 1, {})
                                            : decompressor.DecompressExact(packed, ref, back);
      FUZZ_CHECK_MSG(d.ok(), d.ToString());
      FUZZ_CHECK(std::equal(back.begin(), back.end(), whole.begin(), whole.end()));
    }
  }

  if (flags & 2) {
    codec::Compressor compressor;
    std::vector<uint8_t> packed;
    int level = int((flags >> 2) % 8) - 2;
    Status c = compressor.Compress(payload, level, ref, &packed);
    FUZZ_CHECK_MSG(c.ok(), c.ToString());
    std::vector<uint8_t> back(payload.size());
    Status d = decompressor.DecompressExact(packed, ref, back);
    FUZZ_CHECK_MSG(d.ok(), d.ToString());
    FUZZ_CHECK(std::equal(back.begin(), back.end(), payload.begin(), payload.end()));
    if (!payload.empty() && dict == nullptr && dict_bytes.empty()) {
      // A frame made without a dictionary decodes without one; a wrong length is refused.
      std::vector<uint8_t> wrong(payload.size() + 1);
      FUZZ_CHECK(decompressor.DecompressExact(packed, nullptr, wrong).code() == StatusCode::kCorrupt);
    }
  }
  return 0;
}
