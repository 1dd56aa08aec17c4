// Keys for encrypted checkpoints (format-spec 13) as the tools take them: --encrypt-key-file K, --keyring FILE,
// --key-command CMD, and HALITE_ENCRYPT_KEY / HALITE_KEYRING from the environment. Tools use only the public API.
#ifndef HALITE_TOOLS_KEY_SOURCES_H_
#define HALITE_TOOLS_KEY_SOURCES_H_

#include <memory>
#include <string>
#include <vector>

#include "halite/encryption.h"
#include "halite/status.h"

namespace halite::cli {

struct KeySources {
  std::vector<std::string> key_files;  // --encrypt-key-file K (repeatable)
  std::vector<std::string> keyrings;   // --keyring FILE (repeatable)
  std::string key_command;             // --key-command CMD
  bool any_flag() const { return !key_files.empty() || !keyrings.empty() || !key_command.empty(); }
};

inline constexpr const char* kKeyFlagsHelp =
    "  --encrypt-key-file K   a key for encrypted checkpoints (64 hex digits or 32 bytes; repeatable)\n"
    "  --keyring FILE         keys by id, one \"KEY_ID KEY\" a line (a chain may mix keys; repeatable)\n"
    "  --key-command CMD      run `sh -c CMD` for a key this process lacks: HALITE_KEY_ID names it (empty for the\n"
    "                         key of a new checkpoint), HALITE_KEY_PURPOSE is decrypt or encrypt; it prints the key\n"
    "                         (64 hex digits) on standard output (your KMS or vault client)\n"
    "                         environment: HALITE_ENCRYPT_KEY (a key), HALITE_KEYRING (a keyring file)\n";

// The keys `sources` and the environment give, as a keyring whose fetch runs the key command (null when there is no
// key at all). Once a key source is in use the process is made not dumpable: no core file of it ever holds
// decrypted pages. Errors: unreadable or malformed key files and keyrings, naming them.
Result<std::shared_ptr<Keyring>> OpenKeyring(const KeySources& sources);

// Runs `sh -c command` with HALITE_KEY_ID set to `id` in hex (empty when null: the key to encrypt a new checkpoint
// with) and HALITE_KEY_PURPOSE, and reads a key from its standard output; its standard error is ours. Errors: it
// cannot start, exits non-zero, or prints no key (kIoError / kInvalidArgument, never echoing what it printed).
Result<EncryptionKey> RunKeyCommand(const std::string& command, const KeyId* id);

// The flags that give another process of ours (the image server) the same keys: key files and keyrings as absolute
// paths, the key command as it is. The environment is inherited.
std::vector<std::string> KeySourceFlags(const KeySources& sources);

// Before anything is started for `checkpoint` (QEMU is launched while its index is read): refuses an encrypted
// checkpoint whose key `keyring` cannot give (kAuthFailed naming the key id), as opening it would, sooner. Its
// parents are checked when it is opened.
Status CheckKeyAvailable(const std::string& checkpoint, const std::shared_ptr<Keyring>& keyring);

// PR_SET_DUMPABLE 0: no core file of this process (which holds decrypted pages in memory) is written. Not inherited
// by programs it executes.
void ForbidCoreDumps();

}  // namespace halite::cli

#endif  // HALITE_TOOLS_KEY_SOURCES_H_
