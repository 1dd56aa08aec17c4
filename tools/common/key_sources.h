// The key flags' help of the tools; the keys themselves come from the library (halite/key_sources.h).
#ifndef HALITE_TOOLS_KEY_SOURCES_H_
#define HALITE_TOOLS_KEY_SOURCES_H_

#include "halite/key_sources.h"

namespace halite::cli {

using ::halite::CheckKeyAvailable;
using ::halite::ForbidCoreDumps;
using ::halite::KeySourceFlags;
using ::halite::KeySources;
using ::halite::OpenKeyring;
using ::halite::RunKeyCommand;

inline constexpr const char* kKeyFlagsHelp =
    "  --encrypt-key-file K   a key for encrypted checkpoints (64 hex digits or 32 bytes; repeatable)\n"
    "  --keyring FILE         keys by id, one \"KEY_ID KEY\" a line (a chain may mix keys; repeatable)\n"
    "  --key-command CMD      run `sh -c CMD` for a key this process lacks: HALITE_KEY_ID names it (empty for the\n"
    "                         key of a new checkpoint), HALITE_KEY_PURPOSE is decrypt or encrypt; it prints the key\n"
    "                         (64 hex digits) on standard output (your KMS or vault client)\n"
    "                         environment: HALITE_ENCRYPT_KEY (a key), HALITE_KEYRING (a keyring file)\n";

}  // namespace halite::cli

#endif  // HALITE_TOOLS_KEY_SOURCES_H_
