// Fuzz target: the footer decoder (format-spec section 4).
//
// Input: u64le actual file size, then the footer bytes (any length; 64 is the only valid one). Decoded as given
// and with the footer checksum recomputed. A footer that decodes must satisfy the layout arithmetic (the index
// ends where the footer starts, and fits the file) and re-encode to the same bytes.
#include <cstring>
#include <vector>

#include "codec/hashing.h"
#include "halite/bytes.h"
#include "format/envelope_codec.h"
#include "fuzz_input.h"

namespace {

using namespace halite;

void Decode(std::span<const uint8_t> bytes, uint64_t file_size) {
  auto f = format::DecodeFooter(bytes, file_size, "fuzz.hlt");
  if (!f) {
    FUZZ_CHECK_MSG(f.error().code() == StatusCode::kCorrupt, f.error().ToString());
    return;
  }
  FUZZ_CHECK(bytes.size() == format::kFooterSize);
  FUZZ_CHECK(f->file_size == file_size);
  FUZZ_CHECK(file_size >= format::kHeaderSize + format::kFooterSize);
  FUZZ_CHECK(f->index_offset >= format::kHeaderSize);
  FUZZ_CHECK(f->index_length <= file_size - format::kHeaderSize - format::kFooterSize);
  FUZZ_CHECK(f->index_offset + f->index_length + format::kFooterSize == file_size);
  auto again = format::EncodeFooter(*f);
  FUZZ_CHECK(std::memcmp(again.data(), bytes.data(), again.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  uint64_t file_size = in.U64();
  auto footer = in.Rest();
  Decode(footer, file_size);
  if (footer.size() >= format::kFooterSize) {
    std::vector<uint8_t> fixed(footer.begin(), footer.begin() + format::kFooterSize);
    FileId id;
    std::memcpy(id.data(), &fixed[24], id.size());
    halite::StoreLe64(&fixed[48], codec::Xxh3_64(std::span<const uint8_t>(fixed.data(), 48), format::FileSeed(id)));
    Decode(fixed, file_size);
  }
  return 0;
}
