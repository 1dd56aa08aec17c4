// Opens (decrypts and checks) 20 KiB and 256 KiB units with AES-256-GCM from OpenSSL and from libgcrypt, and with
// ChaCha20-Poly1305 (IETF) from libsodium and libgcrypt: GB per CPU second of one thread. A measurement program for
// bench/results/2026-11-28-crypt26 (g++ -O2 aead_libs.cc -lcrypto -lgcrypt -lsodium), not part of the build.
#include <gcrypt.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <vector>

static double Cpu() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main() {
  if (sodium_init() < 0) return 1;
  gcry_check_version(nullptr);
  gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
  unsigned char key[32] = {1}, nonce[12] = {2}, ad[56] = {3}, tag[16];
  for (size_t unit : {size_t(20) << 10, size_t(256) << 10}) {
    std::vector<unsigned char> plain(unit, 0x5a), ct(unit + 16), out(unit);
    const int n = int((size_t(1) << 30) / unit);
    // OpenSSL AES-256-GCM
    EVP_CIPHER_CTX* e = EVP_CIPHER_CTX_new();
    int len;
    EVP_EncryptInit_ex(e, EVP_aes_256_gcm(), nullptr, key, nonce);
    EVP_EncryptUpdate(e, nullptr, &len, ad, sizeof ad);
    EVP_EncryptUpdate(e, ct.data(), &len, plain.data(), int(unit));
    EVP_EncryptFinal_ex(e, ct.data() + unit, &len);
    EVP_CIPHER_CTX_ctrl(e, EVP_CTRL_GCM_GET_TAG, 16, ct.data() + unit);
    EVP_CIPHER_CTX* d = EVP_CIPHER_CTX_new();
    EVP_DecryptInit_ex(d, EVP_aes_256_gcm(), nullptr, key, nullptr);
    double t0 = Cpu();
    for (int i = 0; i < n; ++i) {
      EVP_DecryptInit_ex(d, nullptr, nullptr, nullptr, nonce);
      EVP_DecryptUpdate(d, nullptr, &len, ad, sizeof ad);
      EVP_DecryptUpdate(d, out.data(), &len, ct.data(), int(unit));
      EVP_CIPHER_CTX_ctrl(d, EVP_CTRL_GCM_SET_TAG, 16, ct.data() + unit);
      if (EVP_DecryptFinal_ex(d, out.data() + unit, &len) != 1) return 2;
    }
    std::printf("%7zu B units  AES-256-GCM  OpenSSL %s      %.2f GB/cpu-s\n", unit, OpenSSL_version(OPENSSL_VERSION),
                double(unit) * n / (Cpu() - t0) / 1e9);
    // libgcrypt AES-256-GCM (same ciphertext)
    gcry_cipher_hd_t h;
    gcry_cipher_open(&h, GCRY_CIPHER_AES256, GCRY_CIPHER_MODE_GCM, 0);
    gcry_cipher_setkey(h, key, 32);
    t0 = Cpu();
    for (int i = 0; i < n; ++i) {
      gcry_cipher_setiv(h, nonce, 12);
      gcry_cipher_authenticate(h, ad, sizeof ad);
      gcry_cipher_final(h);
      gcry_cipher_decrypt(h, out.data(), unit, ct.data(), unit);
      if (gcry_cipher_checktag(h, ct.data() + unit, 16) != 0) return 3;
    }
    std::printf("%7zu B units  AES-256-GCM  libgcrypt %s          %.2f GB/cpu-s\n", unit, gcry_check_version(nullptr),
                double(unit) * n / (Cpu() - t0) / 1e9);
    gcry_cipher_close(h);
    // ChaCha20-Poly1305 IETF: libsodium, then libgcrypt on the same ciphertext
    unsigned long long clen;
    crypto_aead_chacha20poly1305_ietf_encrypt(ct.data(), &clen, plain.data(), unit, ad, sizeof ad, nullptr, nonce, key);
    t0 = Cpu();
    for (int i = 0; i < n; ++i) {
      unsigned long long m;
      if (crypto_aead_chacha20poly1305_ietf_decrypt(out.data(), &m, nullptr, ct.data(), unit + 16, ad, sizeof ad, nonce, key) != 0) return 4;
    }
    std::printf("%7zu B units  ChaCha20-Poly1305  libsodium %s  %.2f GB/cpu-s\n", unit, sodium_version_string(),
                double(unit) * n / (Cpu() - t0) / 1e9);
    gcry_cipher_open(&h, GCRY_CIPHER_CHACHA20, GCRY_CIPHER_MODE_POLY1305, 0);
    gcry_cipher_setkey(h, key, 32);
    t0 = Cpu();
    for (int i = 0; i < n; ++i) {
      gcry_cipher_setiv(h, nonce, 12);
      gcry_cipher_authenticate(h, ad, sizeof ad);
      gcry_cipher_final(h);
      gcry_cipher_decrypt(h, out.data(), unit, ct.data(), unit);
      if (gcry_cipher_checktag(h, ct.data() + unit, 16) != 0) return 5;
    }
    std::printf("%7zu B units  ChaCha20-Poly1305  libgcrypt %s    %.2f GB/cpu-s\n", unit, gcry_check_version(nullptr),
                double(unit) * n / (Cpu() - t0) / 1e9);
    gcry_cipher_close(h);
    (void)tag;
  }
}
