// Keyed BLAKE2b MACs (libsodium's crypto_generichash with a 32-byte key) for authenticated checkpoints
// (format-spec section 5.8). The only file that includes sodium.h is mac.cc.
#ifndef HALITE_CODEC_MAC_H_
#define HALITE_CODEC_MAC_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "halite/authentication.h"

namespace halite::codec {

// BLAKE2b(key, tag || parts...) truncated to out.size() bytes (16..64).
void Mac(const MacKey& key, std::string_view tag, std::span<const std::span<const uint8_t>> parts,
         std::span<uint8_t> out);
// Constant-time comparison.
bool MacEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace halite::codec

#endif  // HALITE_CODEC_MAC_H_
