#include "halite/streaming_hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t as a member (64-byte aligned; C++17 new honours it)
#include <xxhash.h>

#include <fmt/format.h>

namespace halite {

// XXH3_state_t is declared in xxhash.h; wrapping it keeps that header out of the public one.
struct StreamingHash128::State {
  XXH3_state_t xxh;
};

StreamingHash128::StreamingHash128() : state_(std::make_unique<State>()) { XXH3_128bits_reset(&state_->xxh); }

StreamingHash128::~StreamingHash128() = default;

void StreamingHash128::Update(std::span<const uint8_t> bytes) {
  XXH3_128bits_update(&state_->xxh, bytes.data(), bytes.size());
}

Hash128Digest StreamingHash128::Digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(&state_->xxh);
  return Hash128Digest{h.low64, h.high64};
}

std::string Hash128Digest::Hex() const { return fmt::format("{:016x}{:016x}", high, low); }

}  // namespace halite
