// Checksums and content hashes (xxHash). The only place besides zstd_codec that includes a codec library.
#ifndef HALITE_CODEC_HASHING_H_
#define HALITE_CODEC_HASHING_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

namespace halite::codec {

uint64_t Xxh3_64(std::span<const uint8_t> data, uint64_t seed);

struct Hash128 {
  uint64_t low = 0, high = 0;
  bool operator==(const Hash128&) const = default;
};
Hash128 Xxh3_128(std::span<const uint8_t> data);
// XXH3_128 (seed 0) of the concatenation of `parts`, without concatenating them.
Hash128 Xxh3_128Concat(std::initializer_list<std::span<const uint8_t>> parts);

// True when all bytes are zero (fast path for 4096-byte pages).
bool IsAllZero(std::span<const uint8_t> data);

}  // namespace halite::codec

#endif  // HALITE_CODEC_HASHING_H_
