// The C API's reader options (hlt_open_options): the tools' reader flags, set one at a time.
#include <cstring>

#include "capi/capi_internal.h"
#include "halite/authentication.h"
#include "halite/block_cache.h"
#include "halite/halite_c.h"
#include "halite/image_server_process.h"

using halite::capi::Code;
using halite::capi::Invalid;

namespace halite::capi {

std::shared_ptr<Keyring> Chain(std::vector<std::shared_ptr<Keyring>> rings) {
  std::erase_if(rings, [](const std::shared_ptr<Keyring>& k) { return !k; });
  if (rings.empty()) return nullptr;
  if (rings.size() == 1) return rings.front();
  auto chained = std::make_shared<Keyring>();
  chained->SetFetch([rings](const KeyId& id) -> Result<EncryptionKey> {
    Result<EncryptionKey> found = rings.front()->Find(id);
    for (size_t i = 1; i < rings.size() && !found; ++i) found = rings[i]->Find(id);
    return found;
  });
  return chained;
}

namespace {

// The block cache the options name, else (with the environment) HALITE_BLOCK_CACHE's: as the tools choose it.
Status OpenBlockCache(const hlt_open_options& o, ReaderOptions* reader) {
  if (o.block_cache_dir.empty()) {
    if (!o.environment) return Status::Ok();
    HLT_ASSIGN_OR_RETURN(reader->block_cache, BlockCache::FromEnvironment());
    if (reader->block_cache && o.block_cache_size) {
      HLT_ASSIGN_OR_RETURN(reader->block_cache, BlockCache::Open(reader->block_cache->dir(), {o.block_cache_size}));
    }
    return Status::Ok();
  }
  BlockCacheOptions cache;
  if (o.block_cache_size) cache.max_bytes = o.block_cache_size;
  HLT_ASSIGN_OR_RETURN(reader->block_cache, BlockCache::Open(o.block_cache_dir, cache));
  return Status::Ok();
}

}  // namespace

Status MakeReaderOptions(const hlt_open_options& o, ReaderOptions* options) {
  *options = o.reader;
  HLT_RETURN_IF_ERROR(OpenBlockCache(o, options));
  std::shared_ptr<Keyring> environment;
  if (o.environment) {
    auto env = Keyring::FromEnvironment();
    if (!env) return env.status();
    environment = *env;
  }
  // The caller's keyring first, then the key files given, then the environment's keys.
  options->keyring = Chain({o.caller_keys, o.file_keys->empty() ? nullptr : o.file_keys, environment});
  return Status::Ok();
}

Result<std::vector<std::string>> ServerFlags(const hlt_open_options& o, const ReaderOptions& options) {
  if (o.caller_keys && !o.caller_keys->empty()) {
    return Status::InvalidArgument(
        "shared memory: keys given in memory (hlt_open_options_set_keyring) cannot reach the image server, a process "
        "of its own; give them as key files (HLT_OPEN_KEY_FILE) or keyring files (HLT_OPEN_KEYRING_FILE)");
  }
  return ImageServerReaderFlags(options, o.file_sources);
}

int OpenReader(const char* path, const hlt_open_options& o, hlt_reader** out) {
  ReaderOptions options;
  if (int rc = Code(MakeReaderOptions(o, &options)); rc != HLT_OK) return rc;
  auto r = CheckpointReader::Open(path, options);
  if (!r) return Code(r.error());
  *out = new hlt_reader{};
  (*out)->reader = std::move(*r);
  return HLT_OK;
}

}  // namespace halite::capi

extern "C" {

int hlt_open_options_create(hlt_open_options** out) {
  if (!out) return Invalid("hlt_open_options_create: NULL argument");
  *out = new hlt_open_options{};
  return HLT_OK;
}

void hlt_open_options_free(hlt_open_options* options) { delete options; }

int hlt_open_options_set_param(hlt_open_options* o, hlt_open_param param, int64_t value) {
  if (!o) return Invalid("hlt_open_options_set_param: NULL options");
  switch (param) {
    case HLT_OPEN_BLOCK_CACHE_SIZE:
      if (value < 0) return Invalid("HLT_OPEN_BLOCK_CACHE_SIZE: expected a byte count >= 0");
      o->block_cache_size = uint64_t(value);
      return HLT_OK;
    case HLT_OPEN_WITHOUT_KEY:
      if (value != 0 && value != 1) return Invalid("HLT_OPEN_WITHOUT_KEY: expected 0 or 1");
      o->reader.open_without_key = value == 1;
      return HLT_OK;
    case HLT_OPEN_MAX_CHAIN_DEPTH:
      if (value < 0 || value > 16) return Invalid("HLT_OPEN_MAX_CHAIN_DEPTH: expected 0..16");
      o->reader.max_chain_depth = uint32_t(value);
      return HLT_OK;
    case HLT_OPEN_ENVIRONMENT:
      if (value != 0 && value != 1) return Invalid("HLT_OPEN_ENVIRONMENT: expected 0 or 1");
      o->environment = value == 1;
      return HLT_OK;
  }
  return Invalid("hlt_open_options_set_param: unknown parameter");
}

int hlt_open_options_set_string(hlt_open_options* o, hlt_open_string option, const char* value) {
  if (!o || !value) return Invalid("hlt_open_options_set_string: NULL argument");
  switch (option) {
    case HLT_OPEN_BLOCK_CACHE_DIR:
      if (!*value) return Invalid("HLT_OPEN_BLOCK_CACHE_DIR: needs a directory");
      o->block_cache_dir = value;
      return HLT_OK;
    case HLT_OPEN_PARENT_DIR:
      o->reader.parent_dirs.push_back(value);
      return HLT_OK;
    case HLT_OPEN_MAC_KEY_FILE: {
      auto key = halite::ReadMacKeyFile(value);
      if (!key) return Code(key.error());
      o->reader.mac_key = *key;
      return HLT_OK;
    }
    case HLT_OPEN_KEY_FILE: {
      auto key = halite::ReadKeyFile(value);
      if (!key) return Code(key.error());
      if (int rc = Code(o->file_keys->Add(*key)); rc != HLT_OK) return rc;
      o->file_sources.key_files.push_back(value);
      return HLT_OK;
    }
    case HLT_OPEN_KEYRING_FILE:
      if (int rc = Code(o->file_keys->AddFile(value)); rc != HLT_OK) return rc;
      o->file_sources.keyrings.push_back(value);
      return HLT_OK;
  }
  return Invalid("hlt_open_options_set_string: unknown option");
}

int hlt_open_options_set_keyring(hlt_open_options* o, const hlt_keyring* keyring) {
  if (!o) return Invalid("hlt_open_options_set_keyring: NULL options");
  o->caller_keys = keyring ? keyring->keyring : nullptr;
  return HLT_OK;
}

int hlt_reader_open_with(const char* path, const hlt_open_options* options, hlt_reader** out) {
  if (!path || !out) return Invalid("hlt_reader_open_with: NULL argument");
  if (options) return halite::capi::OpenReader(path, *options, out);
  return halite::capi::OpenReader(path, hlt_open_options{}, out);
}

}  // extern "C"
