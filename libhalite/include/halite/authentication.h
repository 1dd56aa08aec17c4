// Keys for authenticated checkpoints (format-spec section 5.8): a keyed BLAKE2b MAC over the header, the index
// and every block and blob, bound to the file id and to each payload's index.
#ifndef HALITE_AUTHENTICATION_H_
#define HALITE_AUTHENTICATION_H_

#include <array>
#include <cstdint>
#include <string>

#include "halite/export.h"
#include "halite/status.h"

namespace halite {

using MacKey = std::array<uint8_t, 32>;

// Reads a key file: exactly 32 bytes, or 64 hexadecimal digits (an optional trailing newline allowed).
// Errors: kIoError (cannot read), kInvalidArgument (wrong length or characters), naming the file.
HALITE_EXPORT Result<MacKey> ReadMacKeyFile(const std::string& path);

}  // namespace halite

#endif  // HALITE_AUTHENTICATION_H_
