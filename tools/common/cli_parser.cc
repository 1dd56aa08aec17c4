#include "common/cli_parser.h"

#include <algorithm>
#include <iostream>

#include "halite/authentication.h"

namespace halite::cli {

Parser::Parser(std::string tool, std::string usage) : tool_(std::move(tool)), usage_(std::move(usage)) {
  app_.set_help_flag();  // the mode's own usage text, not CLI11's
  app_.add_flag("-h,--help", help_);
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_.allow_extras();  // reported below in the tools' words
}

void Parser::AddReaderFlags(ReaderFlagValues* v, bool with_key_file) {
  if (with_key_file) app_.add_option("--key-file", v->key_file);
  app_.add_option("--parent-dir", v->parent_dirs)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app_.add_option("--block-cache", v->block_cache_dir);
  app_.add_option("--block-cache-size", v->block_cache_size);
  app_.add_option("--encrypt-key-file", v->keys.key_files)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app_.add_option("--keyring", v->keys.keyrings)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app_.add_option("--key-command", v->keys.key_command);
}

int Parser::Parse(Args& args, std::vector<std::string>* rest, bool* separator) {
  std::vector<std::string> words;
  bool seen = false;
  while (!args.Done()) {
    std::string a = args.Next();
    if (rest != nullptr && a == "--" && !seen) {
      seen = true;
      continue;
    }
    (seen ? *rest : words).push_back(std::move(a));
  }
  if (separator != nullptr) *separator = seen;
  std::reverse(words.begin(), words.end());  // CLI11 takes its vector last argument first
  try {
    app_.parse(words);
  } catch (const CLI::ParseError& e) {
    if (help_) {
      std::cout << usage_;
      return kExitOk;
    }
    return UsageError(e.what());
  }
  if (help_) {
    std::cout << usage_;
    return kExitOk;
  }
  if (const std::vector<std::string> extra = app_.remaining(); !extra.empty()) {
    const std::string& a = extra.front();
    return UsageError((a.size() > 1 && a[0] == '-' ? "unknown option " : "unexpected argument ") + a);
  }
  return -1;
}

int Parser::FinishReaderFlags(const ReaderFlagValues& v, ReaderOptions* options) const {
  const int rc = CheckReaderFlags(v, options);
  return rc >= 0 ? rc : OpenReaderFlags(v, options);
}

int Parser::CheckReaderFlags(const ReaderFlagValues& v, ReaderOptions* options) const {
  if (app_.count("--block-cache") && v.block_cache_dir.empty()) return UsageError("--block-cache needs a directory");
  uint64_t size = 0;
  if (app_.count("--block-cache-size") && (!ParseU64(v.block_cache_size, &size) || size == 0)) {
    return UsageError("--block-cache-size: expected a positive byte count (K/M/G suffixes), got \"" +
                      v.block_cache_size + "\"");
  }
  if (app_.count("--key-command") && v.keys.key_command.empty()) return UsageError("--key-command needs a command");
  if (!v.key_file.empty()) {
    auto key = ReadMacKeyFile(v.key_file);
    if (!key) return UsageError(key.error().message());
    options->mac_key = *key;
  }
  options->parent_dirs.insert(options->parent_dirs.end(), v.parent_dirs.begin(), v.parent_dirs.end());
  return -1;
}

int Parser::OpenReaderFlags(const ReaderFlagValues& v, ReaderOptions* options) const {
  uint64_t size = 0;
  if (app_.count("--block-cache-size")) ParseU64(v.block_cache_size, &size);  // checked by CheckReaderFlags
  auto cache = BlockCache::OpenChosen(v.block_cache_dir, size);
  Status s = cache.status();
  if (s.ok()) {
    options->block_cache = *cache;
    auto ring = OpenKeyring(v.keys);
    if (ring) options->keyring = *ring;
    s = ring.status();
  }
  return s.ok() ? -1 : Fail(tool_, s);
}

int Parser::UsageError(const std::string& message) const { return cli::UsageError(tool_, message, usage_); }

}  // namespace halite::cli
