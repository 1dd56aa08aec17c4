// Fuzz target: block and blob payload decoding (codec::Decompressor::DecompressExact, with and without a
// dictionary), and the compressor round trip.
//
// Input: u8 flags, u32le expected raw length (taken modulo one block, 16 MiB + 1), u32le dictionary length
// (modulo the 1 MiB limit + 1), that many dictionary bytes, then the payload. flags bit 0: use the dictionary
// bytes (they must make a Dictionary, as the reader's DICTIONARY section must); bit 1: also compress the payload
// bytes as raw content (with the dictionary when there is one) at level (flags >> 2) % 8 - 2 and check they
// decompress back exactly.
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
  codec::Decompressor decompressor;
  std::unique_ptr<uint8_t[]> out(new uint8_t[raw_length + 1]);
  Status s = decompressor.DecompressExact(payload, dict.get(), std::span<uint8_t>(out.get(), raw_length));
  FUZZ_CHECK_MSG(s.ok() || s.code() == StatusCode::kCorrupt, s.ToString());
  // The same context must work again after any failure (the reader reuses one per thread).
  if (!s.ok()) {
    Status again = decompressor.DecompressExact(payload, dict.get(), std::span<uint8_t>(out.get(), raw_length));
    FUZZ_CHECK(again.code() == s.code());
  }

  if (flags & 2) {
    codec::Compressor compressor;
    std::vector<uint8_t> packed;
    int level = int((flags >> 2) % 8) - 2;
    Status c = compressor.Compress(payload, level, dict.get(), &packed);
    FUZZ_CHECK_MSG(c.ok(), c.ToString());
    std::vector<uint8_t> back(payload.size());
    Status d = decompressor.DecompressExact(packed, dict.get(), back);
    FUZZ_CHECK_MSG(d.ok(), d.ToString());
    FUZZ_CHECK(std::equal(back.begin(), back.end(), payload.begin(), payload.end()));
    if (!payload.empty() && dict == nullptr) {
      // A frame made without a dictionary decodes without one; a wrong length is refused.
      std::vector<uint8_t> wrong(payload.size() + 1);
      FUZZ_CHECK(decompressor.DecompressExact(packed, nullptr, wrong).code() == StatusCode::kCorrupt);
    }
  }
  return 0;
}
