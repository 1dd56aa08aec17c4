// The C API for encrypted checkpoints (format-spec 13): keyrings, keyed opens, writers that encrypt.
#include <cstring>

#include "capi/capi_internal.h"
#include "halite/block_cache.h"
#include "halite/halite_c.h"

using halite::capi::Code;
using halite::capi::Invalid;

namespace {

bool KeyOf(const void* key, size_t key_len, halite::EncryptionKey* out) {
  if (!key || key_len != out->size()) return false;
  std::memcpy(out->data(), key, out->size());
  return true;
}

}  // namespace

extern "C" {

int hlt_keyring_create(hlt_keyring** out) {
  if (!out) return Invalid("hlt_keyring_create: NULL argument");
  *out = new hlt_keyring{std::make_shared<halite::Keyring>()};
  return HLT_OK;
}

void hlt_keyring_free(hlt_keyring* keyring) { delete keyring; }

int hlt_keyring_add_key(hlt_keyring* keyring, const void* key, size_t key_len, uint8_t* key_id) {
  halite::EncryptionKey k;
  if (!keyring || !KeyOf(key, key_len, &k)) return Invalid("hlt_keyring_add_key: NULL argument or key_len not 32");
  if (int rc = Code(keyring->keyring->Add(k)); rc != HLT_OK) return rc;
  if (key_id) {
    auto id = halite::ComputeKeyId(k);
    if (!id) return Code(id.error());
    std::memcpy(key_id, id->data(), id->size());
  }
  return HLT_OK;
}

int hlt_keyring_add_file(hlt_keyring* keyring, const char* path) {
  if (!keyring || !path) return Invalid("hlt_keyring_add_file: NULL argument");
  return Code(keyring->keyring->AddFile(path));
}

int hlt_keyring_set_fetch(hlt_keyring* keyring, hlt_key_fetch_fn fetch, void* ctx) {
  if (!keyring || !fetch) return Invalid("hlt_keyring_set_fetch: NULL argument");
  keyring->keyring->SetFetch([fetch, ctx](const halite::KeyId& id) -> halite::Result<halite::EncryptionKey> {
    halite::EncryptionKey key{};
    const int rc = fetch(ctx, id.data(), key.data());
    if (rc != 0) {
      return halite::Status::NotFound("the key fetch function returned " + std::to_string(rc) + " for key id " +
                                      halite::KeyIdHex(id));
    }
    return key;
  });
  return HLT_OK;
}

int hlt_key_id(const void* key, size_t key_len, uint8_t* key_id) {
  halite::EncryptionKey k;
  if (!KeyOf(key, key_len, &k) || !key_id) return Invalid("hlt_key_id: NULL argument or key_len not 32");
  auto id = halite::ComputeKeyId(k);
  if (!id) return Code(id.error());
  std::memcpy(key_id, id->data(), id->size());
  return HLT_OK;
}

int hlt_reader_open_keyed(const char* path, const char* const* parent_dirs, size_t parent_dir_count,
                          const hlt_keyring* keyring, hlt_reader** out) {
  if (!path || !out || (parent_dir_count > 0 && !parent_dirs)) return Invalid("hlt_reader_open_keyed: NULL argument");
  hlt_open_options options;
  for (size_t i = 0; i < parent_dir_count; ++i) {
    if (!parent_dirs[i]) return Invalid("hlt_reader_open_keyed: a NULL entry in parent_dirs");
    options.reader.parent_dirs.push_back(parent_dirs[i]);
  }
  options.caller_keys = keyring ? keyring->keyring : nullptr;
  return halite::capi::OpenReader(path, options, out);
}

int hlt_reader_encryption(const hlt_reader* r, int* cipher, uint8_t* key_id) {
  if (!r) return Invalid("hlt_reader_encryption: NULL reader");
  if (cipher) *cipher = int(r->reader->cipher());
  if (key_id) std::memcpy(key_id, r->reader->key_id().data(), r->reader->key_id().size());
  return r->reader->encrypted() ? 1 : 0;
}

int hlt_writer_set_encryption_key(hlt_writer* w, const void* key, size_t key_len, int cipher) {
  halite::EncryptionKey k;
  if (!w || !KeyOf(key, key_len, &k)) return Invalid("hlt_writer_set_encryption_key: NULL argument or key_len not 32");
  if (w->writer) return Invalid("hlt_writer_set_encryption_key: after a region was added");
  if (cipher < HLT_CIPHER_AUTO || cipher > HLT_CIPHER_XCHACHA20POLY1305) {
    return Invalid("hlt_writer_set_encryption_key: cipher is not an HLT_CIPHER_* value");
  }
  w->options.encryption_key = k;
  w->options.cipher = static_cast<halite::Cipher>(cipher);
  return HLT_OK;
}

}  // extern "C"
