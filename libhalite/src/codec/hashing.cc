#include "codec/hashing.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstring>

namespace halite::codec {

uint64_t Xxh3_64(std::span<const uint8_t> data, uint64_t seed) {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

Hash128 Xxh3_128(std::span<const uint8_t> data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return {h.low64, h.high64};
}

Hash128 Xxh3_128Concat(std::initializer_list<std::span<const uint8_t>> parts) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  for (const auto& p : parts) XXH3_128bits_update(&state, p.data(), p.size());
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  return {h.low64, h.high64};
}

bool IsAllZero(std::span<const uint8_t> data) {
  // Word-at-a-time OR; pages are 8-byte aligned in practice but memcpy keeps it legal for any alignment.
  size_t i = 0;
  uint64_t acc = 0;
  for (; i + 64 <= data.size(); i += 64) {
    uint64_t w[8];
    std::memcpy(w, data.data() + i, 64);
    acc |= w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7];
    if (acc) return false;
  }
  for (; i < data.size(); ++i) acc |= data[i];
  return acc == 0;
}

}  // namespace halite::codec
