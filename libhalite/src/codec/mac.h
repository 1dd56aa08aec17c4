// Keyed BLAKE2b MACs (libsodium's crypto_generichash with a 32-byte key) for authenticated checkpoints
// (format-spec section 5.8). The only file that includes sodium.h is mac.cc.
#ifndef HALITE_CODEC_MAC_H_
#define HALITE_CODEC_MAC_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "halite/authentication.h"
#include "halite/status.h"

namespace halite::codec {

// Initialises libsodium (sodium_init()) the first time it is called; later calls return the first result.
// Thread-safe. Call before the first Mac(): the reader and the writer do when they are given a key.
// Errors: kIoError when sodium_init() fails (libsodium could not set itself up, e.g. no random source).
Status InitMac();

// BLAKE2b(key, tag || parts...) truncated to out.size() bytes (16..64). Precondition: InitMac() returned ok.
void Mac(const MacKey& key, std::string_view tag, std::span<const std::span<const uint8_t>> parts,
         std::span<uint8_t> out);
// Constant-time comparison.
bool MacEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);

// Tests only: makes InitMac() call `init` instead of sodium_init() and forget any earlier result (nullptr
// restores sodium_init()).
void SetSodiumInitForTesting(int (*init)());

}  // namespace halite::codec

#endif  // HALITE_CODEC_MAC_H_
