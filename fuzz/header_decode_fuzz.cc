// Fuzz target: the header decoder (format-spec section 3), and the footer decoder (section 4).
//
// header_decode_fuzz: the input is a header (any length; 64 is the only valid one). It is decoded as given and
// with its checksum recomputed. A header that decodes must re-encode to the same 64 bytes: every byte is
// checked, so decoding loses nothing.
#include <cstring>
#include <vector>

#include "codec/hashing.h"
#include "halite/bytes.h"
#include "format/envelope_codec.h"
#include "fuzz_input.h"

namespace {

using namespace halite;

void Decode(std::span<const uint8_t> bytes) {
  auto h = format::DecodeHeader(bytes, "fuzz.hlt");
  if (!h) {
    FUZZ_CHECK_MSG(h.error().code() == StatusCode::kCorrupt || h.error().code() == StatusCode::kUnsupported,
                   h.error().ToString());
    return;
  }
  FUZZ_CHECK(bytes.size() == format::kHeaderSize);
  auto again = format::EncodeHeader(*h);
  FUZZ_CHECK(std::memcmp(again.data(), bytes.data(), again.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Decode(std::span<const uint8_t>(data, size));
  if (size >= format::kHeaderSize) {
    std::vector<uint8_t> fixed(data, data + format::kHeaderSize);
    halite::StoreLe64(&fixed[56], codec::Xxh3_64(std::span<const uint8_t>(fixed.data(), 56), 0));
    Decode(fixed);
  }
  return 0;
}
