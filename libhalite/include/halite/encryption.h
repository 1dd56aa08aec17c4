// Keys for encrypted checkpoints (format-spec section 13): 32-byte checkpoint keys, their public key ids, and a
// keyring that finds the key a file needs by its id (the files of a chain may use different keys).
//
// A checkpoint written with WriterOptions::encryption_key stores every block, blob and content-revealing index
// section only as AEAD ciphertext (AES-256-GCM or XChaCha20-Poly1305, libsodium) and names its key by id in its
// header. A reader given a Keyring (ReaderOptions::keyring) looks the id up; a file whose key it does not have is
// refused at open, naming the key id.
#ifndef HALITE_ENCRYPTION_H_
#define HALITE_ENCRYPTION_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halite/export.h"
#include "halite/status.h"

namespace halite {

using EncryptionKey = std::array<uint8_t, 32>;
// Format-spec 13.1: BLAKE2b-16(key, "HLT-KEY-ID-1"), stored in the header. Names a key; reveals nothing of it.
using KeyId = std::array<uint8_t, 16>;

// The AEAD of a file (format-spec 13.5): AES-256-GCM (OpenSSL's) or XChaCha20-Poly1305 (libsodium's). kAuto:
// AES-256-GCM when this CPU has AES-NI (fast, and constant-time in hardware), XChaCha20-Poly1305 otherwise. Every
// reader decrypts either, on any CPU.
enum class Cipher : uint32_t { kAuto = 0, kAes256Gcm = 1, kXChaCha20Poly1305 = 2 };
// "auto", "aes256gcm" or "xchacha20poly1305"; kInvalidArgument otherwise.
HALITE_EXPORT Result<Cipher> ParseCipher(std::string_view name);
// "AES-256-GCM", "XChaCha20-Poly1305", "auto".
HALITE_EXPORT const char* CipherName(Cipher cipher);
// What kAuto means on this machine.
HALITE_EXPORT Cipher AutoCipher();

// Errors: kIoError when libsodium cannot initialise (no random source).
HALITE_EXPORT Result<KeyId> ComputeKeyId(const EncryptionKey& key);
// 32 lower-case hexadecimal digits.
HALITE_EXPORT std::string KeyIdHex(const KeyId& id);
// A key as text: 64 hexadecimal digits (surrounding whitespace and a trailing newline allowed), or exactly 32 raw
// bytes. `source` names where it came from in messages; the key itself never appears in one. kInvalidArgument.
HALITE_EXPORT Result<EncryptionKey> ParseKey(std::string_view text, const std::string& source);
// A key file (as ParseKey). Errors: kIoError (cannot read), kInvalidArgument, naming the file.
HALITE_EXPORT Result<EncryptionKey> ReadKeyFile(const std::string& path);
// A new key from the operating system's random source.
HALITE_EXPORT EncryptionKey GenerateKey();
// A key as 64 lower-case hexadecimal digits, for key files.
HALITE_EXPORT std::string KeyHex(const EncryptionKey& key);
// Writes `key` as a new key file (KeyHex and a newline, mode 0600, synced), as hlt-save keygen does: `path` must not
// exist (an existing key is never replaced), and nothing is left under it when writing fails. Errors: kIoError
// naming `path`.
HALITE_EXPORT Status WriteNewKeyFile(const std::string& path, const EncryptionKey& key);

// Keys by id. Thread-safe: readers of a chain look keys up from several threads. Keys are wiped when the keyring
// goes.
class HALITE_EXPORT Keyring {
 public:
  Keyring() = default;
  ~Keyring();
  Keyring(const Keyring&) = delete;
  Keyring& operator=(const Keyring&) = delete;

  // Adds a key (its id computed). Adding a key twice is not an error. Errors: as ComputeKeyId.
  Status Add(const EncryptionKey& key);
  // A keyring file: one key a line, "KEY_ID KEY" (32 and 64 hexadecimal digits); '#' starts a comment; blank
  // lines are ignored. A line whose id is not its key's id is refused (a key copied wrong). Errors:
  // kIoError, kInvalidArgument naming the file and the line.
  Status AddFile(const std::string& path);
  // Asked, once per id, for a key id the keyring does not hold (an operator's key service: hlt-save and hlt-restore
  // run --key-command here). A key it returns must have that id; it is kept.
  using Fetch = std::function<Result<EncryptionKey>(const KeyId& id)>;
  void SetFetch(Fetch fetch);
  // The key with `id`. kNotFound when neither the keyring nor the fetch function has it (the fetch's own error,
  // when it failed otherwise).
  Result<EncryptionKey> Find(const KeyId& id) const;
  std::vector<KeyId> ids() const;
  bool empty() const;

  // HALITE_ENCRYPT_KEY (a key as ParseKey reads it) and HALITE_KEYRING (a keyring file) from the environment, or
  // null when neither is set. Errors: a bad key or keyring, naming the variable.
  static Result<std::shared_ptr<Keyring>> FromEnvironment();

 private:
  mutable std::mutex mu_;
  mutable std::map<KeyId, EncryptionKey> keys_;
  Fetch fetch_;
  mutable std::map<KeyId, Status> fetch_failures_;  // asked once; the answer is kept
};

// The key id the header of the checkpoint at `path` names, or nullopt when it is not encrypted: one read of its 64
// header bytes, checksum checked. For a caller that wants to refuse a checkpoint whose key it lacks before it starts
// anything else (hlt-restore starts QEMU while the index is read). Errors: as opening and reading the file;
// kCorrupt, kUnsupported for a header that is not a checkpoint's this library reads.
HALITE_EXPORT Result<std::optional<KeyId>> ReadCheckpointKeyId(const std::string& path);

}  // namespace halite

#endif  // HALITE_ENCRYPTION_H_
