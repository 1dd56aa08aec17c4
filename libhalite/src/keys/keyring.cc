// Checkpoint keys and keyrings (halite/encryption.h, format-spec 13.1).
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "codec/aead.h"
#include "codec/mac.h"
#include "halite/authentication.h"
#include "halite/encryption.h"
#include "halite/format_constants.h"
#include "halite/hint_files.h"

namespace halite {
namespace {

int Nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Exactly 2 * out.size() hexadecimal digits.
bool ParseHex(std::string_view text, std::span<uint8_t> out) {
  if (text.size() != 2 * out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = Nibble(text[2 * i]), lo = Nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = uint8_t(hi * 16 + lo);
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<Cipher> ParseCipher(std::string_view name) {
  if (name == "auto") return Cipher::kAuto;
  if (name == "aes256gcm" || name == "aes-256-gcm") return Cipher::kAes256Gcm;
  if (name == "xchacha20poly1305" || name == "xchacha20-poly1305") return Cipher::kXChaCha20Poly1305;
  return Status::InvalidArgument("unknown cipher \"" + std::string(name) +
                                 "\" (expected auto, aes256gcm or xchacha20poly1305)");
}

const char* CipherName(Cipher cipher) {
  switch (cipher) {
    case Cipher::kAuto: return "auto";
    case Cipher::kAes256Gcm: return "AES-256-GCM";
    case Cipher::kXChaCha20Poly1305: return "XChaCha20-Poly1305";
  }
  return "?";
}

Cipher AutoCipher() { return codec::AesGcmAvailable() ? Cipher::kAes256Gcm : Cipher::kXChaCha20Poly1305; }

Result<KeyId> ComputeKeyId(const EncryptionKey& key) {
  HLT_RETURN_IF_ERROR(codec::InitMac());
  KeyId id;
  codec::Mac(key, format::kKeyIdTag, {}, id);
  return id;
}

std::string KeyIdHex(const KeyId& id) {
  std::string s;
  for (uint8_t b : id) s += fmt::format("{:02x}", b);
  return s;
}

std::string KeyHex(const EncryptionKey& key) {
  std::string s;
  for (uint8_t b : key) s += fmt::format("{:02x}", b);
  return s;
}

Result<EncryptionKey> ParseKey(std::string_view text, const std::string& source) {
  EncryptionKey key;
  if (text.size() == key.size()) {
    std::copy(text.begin(), text.end(), key.begin());
    return key;
  }
  if (ParseHex(Trim(text), key)) return key;
  return Status::InvalidArgument(source + ": a key is 64 hexadecimal digits or 32 bytes (found " +
                                 std::to_string(text.size()) + " bytes that are neither)");
}

Result<EncryptionKey> ReadKeyFile(const std::string& path) { return ReadMacKeyFile(path); }

EncryptionKey GenerateKey() {
  EncryptionKey key;
  codec::RandomBytes(key);
  return key;
}

Keyring::~Keyring() {
  for (auto& [id, key] : keys_) codec::Wipe(key);
}

Status Keyring::Add(const EncryptionKey& key) {
  HLT_ASSIGN_OR_RETURN(KeyId id, ComputeKeyId(key));
  std::lock_guard<std::mutex> lock(mu_);
  keys_[id] = key;
  return Status::Ok();
}

Status Keyring::AddFile(const std::string& path) {
  HLT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto hash = line.find('#');
    std::string_view rest = Trim(std::string_view(line).substr(0, hash));
    if (rest.empty()) continue;
    const auto space = rest.find_first_of(" \t");
    KeyId id;
    EncryptionKey key;
    const std::string where = fmt::format("{}:{}", path, n);
    if (space == std::string_view::npos || !ParseHex(rest.substr(0, space), id) ||
        !ParseHex(Trim(rest.substr(space)), key)) {
      codec::Wipe(std::span(reinterpret_cast<uint8_t*>(line.data()), line.size()));
      return Status::InvalidArgument(where + ": expected \"KEY_ID KEY\" (32 and 64 hexadecimal digits)");
    }
    codec::Wipe(std::span(reinterpret_cast<uint8_t*>(line.data()), line.size()));
    HLT_ASSIGN_OR_RETURN(KeyId actual, ComputeKeyId(key));
    if (actual != id) {
      return Status::InvalidArgument(where + ": the key's id is " + KeyIdHex(actual) + ", not " + KeyIdHex(id) +
                                     " (copied wrong?)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    keys_[id] = key;
    codec::Wipe(key);
  }
  codec::Wipe(std::span(reinterpret_cast<uint8_t*>(text.data()), text.size()));
  return Status::Ok();
}

void Keyring::SetFetch(Fetch fetch) {
  std::lock_guard<std::mutex> lock(mu_);
  fetch_ = std::move(fetch);
}

Result<EncryptionKey> Keyring::Find(const KeyId& id) const {
  // Held while fetching: each id is asked for once, however many files of a chain need it.
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = keys_.find(id); it != keys_.end()) return it->second;
  if (auto it = fetch_failures_.find(id); it != fetch_failures_.end()) return it->second;
  if (!fetch_) return Status::NotFound("no key with id " + KeyIdHex(id));
  Result<EncryptionKey> fetched = fetch_(id);
  Status failed;
  if (!fetched) {
    failed = fetched.error();
  } else {
    auto actual = ComputeKeyId(*fetched);
    if (!actual) {
      failed = actual.error();
    } else if (*actual != id) {
      failed = Status::NotFound("the key fetched for id " + KeyIdHex(id) + " has id " + KeyIdHex(*actual));
    }
  }
  if (!failed.ok()) {
    fetch_failures_[id] = failed;
    return failed;
  }
  keys_[id] = *fetched;
  return *fetched;
}

std::vector<KeyId> Keyring::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KeyId> out;
  for (const auto& [id, key] : keys_) out.push_back(id);
  return out;
}

bool Keyring::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.empty() && !fetch_;
}

Result<std::shared_ptr<Keyring>> Keyring::FromEnvironment() {
  const char* key_text = std::getenv("HALITE_ENCRYPT_KEY");
  const char* keyring_path = std::getenv("HALITE_KEYRING");
  const bool has_key = key_text && *key_text, has_ring = keyring_path && *keyring_path;
  if (!has_key && !has_ring) return std::shared_ptr<Keyring>();
  auto ring = std::make_shared<Keyring>();
  if (has_key) {
    HLT_ASSIGN_OR_RETURN(EncryptionKey key, ParseKey(key_text, "HALITE_ENCRYPT_KEY"));
    HLT_RETURN_IF_ERROR(ring->Add(key));
    codec::Wipe(key);
  }
  if (has_ring) HLT_RETURN_IF_ERROR(ring->AddFile(keyring_path).WithContext("HALITE_KEYRING"));
  return ring;
}

}  // namespace halite
