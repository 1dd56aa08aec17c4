// Recomputes every checksum of a would-be checkpoint in place (header, footer, index, and each block and blob the
// index describes), so a fuzzer's mutations reach the rules behind the checksums instead of stopping at them.
// Uses the same pure codecs as the reader.
#ifndef HALITE_FUZZ_CHECKSUM_FIXUP_H_
#define HALITE_FUZZ_CHECKSUM_FIXUP_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "codec/hashing.h"
#include "format/byte_order.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/format_constants.h"

namespace halite::fuzz {

inline void FixChecksums(std::vector<uint8_t>& f) {
  using namespace halite::format;
  if (f.size() < kHeaderSize + kFooterSize) return;
  StoreLe64(&f[56], codec::Xxh3_64(std::span<const uint8_t>(f.data(), 56), 0));
  uint8_t* footer = f.data() + f.size() - kFooterSize;
  FileId id;
  std::memcpy(id.data(), footer + 24, id.size());
  const uint64_t seed = FileSeed(id);
  const uint64_t index_offset = LoadLe64(footer), index_length = LoadLe64(footer + 8);
  const uint64_t limit = f.size() - kFooterSize;
  if (index_offset <= limit && index_length <= limit - index_offset) {
    std::span<uint8_t> index(f.data() + index_offset, index_length);
    auto model = DecodeIndex(index, index_offset, "fixup");
    if (model) {
      // DecodeIndex checked that every payload lies between the header and the index.
      for (size_t i = 0; i < model->blocks.size(); ++i) {
        auto& b = model->blocks[i];
        b.checksum = codec::Xxh3_64(std::span<const uint8_t>(f.data() + b.offset, b.stored_length), BlockSeed(seed, i));
      }
      for (size_t i = 0; i < model->blobs.size(); ++i) {
        auto& b = model->blobs[i];
        b.checksum = codec::Xxh3_64(std::span<const uint8_t>(f.data() + b.offset, b.stored_length), BlobSeed(seed, i));
      }
      std::vector<uint8_t> encoded = EncodeIndex(*model);
      if (model->mac.present) {
        auto mac = EncodeMacSection(model->mac);
        encoded.insert(encoded.end(), mac.begin(), mac.end());
      }
      if (encoded.size() == index.size()) std::memcpy(index.data(), encoded.data(), encoded.size());
    }
    StoreLe64(footer + 40, codec::Xxh3_64(index, seed));
  }
  StoreLe64(footer + 48, codec::Xxh3_64(std::span<const uint8_t>(footer, 48), seed));
}

}  // namespace halite::fuzz

#endif  // HALITE_FUZZ_CHECKSUM_FIXUP_H_
