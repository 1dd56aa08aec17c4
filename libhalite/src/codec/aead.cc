#include "codec/aead.h"

#include <sodium.h>

#include <cstring>

#include "codec/mac.h"

namespace halite::codec {

struct AeadKey::State {
  crypto_aead_aes256gcm_state aes;  // AES-256-GCM: the expanded key (CRYPTO_ALIGN(16); new honours it)
  unsigned char key[kAeadKeySize];  // XChaCha20-Poly1305: the key itself
};

bool AesGcmAvailable() { return InitMac().ok() && crypto_aead_aes256gcm_is_available() == 1; }

const char* AeadAlgorithmName(AeadAlgorithm algorithm) {
  switch (algorithm) {
    case AeadAlgorithm::kAes256Gcm: return "AES-256-GCM";
    case AeadAlgorithm::kXChaCha20Poly1305: return "XChaCha20-Poly1305";
  }
  return "?";
}

AeadKey::AeadKey(AeadAlgorithm algorithm, std::unique_ptr<State> state)
    : algorithm_(algorithm), state_(std::move(state)) {}

AeadKey::~AeadKey() {
  if (state_) sodium_memzero(state_.get(), sizeof(State));
}

Result<std::unique_ptr<AeadKey>> AeadKey::Create(AeadAlgorithm algorithm, std::span<const uint8_t, kAeadKeySize> key) {
  HLT_RETURN_IF_ERROR(InitMac());
  auto state = std::make_unique<State>();
  switch (algorithm) {
    case AeadAlgorithm::kAes256Gcm:
      if (crypto_aead_aes256gcm_is_available() != 1) {
        return Status::Unsupported(
            "AES-256-GCM: libsodium computes it only on a CPU with AES-NI and PCLMULQDQ, which this one lacks "
            "(re-encrypt with XChaCha20-Poly1305 on a machine that has them: hlt-save rekey --cipher xchacha20poly1305)");
      }
      crypto_aead_aes256gcm_beforenm(&state->aes, key.data());
      break;
    case AeadAlgorithm::kXChaCha20Poly1305:
      std::memcpy(state->key, key.data(), kAeadKeySize);
      break;
    default:
      return Status::InvalidArgument("unknown AEAD algorithm " + std::to_string(uint32_t(algorithm)));
  }
  return std::unique_ptr<AeadKey>(new AeadKey(algorithm, std::move(state)));
}

void AeadKey::Seal(const AeadNonce& nonce, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
                   std::span<uint8_t> out) const {
  unsigned long long written = 0;
  static const unsigned char kNothing = 0;  // libsodium wants a pointer even for an empty message
  const unsigned char* m = plain.empty() ? &kNothing : plain.data();
  if (algorithm_ == AeadAlgorithm::kAes256Gcm) {
    crypto_aead_aes256gcm_encrypt_afternm(out.data(), &written, m, plain.size(), ad.data(), ad.size(), nullptr,
                                          nonce.data(), &state_->aes);
  } else {
    crypto_aead_xchacha20poly1305_ietf_encrypt(out.data(), &written, m, plain.size(), ad.data(), ad.size(), nullptr,
                                               nonce.data(), state_->key);
  }
}

bool AeadKey::Open(const AeadNonce& nonce, std::span<const uint8_t> ad, std::span<const uint8_t> sealed,
                   std::span<uint8_t> out) const {
  if (sealed.size() < kAeadTagSize || out.size() != sealed.size() - kAeadTagSize) return false;
  unsigned long long written = 0;
  unsigned char scratch = 0;  // an empty plaintext still needs somewhere to point
  unsigned char* m = out.empty() ? &scratch : out.data();
  int rc;
  if (algorithm_ == AeadAlgorithm::kAes256Gcm) {
    rc = crypto_aead_aes256gcm_decrypt_afternm(m, &written, nullptr, sealed.data(), sealed.size(), ad.data(),
                                               ad.size(), nonce.data(), &state_->aes);
  } else {
    rc = crypto_aead_xchacha20poly1305_ietf_decrypt(m, &written, nullptr, sealed.data(), sealed.size(), ad.data(),
                                                    ad.size(), nonce.data(), state_->key);
  }
  if (rc != 0) {
    if (!out.empty()) sodium_memzero(out.data(), out.size());
    return false;
  }
  return true;
}

void RandomBytes(std::span<uint8_t> out) {
  (void)InitMac();  // randombytes works without sodium_init, but initialising picks the best source once
  randombytes_buf(out.data(), out.size());
}

void Wipe(std::span<uint8_t> bytes) {
  if (!bytes.empty()) sodium_memzero(bytes.data(), bytes.size());
}

}  // namespace halite::codec
