#include "codec/aead.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "codec/mac.h"

namespace halite::codec {

namespace {

// At most this many idle OpenSSL contexts a direction are kept for a key (a few KiB each); more threads than this
// at once make and free their own.
constexpr size_t kMaxIdleContexts = 64;

EVP_CIPHER* AesGcm();

}  // namespace

// AES-256-GCM is OpenSSL's (libcrypto): 4.4 GB/s on this machine's CPU against 1.85 for libsodium 1.0.18's, and
// available on every CPU (libsodium's needs AES-NI). XChaCha20-Poly1305 is libsodium's.
struct AeadKey::State {
  unsigned char key[kAeadKeySize];
  // OpenSSL contexts that hold this key's schedule, idle, for sealing [0] and opening [1]. Setting one up from the
  // key costs about 0.25 us, a fifth of sealing a 4 KiB staging page (bench/results/2026-11-28-save26/): a call
  // takes one (or makes one), sets only the nonce, and gives it back, so a key is used from any number of threads
  // at once. Freeing a context wipes its copy of the key schedule.
  std::mutex mu;
  std::vector<EVP_CIPHER_CTX*> idle[2];

  ~State() {
    for (auto& list : idle) {
      for (EVP_CIPHER_CTX* c : list) EVP_CIPHER_CTX_free(c);
    }
  }

  // A context of this key for one direction, set to `nonce`; nullptr when OpenSSL cannot make one.
  EVP_CIPHER_CTX* Take(bool encrypt, const AeadNonce& nonce) {
    EVP_CIPHER_CTX* c = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle[encrypt ? 0 : 1].empty()) {
        c = idle[encrypt ? 0 : 1].back();
        idle[encrypt ? 0 : 1].pop_back();
      }
    }
    if (c == nullptr) {
      c = EVP_CIPHER_CTX_new();
      if (c == nullptr || EVP_CipherInit_ex2(c, AesGcm(), key, nullptr, encrypt ? 1 : 0, nullptr) != 1) {
        EVP_CIPHER_CTX_free(c);
        return nullptr;
      }
    }
    // The key schedule stays; the nonce (12 bytes, GCM's default length) starts a new message.
    if (EVP_CipherInit_ex2(c, nullptr, nullptr, nonce.data(), encrypt ? 1 : 0, nullptr) != 1) {
      EVP_CIPHER_CTX_free(c);
      return nullptr;
    }
    return c;
  }

  // Gives `c` back for another call when its message finished cleanly; frees it otherwise (a failed tag check
  // leaves no state worth keeping) or when enough are idle.
  void GiveBack(bool encrypt, EVP_CIPHER_CTX* c, bool clean) {
    if (clean) {
      std::lock_guard<std::mutex> lock(mu);
      auto& list = idle[encrypt ? 0 : 1];
      if (list.size() < kMaxIdleContexts) {
        list.push_back(c);
        return;
      }
    }
    EVP_CIPHER_CTX_free(c);
  }
};

namespace {

// The cipher, fetched from OpenSSL's default provider once (a fetch per call would look it up every time).
EVP_CIPHER* AesGcm() {
  static EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  return cipher;
}

constexpr int kGcmNonceSize = 12;

// Feeds `ad` and `in` through an initialised GCM context into `out`; false on any OpenSSL error.
bool GcmUpdate(EVP_CIPHER_CTX* c, bool encrypt, std::span<const uint8_t> ad, std::span<const uint8_t> in,
               uint8_t* out) {
  int len = 0;
  auto update = encrypt ? EVP_EncryptUpdate : EVP_DecryptUpdate;
  if (!ad.empty() && update(c, nullptr, &len, ad.data(), int(ad.size())) != 1) return false;
  // OpenSSL takes int lengths: a unit is at most 16 MiB + a frame table (format-spec 6), an index tag's AD the
  // index, bounded by the file; feed them in pieces all the same.
  for (size_t at = 0; at < in.size();) {
    const size_t n = std::min<size_t>(in.size() - at, size_t(1) << 30);
    if (update(c, out + at, &len, in.data() + at, int(n)) != 1) return false;
    at += n;
  }
  return true;
}

}  // namespace

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
  if (state_) sodium_memzero(state_->key, sizeof(state_->key));  // ~State frees (and so wipes) the contexts
}

Result<std::unique_ptr<AeadKey>> AeadKey::Create(AeadAlgorithm algorithm, std::span<const uint8_t, kAeadKeySize> key) {
  HLT_RETURN_IF_ERROR(InitMac());
  if (algorithm != AeadAlgorithm::kAes256Gcm && algorithm != AeadAlgorithm::kXChaCha20Poly1305) {
    return Status::InvalidArgument("unknown AEAD algorithm " + std::to_string(uint32_t(algorithm)));
  }
  if (algorithm == AeadAlgorithm::kAes256Gcm && AesGcm() == nullptr) {
    return Status::Unsupported("AES-256-GCM: OpenSSL's default provider does not offer it");
  }
  auto state = std::make_unique<State>();
  std::memcpy(state->key, key.data(), kAeadKeySize);
  return std::unique_ptr<AeadKey>(new AeadKey(algorithm, std::move(state)));
}

void AeadKey::Seal(const AeadNonce& nonce, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
                   std::span<uint8_t> out) const {
  if (algorithm_ == AeadAlgorithm::kXChaCha20Poly1305) {
    unsigned long long written = 0;
    static const unsigned char kNothing = 0;  // libsodium wants a pointer even for an empty message
    crypto_aead_xchacha20poly1305_ietf_encrypt(out.data(), &written, plain.empty() ? &kNothing : plain.data(),
                                               plain.size(), ad.data(), ad.size(), nullptr, nonce.data(), state_->key);
    return;
  }
  EVP_CIPHER_CTX* c = state_->Take(true, nonce);
  int len = 0;
  // OpenSSL fails here only when it cannot allocate: a sealed unit must then not exist (abort, not a bad file).
  if (!c || !GcmUpdate(c, true, ad, plain, out.data()) || EVP_EncryptFinal_ex(c, out.data() + plain.size(), &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kAeadTagSize, out.data() + plain.size()) != 1) {
    std::abort();
  }
  state_->GiveBack(true, c, true);
}

bool AeadKey::Open(const AeadNonce& nonce, std::span<const uint8_t> ad, std::span<const uint8_t> sealed,
                   std::span<uint8_t> out) const {
  if (sealed.size() < kAeadTagSize || out.size() != sealed.size() - kAeadTagSize) return false;
  // In place (the same first byte) or apart: a shifted overlap would have the cipher read bytes it already wrote.
  const auto a = reinterpret_cast<uintptr_t>(out.data()), s = reinterpret_cast<uintptr_t>(sealed.data());
  if (!out.empty() && a != s && a < s + sealed.size() && s < a + out.size()) return false;
  bool ok;
  if (algorithm_ == AeadAlgorithm::kXChaCha20Poly1305) {
    unsigned long long written = 0;
    unsigned char scratch = 0;  // an empty plaintext still needs somewhere to point
    ok = crypto_aead_xchacha20poly1305_ietf_decrypt(out.empty() ? &scratch : out.data(), &written, nullptr,
                                                    sealed.data(), sealed.size(), ad.data(), ad.size(), nonce.data(),
                                                    state_->key) == 0;
  } else {
    EVP_CIPHER_CTX* c = state_->Take(false, nonce);
    int len = 0;
    const std::span<const uint8_t> text = sealed.first(out.size());
    unsigned char tag[kAeadTagSize];
    std::memcpy(tag, sealed.data() + out.size(), kAeadTagSize);
    ok = c && GcmUpdate(c, false, ad, text, out.data()) &&
         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kAeadTagSize, tag) == 1 &&
         EVP_DecryptFinal_ex(c, out.data() + out.size(), &len) == 1;
    if (c) state_->GiveBack(false, c, ok);
  }
  if (!ok && !out.empty()) sodium_memzero(out.data(), out.size());
  return ok;
}

void RandomBytes(std::span<uint8_t> out) {
  (void)InitMac();  // randombytes works without sodium_init, but initialising picks the best source once
  randombytes_buf(out.data(), out.size());
}

void Wipe(std::span<uint8_t> bytes) {
  if (!bytes.empty()) sodium_memzero(bytes.data(), bytes.size());
}

}  // namespace halite::codec
