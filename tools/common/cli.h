// Shared command-line plumbing for hlt-save and hlt-restore: exit codes, argument cursor, progress line.
// Tools use only the public API of libhalite.
#ifndef HALITE_TOOLS_CLI_H_
#define HALITE_TOOLS_CLI_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "halite/checkpoint_reader.h"
#include "halite/key_sources.h"
#include "halite/stats_text.h"
#include "halite/status.h"
#include "halite/version.h"

namespace halite::cli {

// Exit codes other tools rely on.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitIo = 3;
inline constexpr int kExitCorrupt = 4;

// Maps a Status to an exit code: I/O errors 3, corrupt/unsupported/unauthenticated 4, anything else 2.
int ExitCodeFor(const Status& s);
// Prints "TOOL: message" to stderr and returns the exit code for it.
int Fail(const std::string& tool, const Status& s);
int UsageError(const std::string& tool, const std::string& message, const std::string& usage);

// What follows the mode on the command line; a mode parses it with cli::Parser (cli_parser.h).
class Args {
 public:
  Args(int argc, char** argv, int first);
  bool Done() const { return i_ >= args_.size(); }
  std::string Next() { return args_[i_++]; }

 private:
  std::vector<std::string> args_;
  size_t i_ = 0;
};

// Decimal, 0x hex, or with a K/M/G suffix (binary).
bool ParseU64(const std::string& s, uint64_t* out);

// The options of every mode that reads a checkpoint (cli::Parser::AddReaderFlags).
inline constexpr const char* kReaderFlagsHelp =
    "  --key-file K           refuse the checkpoint unless it is authenticated with this key (32 bytes or 64 hex)\n"
    "  --encrypt-key-file K   a key of encrypted checkpoints (64 hex digits or 32 bytes; repeatable); an encrypted\n"
    "                         checkpoint whose key is not given is refused, naming the key id it needs\n"
    "  --keyring FILE         keys by id, one \"KEY_ID KEY\" a line (a chain may mix keys; repeatable)\n"
    "  --key-command CMD      run `sh -c CMD` for a key id no file gives (HALITE_KEY_ID, HALITE_KEY_PURPOSE=decrypt\n"
    "                         in its environment); it prints the key (64 hex digits): your KMS or vault client\n"
    "                         (environment: HALITE_ENCRYPT_KEY, a key; HALITE_KEYRING, a keyring file)\n"
    "  --parent-dir DIR       look for the parents of an incremental checkpoint in DIR too (repeatable)\n"
    "  --block-cache DIR      keep the blocks read from s3:// or rados:// in this host cache directory, and read\n"
    "                         them from there next time (default: $HALITE_BLOCK_CACHE; local files never use it)\n"
    "  --block-cache-size B   bound of the cache directory (K/M/G suffixes; default $HALITE_BLOCK_CACHE_SIZE or 8G)\n";

// Progress on stderr when it is a terminal; rewritten in place, at most ten times a second.
class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  void Update(uint64_t done, uint64_t total);
  void Finish();

 private:
  std::string label_;
  bool tty_;
  bool shown_ = false;
  int64_t last_ns_ = 0;
};

// What `TOOL --version` prints (the library's, halite/version.h).
using ::halite::VersionText;

using ::halite::HumanBytes;
using ::halite::HexBytes;
// One JSON document and a newline, as every tool prints JSON. Strings that are not valid UTF-8 (file names can be
// any bytes) have the bad bytes replaced by U+FFFD instead of failing.
std::string JsonText(const nlohmann::ordered_json& value);

}  // namespace halite::cli

#endif  // HALITE_TOOLS_CLI_H_
