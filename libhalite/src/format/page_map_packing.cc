#include "format/page_map_packing.h"

#include <fmt/format.h>

#include "codec/zstd_codec.h"
#include "halite/bytes.h"

namespace halite::format {
namespace {

// Level 9: a page map is at most 8 MiB (2^31 pages would be 8 GiB; real ones are 4 bytes a page of memory) and
// packs in milliseconds at it, close to what level 19 gains on delta-coded maps.
constexpr int kPageMapLevel = 9;

// In place: word i becomes word i - word (i - stride), from the last word back, so each subtraction sees the plain
// word before it.
void DeltaEncode(std::vector<uint8_t>* bytes, uint32_t stride) {
  const size_t words = bytes->size() / 4;
  for (size_t i = words; i-- > stride;) {
    StoreLe32(&(*bytes)[i * 4], LoadLe32(&(*bytes)[i * 4]) - LoadLe32(&(*bytes)[(i - stride) * 4]));
  }
}

// The inverse of DeltaEncode: a running sum per stride lane, from the first word on.
void DeltaDecode(std::vector<uint8_t>* bytes, uint32_t stride) {
  const size_t words = bytes->size() / 4;
  for (size_t i = stride; i < words; ++i) {
    StoreLe32(&(*bytes)[i * 4], LoadLe32(&(*bytes)[i * 4]) + LoadLe32(&(*bytes)[(i - stride) * 4]));
  }
}

}  // namespace

Result<std::vector<uint8_t>> PackPageMap(std::span<const uint8_t> plain, bool sparse) {
  if (plain.size() % 4 != 0) return Status::InvalidArgument("a page-map body is a multiple of 4 bytes");
  std::vector<uint8_t> delta(plain.begin(), plain.end());
  DeltaEncode(&delta, PageMapDeltaStride(sparse));
  codec::Compressor compressor;
  std::vector<uint8_t> packed;
  HLT_RETURN_IF_ERROR(compressor.Compress(delta, kPageMapLevel, {}, &packed));
  return packed;
}

Result<std::vector<uint8_t>> UnpackPageMap(std::span<const uint8_t> packed, bool sparse, uint64_t max_plain,
                                           bool exact) {
  HLT_ASSIGN_OR_RETURN(uint64_t size, codec::FrameContentSize(packed));
  if (size % 4 != 0 || size > max_plain || (exact && size != max_plain)) {
    return Status::Corrupt(fmt::format("packed frame declares {} bytes (expected {}{}, a multiple of 4)", size,
                                       exact ? "" : "at most ", max_plain));
  }
  if (packed.size() >= size) {
    return Status::Corrupt(fmt::format("packed body of {} bytes is not shorter than the {} bytes it holds (a writer "
                                       "packs a page map only when that makes it shorter)",
                                       packed.size(), size));
  }
  std::vector<uint8_t> plain(size);  // bounded by max_plain, which the caller derived from REGIONS
  codec::Decompressor decompressor;
  HLT_RETURN_IF_ERROR(decompressor.DecompressExact(packed, {}, plain));
  DeltaDecode(&plain, PageMapDeltaStride(sparse));
  return plain;
}

}  // namespace halite::format
