// One argument parser for the modes of hlt-save and hlt-restore: CLI11 (libcli11-dev) with the tools' conventions.
// Options are "--name value" or "--name=value", a repeated option keeps its last value (lists keep all), -h/--help
// prints the mode's own usage text (exit 0), and any error prints "TOOL: message" and the usage (exit 2).
#ifndef HALITE_TOOLS_CLI_PARSER_H_
#define HALITE_TOOLS_CLI_PARSER_H_

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/cli.h"

namespace halite::cli {

// The reader flags (kReaderFlagsHelp) as given, before anything is opened.
struct ReaderFlagValues {
  std::string key_file;
  std::vector<std::string> parent_dirs;
  std::string block_cache_dir;
  std::string block_cache_size;
  KeySources keys;
};

class Parser {
 public:
  Parser(std::string tool, std::string usage);
  CLI::App& app() { return app_; }
  const std::string& tool() const { return tool_; }

  // Adds --key-file, --parent-dir, --block-cache(-size), --encrypt-key-file, --keyring, --key-command.
  // Without `with_key_file` --key-file is left to the mode (hlt-save rekey: the new key).
  void AddReaderFlags(ReaderFlagValues* values, bool with_key_file = true);
  // Parses what follows the mode. With `rest`, everything after the first "--" goes there unparsed and
  // *separator says whether there was one. Returns -1 when the mode goes on, else its exit code (help: 0, a
  // usage error: 2, printed).
  int Parse(Args& args, std::vector<std::string>* rest = nullptr, bool* separator = nullptr);
  // After Parse: loads the --key-file key and the parent directories into *options (a bad key file or cache size
  // is a usage error), then opens the block cache and the keyring (PrepareReaderOptions). -1 to go on, else the
  // exit code, printed.
  int FinishReaderFlags(const ReaderFlagValues& values, ReaderOptions* options) const;
  // Its two halves: the usage checks with the key and parent directories, and the opening (-1 or the exit code).
  int CheckReaderFlags(const ReaderFlagValues& values, ReaderOptions* options) const;
  int OpenReaderFlags(const ReaderFlagValues& values, ReaderOptions* options) const;
  // Prints "TOOL: message" and the usage; returns kExitUsage.
  int UsageError(const std::string& message) const;

 private:
  std::string tool_;
  std::string usage_;
  CLI::App app_;
  bool help_ = false;
};

}  // namespace halite::cli

#endif  // HALITE_TOOLS_CLI_PARSER_H_
