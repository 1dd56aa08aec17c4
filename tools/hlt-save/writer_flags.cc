#include "hlt-save/writer_flags.h"

#include <cstdlib>
#include <cstdio>
#include <filesystem>

#include "halite/authentication.h"
#include "halite/encryption.h"

namespace halite::save {

bool ParseWriterFlag(cli::Args& args, WriterFlags* f, std::string* error) {
  std::string v;
  uint64_t n = 0;
  auto number = [&](const char* name, uint64_t max) -> bool {
    if (!cli::ParseU64(v, &n) || n > max) {
      *error = std::string(name) + ": bad value \"" + v + "\"";
      return false;
    }
    return true;
  };
  if (args.Option("--block-pages", &v, error)) {
    if (error->empty() && number("--block-pages", 4096)) f->options.block_pages = uint32_t(n);
    return true;
  }
  if (args.Option("--frame-pages", &v, error)) {
    if (error->empty() && v == "auto") {
      f->options.frame_pages = WriterOptions::kFramePagesAuto;
    } else if (error->empty() && number("--frame-pages", 4096)) {
      f->options.frame_pages = uint32_t(n);
    }
    return true;
  }
  if (args.Option("--parent-coding", &v, error)) {
    if (error->empty()) {
      if (v == "based" || v == "plain") f->options.code_against_parent = v == "based";
      else *error = "--parent-coding: expected based or plain, got \"" + v + "\"";
    }
    return true;
  }
  if (args.Option("--level", &v, error)) {
    if (error->empty()) {
      try {
        f->options.level = std::stoi(v);
      } catch (...) {
        *error = "--level: bad value \"" + v + "\"";
      }
    }
    return true;
  }
  if (args.Option("--threads", &v, error)) {
    if (error->empty() && number("--threads", 1024)) f->options.threads = unsigned(n);
    return true;
  }
  if (args.Option("--rate-limit", &v, error)) {
    if (error->empty() && number("--rate-limit", UINT64_MAX)) f->options.rate_limit_bytes_per_s = n;
    return true;
  }
  if (args.Option("--policy", &v, error)) {
    if (error->empty()) {
      auto p = ParseLayoutPolicy(v);
      if (p) f->options.policy = *p; else *error = p.error().message();
    }
    return true;
  }
  if (args.Option("--dictionary", &v, error)) {
    if (error->empty()) {
      auto d = ParseDictionaryMode(v);
      if (d) f->options.dictionary = *d; else *error = d.error().message();
    }
    return true;
  }
  if (args.Option("--access-trace", &v, error)) {
    f->access_trace = v;
    return true;
  }
  if (args.Option("--va-hints", &v, error)) {
    f->va_hints = v;
    return true;
  }
  if (args.Option("--key-file", &v, error)) {
    if (error->empty()) {
      auto key = ReadMacKeyFile(v);
      if (key) f->options.mac_key = *key; else *error = key.error().message();
    }
    return true;
  }
  if (cli::KeySourceOption(args, &f->keys, error)) return true;
  if (args.Option("--cipher", &v, error)) {
    if (error->empty()) {
      auto c = ParseCipher(v);
      if (c) f->options.cipher = *c; else *error = c.error().message();
    }
    return true;
  }
  if (args.Flag("--no-encryption")) {
    f->no_encryption = true;
    return true;
  }
  if (args.Option("--parent", &v, error)) {
    f->parent = v;
    return true;
  }
  if (args.Option("--parent-dir", &v, error)) {
    if (error->empty()) f->parent_reader.parent_dirs.push_back(v);
    return true;
  }
  if (cli::BlockCacheOption(args, &f->block_cache_dir, &f->block_cache_size, error)) return true;
  if (args.Option("--rewrite-fraction", &v, error)) {
    char* end = nullptr;
    const double f_value = error->empty() ? std::strtod(v.c_str(), &end) : 0;
    if (error->empty() && (end == v.c_str() || *end != '\0' || !(f_value >= 0))) {
      *error = "--rewrite-fraction: expected a number >= 0, got \"" + v + "\"";
    }
    f->options.parent_rewrite_fraction = f_value;
    return true;
  }
  if (args.Flag("--page-hashes")) {
    f->options.page_hashes = true;
    return true;
  }
  if (args.Flag("--no-sync")) {
    f->options.sink.sync = false;
    return true;
  }
  return false;
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
