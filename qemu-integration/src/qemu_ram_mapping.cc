#include "halite/qemu/qemu_ram_mapping.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "halite/hint_files.h"  // ReadTextFile

namespace halite::qemu {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPresent = uint64_t(1) << 63;
constexpr uint64_t kSwapped = uint64_t(1) << 62;
constexpr uint64_t kFilePage = uint64_t(1) << 61;
constexpr uint64_t kExclusive = uint64_t(1) << 56;  // "page exclusively mapped" (Linux 4.2)

}  // namespace

Result<std::vector<ProcessMapping>> ParseProcessMappings(const std::string& text, const std::string& name) {
  std::vector<ProcessMapping> out;
  std::istringstream lines(text);
  std::string line;
  for (uint64_t n = 1; std::getline(lines, line); ++n) {
    if (line.empty()) continue;
    ProcessMapping m;
    char perms[8] = {};
    uint64_t inode = 0;
    int path_at = -1;
    // start-end perms offset dev inode [path]
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*x:%*x %" SCNu64 " %n", &m.start, &m.end,
                    perms, &m.offset, &inode, &path_at) < 5 ||
        m.end < m.start) {
      return Status::Corrupt(name + ": line " + std::to_string(n) + ": expected \"START-END PERMS OFFSET DEV INODE "
                             "[PATH]\", got \"" + line + "\"");
    }
    m.perms = perms;
    if (path_at > 0 && size_t(path_at) <= line.size()) m.path = line.substr(size_t(path_at));
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<ProcessMapping>> ReadProcessMappings(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/maps";
  HLT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseProcessMappings(text, path);
}

std::optional<ProcessMapping> FindPrivateFileMapping(const std::vector<ProcessMapping>& mappings, uint64_t size) {
  std::optional<ProcessMapping> found;
  for (const ProcessMapping& m : mappings) {
    if (!m.private_writable_file() || m.offset != 0 || m.end - m.start != size) continue;
    if (found) return std::nullopt;  // ambiguous: two such files
    found = m;
  }
  return found;
}

bool PagemapEntryIsUnwrittenFilePage(uint64_t entry) {
  if (entry & kFilePage) return true;
  return (entry & (kPresent | kSwapped)) == 0;
}

namespace {

// pred(entry) for each page map entry of [start, start + pages * 4096) in process `pid`.
Result<std::vector<bool>> ClassifyPages(pid_t pid, uint64_t start, uint64_t pages, bool (*pred)(uint64_t)) {
  const std::string path = "/proc/" + std::to_string(pid) + "/pagemap";
  if (start % kPage != 0) return Status::InvalidArgument(path + ": start " + std::to_string(start) + " is not page aligned");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open it", errno);
  std::vector<bool> out(pages);
  std::vector<uint64_t> entries(std::min<uint64_t>(pages, 65536));
  Status status;
  for (uint64_t done = 0; done < pages && status.ok();) {
    const uint64_t n = std::min<uint64_t>(entries.size(), pages - done);
    const uint64_t offset = (start / kPage + done) * sizeof(uint64_t);
    const ssize_t got = pread(fd, entries.data(), n * sizeof(uint64_t), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || got % sizeof(uint64_t) != 0) {
      status = Status::IoError(path + ": read at offset " + std::to_string(offset) + " returned " +
                               std::to_string(got) + " (expected " + std::to_string(n * 8) + " bytes)",
                               got < 0 ? errno : 0);
      break;
    }
    const uint64_t read = uint64_t(got) / sizeof(uint64_t);
    for (uint64_t i = 0; i < read; ++i) out[done + i] = pred(entries[i]);
    done += read;
  }
  close(fd);
  if (!status.ok()) return status;
  return out;
}

}  // namespace

Result<std::vector<bool>> UnwrittenPagesOfPrivateFileMapping(pid_t pid, uint64_t start, uint64_t pages) {
  return ClassifyPages(pid, start, pages, PagemapEntryIsUnwrittenFilePage);
}

bool PagemapEntryIsPopulated(uint64_t entry) { return (entry & (kPresent | kSwapped)) != 0; }

Result<std::vector<bool>> PopulatedPages(pid_t pid, uint64_t start, uint64_t pages) {
  return ClassifyPages(pid, start, pages, PagemapEntryIsPopulated);
}

bool PagemapEntryIsOwnPage(uint64_t entry) { return (entry & kPresent) != 0 && (entry & kExclusive) != 0; }

Result<std::vector<bool>> OwnPages(pid_t pid, uint64_t start, uint64_t pages) {
  return ClassifyPages(pid, start, pages, PagemapEntryIsOwnPage);
}

}  // namespace halite::qemu
