// The library's version (independent of the checkpoint format's version, which format_constants.h gives).
#ifndef HALITE_VERSION_H_
#define HALITE_VERSION_H_

#include <string>

#include "halite/export.h"

namespace halite {

// "MAJOR.MINOR.PATCH" of the libhalite build in use, e.g. "0.1.0". A static string; thread-safe.
HALITE_EXPORT const char* LibraryVersion();

// What `PROGRAM --version` prints (hlt-save, hlt-restore): the program's version (the library's) and the checkpoint
// format versions it reads and writes, each write version with when it is written.
HALITE_EXPORT std::string VersionText(const std::string& program);

}  // namespace halite

#endif  // HALITE_VERSION_H_
