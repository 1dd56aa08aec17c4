// Where a QEMU process maps its guest RAM, and which pages of a private file mapping it has written since.
//
// A clone restored with `hlt-restore qemu --memory shared` maps its main RAMBlock privately from the image server's
// file of its checkpoint: a page the guest never wrote still reads from that file, so it still equals the
// checkpoint's page. The kernel knows exactly which pages were written (they became anonymous copies): the page
// map (/proc/PID/pagemap) says so per page. An incremental save of the clone with that checkpoint as its parent
// then records those pages as references into the parent without reading or comparing them (issue 12, item 5).
#ifndef HALITE_QEMU_QEMU_RAM_MAPPING_H_
#define HALITE_QEMU_QEMU_RAM_MAPPING_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::qemu {

// One line of /proc/PID/maps.
struct ProcessMapping {
  uint64_t start = 0, end = 0;  // [start, end)
  std::string perms;            // "rw-p", ...
  uint64_t offset = 0;          // in the file
  std::string path;             // empty for anonymous memory; " (deleted)" kept as the kernel prints it
  bool private_writable_file() const { return perms.size() == 4 && perms[0] == 'r' && perms[1] == 'w' &&
                                              perms[3] == 'p' && !path.empty() && path[0] == '/'; }
};

// Parses /proc/PID/maps text (one mapping a line). Errors: kCorrupt naming the line that does not parse.
Result<std::vector<ProcessMapping>> ParseProcessMappings(const std::string& text, const std::string& name);
// Reads and parses /proc/PID/maps. Errors: kIoError (no such process, no permission).
Result<std::vector<ProcessMapping>> ReadProcessMappings(pid_t pid);

// The private, writable mapping of a file from offset 0 that is exactly `size` bytes: how QEMU maps a RAMBlock
// backed by `memory-backend-file,share=off`. nullopt when there is none, or more than one.
std::optional<ProcessMapping> FindPrivateFileMapping(const std::vector<ProcessMapping>& mappings, uint64_t size);

// One page map entry (Documentation/admin-guide/mm/pagemap.rst): bit 63 present, 62 swapped, 61 file page or
// shared anonymous. In a private file mapping a page still holds its file's content when it is the file's page
// (bit 61) or when nothing was ever faulted in (neither present nor swapped); a written page is an anonymous copy.
bool PagemapEntryIsUnwrittenFilePage(uint64_t entry);

// For each 4 KiB page of [start, start + pages * 4096) in process `pid`: true when it still holds its file's
// content (PagemapEntryIsUnwrittenFilePage). The caller makes sure the process does not write there meanwhile
// (the guest is stopped). Needs ptrace-read permission over pid. Errors: kIoError naming /proc/PID/pagemap.
Result<std::vector<bool>> UnwrittenPagesOfPrivateFileMapping(pid_t pid, uint64_t start, uint64_t pages);

// An anonymous page that holds content: present in memory or swapped out (bits 63, 62). In a postcopy
// destination's guest RAM these are exactly the pages placed so far (POSTCOPY_ADVISE discarded everything, and
// QEMU inhibits the balloon's discards while postcopy runs), whoever placed them: QEMU from its stream, or a
// restorer through QEMU's userfaultfd, which QEMU's own received bitmap does not know about.
bool PagemapEntryIsPopulated(uint64_t entry);
// For each 4 KiB page of [start, start + pages * 4096) in process `pid`: PagemapEntryIsPopulated. Needs
// ptrace-read permission over pid. Errors: kIoError naming /proc/PID/pagemap.
Result<std::vector<bool>> PopulatedPages(pid_t pid, uint64_t start, uint64_t pages);

// A page the process wrote itself: present (bit 63) and mapped only here (bit 56, "exclusively mapped", which
// the kernel shows without privilege). The shared zero page, which a read of never-written anonymous memory maps,
// and pages shared with another process (KSM, a fork) are not exclusively mapped.
bool PagemapEntryIsOwnPage(uint64_t entry);
// For each 4 KiB page of [start, start + pages * 4096) in process `pid`: PagemapEntryIsOwnPage. Errors: kIoError
// naming /proc/PID/pagemap.
Result<std::vector<bool>> OwnPages(pid_t pid, uint64_t start, uint64_t pages);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RAM_MAPPING_H_
