#include "cache/cache_eviction.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <string>
#include <vector>

#include "cache/cache_entry.h"

namespace halite::cache {

namespace {

struct Listed {
  int64_t mtime_ns;
  uint64_t size;
  unsigned subdir;
  std::string name;
};

int64_t Ns(const struct timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

// Calls fn(dir fd, entry name, stat) for each regular file of subdirectory `sub`; a missing subdirectory is empty.
template <typename Fn>
Status ForEachFile(int dir_fd, const std::string& sub, const std::string& name, Fn fn) {
  int fd = ::openat(dir_fd, sub.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IoError(name + "/" + sub + ": cannot list the block cache directory", errno);
  }
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int e = errno;
    ::close(fd);
    return Status::IoError(name + "/" + sub + ": cannot list the block cache directory", e);
  }
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    fn(::dirfd(d), e->d_name, st);
  }
  ::closedir(d);
  return Status::Ok();
}

Status List(int dir_fd, const std::string& name, std::vector<Listed>* out, uint64_t* total) {
  *total = 0;
  for (unsigned s = 0; s < 256; ++s) {
    HLT_RETURN_IF_ERROR(ForEachFile(dir_fd, SubdirName(s), name, [&](int, const char* entry, const struct stat& st) {
      *total += uint64_t(st.st_size);
      if (out) out->push_back(Listed{Ns(st.st_mtim), uint64_t(st.st_size), s, entry});
    }));
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> CountEntryBytes(int dir_fd, const std::string& name) {
  uint64_t total = 0;
  HLT_RETURN_IF_ERROR(List(dir_fd, name, nullptr, &total));
  return total;
}

Result<EvictionResult> EvictLeastRecentlyUsed(int dir_fd, uint64_t target_bytes, const std::string& name) {
  // Leftovers of inserts killed between writing and linking (only on file systems without O_TMPFILE).
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  (void)ForEachFile(dir_fd, "tmp", name, [&](int fd, const char* entry, const struct stat& st) {
    if (Ns(now) - Ns(st.st_mtim) > int64_t(3600) * 1000000000) (void)::unlinkat(fd, entry, 0);
  });

  std::vector<Listed> entries;
  EvictionResult r;
  HLT_RETURN_IF_ERROR(List(dir_fd, name, &entries, &r.bytes_before));
  std::sort(entries.begin(), entries.end(), [](const Listed& a, const Listed& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
  });
  r.bytes_after = r.bytes_before;
  for (const Listed& e : entries) {
    if (r.bytes_after <= target_bytes) break;
    const std::string path = SubdirName(e.subdir) + "/" + e.name;
    if (::unlinkat(dir_fd, path.c_str(), 0) != 0 && errno != ENOENT) continue;
    r.bytes_after -= e.size;
    ++r.entries_deleted;
  }
  return r;
}

}  // namespace halite::cache
