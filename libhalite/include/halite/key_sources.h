// Keys for encrypted checkpoints (format-spec 13) from where the tools take them: key files, keyring files, a key
// command, and HALITE_ENCRYPT_KEY / HALITE_KEYRING from the environment (moved here from tools/common so that an
// embedder opens the same keyring as hlt-save and hlt-restore).
#ifndef HALITE_KEY_SOURCES_H_
#define HALITE_KEY_SOURCES_H_

#include <memory>
#include <string>
#include <vector>

#include "halite/encryption.h"
#include "halite/export.h"
#include "halite/status.h"

namespace halite {

struct HALITE_EXPORT KeySources {
  std::vector<std::string> key_files;  // --encrypt-key-file K (repeatable)
  std::vector<std::string> keyrings;   // --keyring FILE (repeatable)
  std::string key_command;             // --key-command CMD
  bool any_flag() const { return !key_files.empty() || !keyrings.empty() || !key_command.empty(); }
};

// The keys `sources` and the environment give, as a keyring whose fetch runs the key command (null when there is no
// key at all). Once a key source is in use the process is made not dumpable: no core file of it ever holds
// decrypted pages. Errors: unreadable or malformed key files and keyrings, naming them.
HALITE_EXPORT Result<std::shared_ptr<Keyring>> OpenKeyring(const KeySources& sources);

// Runs `sh -c command` with HALITE_KEY_ID set to `id` in hex (empty when null: the key to encrypt a new checkpoint
// with) and HALITE_KEY_PURPOSE, and reads a key from its standard output; its standard error is ours. Errors: it
// cannot start, exits non-zero, or prints no key (kIoError / kInvalidArgument, never echoing what it printed).
HALITE_EXPORT Result<EncryptionKey> RunKeyCommand(const std::string& command, const KeyId* id);

// The flags that give another process of ours (the image server) the same keys: key files and keyrings as absolute
// paths, the key command as it is. The environment is inherited.
HALITE_EXPORT std::vector<std::string> KeySourceFlags(const KeySources& sources);

// Before anything is started for `checkpoint` (QEMU is launched while its index is read): refuses an encrypted
// checkpoint whose key `keyring` cannot give (kAuthFailed naming the key id), as opening it would, sooner. Its
// parents are checked when it is opened.
HALITE_EXPORT Status CheckKeyAvailable(const std::string& checkpoint, const std::shared_ptr<Keyring>& keyring);

// PR_SET_DUMPABLE 0: no core file of this process (which holds decrypted pages in memory) is written. Not inherited
// by programs it executes.
HALITE_EXPORT void ForbidCoreDumps();

}  // namespace halite

#endif  // HALITE_KEY_SOURCES_H_
