#include "hlt-save/writer_flags.h"

#include <cstdlib>
#include <cstdio>
#include <filesystem>

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

Status PrepareEncryption(WriterFlags* f) {
  HLT_ASSIGN_OR_RETURN(f->keyring, cli::OpenKeyring(f->keys));
  if (f->no_encryption) {
    if (f->keys.key_files.empty() && f->keys.key_command.empty()) return Status::Ok();
    return Status::InvalidArgument("--no-encryption with --encrypt-key-file or --key-command: which one?");
  }
  if (f->keys.key_files.size() > 1) {
    return Status::InvalidArgument("--encrypt-key-file given " + std::to_string(f->keys.key_files.size()) +
                                   " times: the new checkpoint has one key (put the keys of parents in a --keyring)");
  }
  std::optional<EncryptionKey> key;
  if (!f->keys.key_files.empty()) {
    HLT_ASSIGN_OR_RETURN(key, ReadKeyFile(f->keys.key_files.front()));
  } else if (!f->keys.key_command.empty()) {
    HLT_ASSIGN_OR_RETURN(key, cli::RunKeyCommand(f->keys.key_command, nullptr));
    HLT_RETURN_IF_ERROR(f->keyring->Add(*key));
  } else if (const char* env = std::getenv("HALITE_ENCRYPT_KEY"); env && *env) {
    HLT_ASSIGN_OR_RETURN(key, ParseKey(env, "HALITE_ENCRYPT_KEY"));
  }
  f->options.encryption_key = key;
  return Status::Ok();
}

Status PrepareWriter(WriterFlags* f, const std::string& out) {
  HLT_RETURN_IF_ERROR(PrepareEncryption(f));
  if (f->parent.empty()) return Status::Ok();
  std::error_code ec;
  if (f->parent == out || std::filesystem::equivalent(f->parent, out, ec)) {
    return Status::InvalidArgument(out + ": the output cannot be its own parent");
  }
  HLT_RETURN_IF_ERROR(cli::OpenBlockCache(f->block_cache_dir, f->block_cache_size, &f->parent_reader));
  f->parent_reader.keyring = f->keyring;
  HLT_ASSIGN_OR_RETURN(auto parent, CheckpointReader::Open(f->parent, f->parent_reader));
  f->options.parent = std::shared_ptr<const CheckpointReader>(std::move(parent));
  f->options.page_hashes = true;
  return Status::Ok();
}

Status ApplyHintFiles(const WriterFlags& f, CheckpointWriter& writer) {
  if (!f.access_trace.empty()) {
    HLT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(f.access_trace));
    HLT_ASSIGN_OR_RETURN(auto runs, ParseAccessTrace(text, f.access_trace, writer.regions()));
    HLT_RETURN_IF_ERROR(writer.AddAccessedPages(runs));
  }
  if (!f.va_hints.empty()) {
    HLT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(f.va_hints));
    HLT_ASSIGN_OR_RETURN(auto runs, ParseVaHints(text, f.va_hints, writer.regions()));
    HLT_RETURN_IF_ERROR(writer.AddVaRuns(runs));
  }
  return Status::Ok();
}

void PrintSummary(const WriteSummary& s, const std::string& path) {
  std::printf("saved %s\n", path.c_str());
  std::printf("  pages            %llu (%s)\n", (unsigned long long)s.pages, cli::HumanBytes(s.raw_bytes).c_str());
  std::printf("  zero pages       %llu\n", (unsigned long long)s.zero_pages);
  std::printf("  absent pages     %llu\n", (unsigned long long)s.absent_pages);
  std::printf("  duplicate pages  %llu\n", (unsigned long long)s.duplicate_pages);
  std::printf("  stored pages     %llu (%llu of them in the working set)\n", (unsigned long long)s.stored_pages,
              (unsigned long long)s.accessed_pages);
  std::printf("  blocks           %llu (%llu hot)\n", (unsigned long long)s.blocks, (unsigned long long)s.hot_blocks);
  std::printf("  stored bytes     %llu (%s; blocks %s, blobs %s, index %s, dictionary %s)\n",
              (unsigned long long)s.file_bytes, cli::HumanBytes(s.file_bytes).c_str(),
              cli::HumanBytes(s.block_bytes).c_str(), cli::HumanBytes(s.blob_bytes).c_str(),
              cli::HumanBytes(s.index_bytes).c_str(), cli::HumanBytes(s.dictionary_bytes).c_str());
  if (s.in_parent_pages > 0) {
    std::printf("  in parent        %llu pages (stored as references; %llu parent blocks decoded to compare)\n",
                (unsigned long long)s.in_parent_pages, (unsigned long long)s.parent_blocks_read);
    if (s.stored_again_pages > 0) {
      std::printf("  stored again     %llu pages equal to the parent's, to keep blocks whole (--rewrite-fraction)\n",
                  (unsigned long long)s.stored_again_pages);
    }
    if (s.declared_in_parent_pages > 0) {
      std::printf("  known unwritten  %llu of them (the page map of a private mapping of the parent's image: not read)\n",
                  (unsigned long long)s.declared_in_parent_pages);
    }
  }
  if (s.page_hash_bytes > 0) std::printf("  page hashes      %s\n", cli::HumanBytes(s.page_hash_bytes).c_str());
  std::printf("  coding           %s, %s\n",
              s.frame_pages ? ("frames of " + std::to_string(s.frame_pages) + " pages").c_str() : "one frame a block",
              s.dictionary_bytes ? ("a dictionary of " + cli::HumanBytes(s.dictionary_bytes)).c_str() : "no dictionary");
  if (!s.coding_reason.empty()) std::printf("  why              %s\n", s.coding_reason.c_str());
  if (s.base_groups_tried > 0) {
    std::printf("  against parent   %llu blocks (%llu pages) coded against the parent: %llu of the %llu parent block\n"
                "                   groups holding a changed page's old version and read anyway paid in a trial\n",
                (unsigned long long)s.based_blocks, (unsigned long long)s.based_pages,
                (unsigned long long)s.base_groups_used, (unsigned long long)s.base_groups_tried);
  }
  if (s.encrypted) {
    std::printf("  encrypted        %s, key id %s\n", CipherName(s.cipher), KeyIdHex(s.key_id).c_str());
  }
  std::printf("  ratio            %.2f\n", s.ratio());
  std::printf("  seconds          %.3f (%.0f MB/s of raw pages)\n", s.seconds,
              s.seconds > 0 ? double(s.raw_bytes) / s.seconds / 1e6 : 0.0);
}

}  // namespace halite::save
