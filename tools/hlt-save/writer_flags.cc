#include "hlt-save/writer_flags.h"

#include <cstdio>
#include <cstdlib>

#include "halite/authentication.h"
#include "halite/encryption.h"

namespace halite::save {

void AddWriterFlags(CLI::App& app, WriterFlagText* t, WriterFlags* f) {
  app.add_option("--block-pages", t->block_pages);
  app.add_option("--frame-pages", t->frame_pages);
  app.add_option("--parent-coding", t->parent_coding);
  app.add_option("--level", t->level);
  app.add_option("--threads", t->threads);
  app.add_option("--rate-limit", t->rate_limit);
  app.add_option("--policy", t->policy);
  app.add_option("--dictionary", t->dictionary);
  app.add_option("--access-trace", f->access_trace);
  app.add_option("--va-hints", f->va_hints);
  app.add_option("--key-file", t->key_file);
  app.add_option("--encrypt-key-file", f->keys.key_files)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--keyring", f->keys.keyrings)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--key-command", f->keys.key_command);
  app.add_option("--cipher", t->cipher);
  app.add_flag("--no-encryption", f->no_encryption);
  app.add_option("--parent", f->parent);
  app.add_option("--parent-dir", f->parent_reader.parent_dirs)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--block-cache", f->block_cache_dir);
  app.add_option("--block-cache-size", t->block_cache_size);
  app.add_option("--rewrite-fraction", t->rewrite_fraction);
  app.add_flag("--page-hashes", f->options.page_hashes);
  app.add_flag("--no-sync", t->no_sync);
}

namespace {

// A number option of at most `max`: "NAME: bad value \"V\"" otherwise.
std::string Number(const std::string& name, const std::string& v, uint64_t max, uint64_t* n) {
  if (!cli::ParseU64(v, n) || *n > max) return name + ": bad value \"" + v + "\"";
  return "";
}

// The options that select among names, and the key file.
std::string ApplyChoiceFlags(const CLI::App& app, const WriterFlagText& t, WriterFlags* f) {
  if (app.count("--parent-coding")) {
    if (t.parent_coding != "based" && t.parent_coding != "plain") {
      return "--parent-coding: expected based or plain, got \"" + t.parent_coding + "\"";
    }
    f->options.code_against_parent = t.parent_coding == "based";
  }
  if (app.count("--policy")) {
    auto p = ParseLayoutPolicy(t.policy);
    if (!p) return p.error().message();
    f->options.policy = *p;
  }
  if (app.count("--dictionary")) {
    auto d = ParseDictionaryMode(t.dictionary);
    if (!d) return d.error().message();
    f->options.dictionary = *d;
  }
  if (app.count("--cipher")) {
    auto c = ParseCipher(t.cipher);
    if (!c) return c.error().message();
    f->options.cipher = *c;
  }
  if (app.count("--key-file")) {
    auto key = ReadMacKeyFile(t.key_file);
    if (!key) return key.error().message();
    f->options.mac_key = *key;
  }
  if (app.count("--key-command") && f->keys.key_command.empty()) return "--key-command needs a command";
  if (app.count("--block-cache") && f->block_cache_dir.empty()) return "--block-cache needs a directory";
  return "";
}

}  // namespace

std::string ApplyWriterFlags(const CLI::App& app, const WriterFlagText& t, WriterFlags* f) {
  uint64_t n = 0;
  std::string bad;
  if (app.count("--block-pages")) {
    if (!(bad = Number("--block-pages", t.block_pages, 4096, &n)).empty()) return bad;
    f->options.block_pages = uint32_t(n);
  }
  if (app.count("--frame-pages")) {
    if (t.frame_pages == "auto") {
      f->options.frame_pages = WriterOptions::kFramePagesAuto;
    } else if (!(bad = Number("--frame-pages", t.frame_pages, 4096, &n)).empty()) {
      return bad;
    } else {
      f->options.frame_pages = uint32_t(n);
    }
  }
  if (app.count("--level")) {
    try {
      f->options.level = std::stoi(t.level);
    } catch (...) {
      return "--level: bad value \"" + t.level + "\"";
    }
  }
  if (app.count("--threads")) {
    if (!(bad = Number("--threads", t.threads, 1024, &n)).empty()) return bad;
    f->options.threads = unsigned(n);
  }
  if (app.count("--rate-limit")) {
    if (!(bad = Number("--rate-limit", t.rate_limit, UINT64_MAX, &n)).empty()) return bad;
    f->options.rate_limit_bytes_per_s = n;
  }
  if (app.count("--block-cache-size") && (!cli::ParseU64(t.block_cache_size, &f->block_cache_size) ||
                                          f->block_cache_size == 0)) {
    return "--block-cache-size: expected a positive byte count (K/M/G suffixes), got \"" + t.block_cache_size + "\"";
  }
  if (app.count("--rewrite-fraction")) {
    const std::string& v = t.rewrite_fraction;
    char* end = nullptr;
    const double value = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(value >= 0)) {
      return "--rewrite-fraction: expected a number >= 0, got \"" + v + "\"";
    }
    f->options.parent_rewrite_fraction = value;
  }
  if (t.no_sync) f->options.sink.sync = false;
  return ApplyChoiceFlags(app, t, f);
}

Status PrepareWriter(WriterFlags* f, const std::string& out) {
  HLT_ASSIGN_OR_RETURN(f->keyring, ChooseEncryptionKey(f->keys, f->no_encryption, &f->options));
  if (f->parent.empty()) return Status::Ok();
  HLT_ASSIGN_OR_RETURN(f->parent_reader.block_cache, BlockCache::OpenChosen(f->block_cache_dir, f->block_cache_size));
  f->parent_reader.keyring = f->keyring;
  return OpenWriterParent(f->parent, out, f->parent_reader, &f->options);
}

}  // namespace halite::save
