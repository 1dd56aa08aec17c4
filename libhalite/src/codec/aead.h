// Authenticated encryption for encrypted checkpoints (format-spec section 13), and the page staging of an
// encrypting writer: OpenSSL's AES-256-GCM and libsodium's XChaCha20-Poly1305, nothing hand-written. aead.cc is the
// only file that includes OpenSSL's headers, and with mac.cc the only one that includes sodium.h.
#ifndef HALITE_CODEC_AEAD_H_
#define HALITE_CODEC_AEAD_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "halite/status.h"

namespace halite::codec {

// The values are the format's cipher numbers (format-spec 13.5).
enum class AeadAlgorithm : uint32_t { kAes256Gcm = 1, kXChaCha20Poly1305 = 2 };

inline constexpr size_t kAeadKeySize = 32;
inline constexpr size_t kAeadTagSize = 16;
// Both algorithms take this many nonce bytes here: AES-256-GCM uses the first 12, XChaCha20-Poly1305 all 24.
inline constexpr size_t kAeadNonceSize = 24;
using AeadNonce = std::array<uint8_t, kAeadNonceSize>;

// The CPU has AES-NI and PCLMULQDQ (libsodium's probe): AES-256-GCM is fast and constant-time in hardware, the
// writers' default then. Files of either cipher are read on any CPU. Calls InitMac() first.
bool AesGcmAvailable();
const char* AeadAlgorithmName(AeadAlgorithm algorithm);

// One key of one algorithm. Seal and Open are const and thread-safe. The key material is wiped when the object
// goes.
class AeadKey {
 public:
  // Errors: kIoError when libsodium cannot initialise; kUnsupported when OpenSSL offers no AES-256-GCM.
  static Result<std::unique_ptr<AeadKey>> Create(AeadAlgorithm algorithm, std::span<const uint8_t, kAeadKeySize> key);
  ~AeadKey();
  AeadKey(const AeadKey&) = delete;
  AeadKey& operator=(const AeadKey&) = delete;

  AeadAlgorithm algorithm() const { return algorithm_; }
  // Writes the ciphertext of `plain` followed by its tag to `out` (exactly plain.size() + 16 bytes; may not
  // overlap `plain`).
  void Seal(const AeadNonce& nonce, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
            std::span<uint8_t> out) const;
  // Checks the tag of `sealed` (ciphertext and tag) and writes the plaintext to `out` (exactly sealed.size() - 16
  // bytes): elsewhere, or in place over the ciphertext (out.data() == sealed.data(): both AEADs decrypt in place;
  // any other overlap is refused). False, with `out` wiped, when the tag does not verify, sealed is shorter than
  // a tag or the buffers overlap otherwise. The plaintext is the caller's to use only when this returns true.
  bool Open(const AeadNonce& nonce, std::span<const uint8_t> ad, std::span<const uint8_t> sealed,
            std::span<uint8_t> out) const;

 private:
  struct State;
  AeadKey(AeadAlgorithm algorithm, std::unique_ptr<State> state);
  AeadAlgorithm algorithm_;
  std::unique_ptr<State> state_;
};

// `out.size()` bytes from the operating system's random source (libsodium's randombytes_buf).
void RandomBytes(std::span<uint8_t> out);
// Overwrites `bytes` with zeros in a way the compiler does not remove.
void Wipe(std::span<uint8_t> bytes);

}  // namespace halite::codec

#endif  // HALITE_CODEC_AEAD_H_
