#include "halite/version.h"

namespace halite {

// HALITE_LIBRARY_VERSION comes from the project's version in CMakeLists.txt.
const char* LibraryVersion() { return HALITE_LIBRARY_VERSION; }

}  // namespace halite
