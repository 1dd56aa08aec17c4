// Parsers for the plain-text hint and trace files (format-spec/hint-files.md).
//
// One entry a line; `#` starts a comment; numbers are decimal or 0x-hexadecimal. A page is `PAGE` (a page of
// the region named "ram", or of the first region when none has that name) or `REGION:PAGE` (split at the last
// colon, so region names may contain colons). In REGION, `%XX` (two hexadecimal digits) stands for the byte XX,
// so names with spaces, `#` or `%` can be written (format 1.1). Errors are kInvalidArgument naming the file and
// line.
#ifndef HALITE_HINT_FILES_H_
#define HALITE_HINT_FILES_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halite/export.h"
#include "halite/checkpoint_types.h"
#include "halite/status.h"

namespace halite {

struct HALITE_EXPORT PageRun {
  PageRef first;
  uint64_t count = 1;
  uint32_t address_space = 0;  // VA hints: which address space (0, 1, ... in file order)
  bool operator==(const PageRun&) const = default;
};

struct HALITE_EXPORT TraceAccess {
  PageRef page;
  bool write = false;
  bool operator==(const TraceAccess&) const = default;
};

// Access trace: `PAGE` or `PAGE COUNT` lines in the order the guest touched them (repeats allowed).
HALITE_EXPORT Result<std::vector<PageRun>> ParseAccessTrace(std::string_view text, const std::string& file_name,
                                              std::span<const Region> regions);
// VA hints: `PAGE` or `PAGE COUNT` lines in virtual-address order; a blank line starts a new address space.
HALITE_EXPORT Result<std::vector<PageRun>> ParseVaHints(std::string_view text, const std::string& file_name,
                                          std::span<const Region> regions);
// Replay trace: `PAGE` or `PAGE w` (a write) lines.
HALITE_EXPORT Result<std::vector<TraceAccess>> ParseReplayTrace(std::string_view text, const std::string& file_name,
                                                  std::span<const Region> regions);

// A region name as a hint file writes it: space, tab, `#`, `%` and any byte outside printable ASCII become
// `%XX` (upper-case hexadecimal); everything else is kept. The parsers above decode it back.
HALITE_EXPORT std::string EscapeHintRegionName(std::string_view name);

// Writes accesses as an access-trace file (one `REGION:PAGE` line each, REGION escaped with
// EscapeHintRegionName, after a header comment).
HALITE_EXPORT std::string FormatAccessTrace(std::span<const PageRef> pages, std::span<const Region> regions);

// Reads a whole file (hint files are small). Errors: kIoError naming the path.
HALITE_EXPORT Result<std::string> ReadTextFile(const std::string& path);

}  // namespace halite

#endif  // HALITE_HINT_FILES_H_
