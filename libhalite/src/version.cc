// LibraryVersion, and VersionText (moved here from tools/common/cli.cc, unchanged).
#include "halite/version.h"

#include <fmt/format.h>

#include "halite/format_constants.h"

namespace halite {

// HALITE_LIBRARY_VERSION comes from the project's version in CMakeLists.txt.
const char* LibraryVersion() { return HALITE_LIBRARY_VERSION; }

std::string VersionText(const std::string& program) {
  return fmt::format(
      "{} {} (libhalite)\n"
      "checkpoint format: reads {}.0 to {}.{}; writes {}.{} when blocks are stored as independent frames (by default "
      "for blocks of more than 16 pages), else {}.0 ({}.{} when a file carries skippable sections, {}.{} for an "
      "incremental child, {}.{} for a child with blocks coded against its parent); {}.{} when encrypted; {}.{} when the "
      "page map is packed (whenever that is shorter, so most files)\n",
      program, LibraryVersion(), format::kFormatMajor, format::kFormatMajor, format::kFormatMinor, format::kFormatMajor,
      format::kFormatMinorFramedBlocks, format::kFormatMajor, format::kFormatMajor,
      format::kFormatMinorSkippableSections, format::kFormatMajor, format::kFormatMinorParent, format::kFormatMajor,
      format::kFormatMinorBasedBlocks, format::kFormatMajor, format::kFormatMinorEncrypted, format::kFormatMajor,
      format::kFormatMinorPackedPageMap);
}

}  // namespace halite
