// flaky-fs BACKING_FILE MOUNTPOINT CONTROL_FILE: a FUSE file system holding one file, BACKING_FILE's content
// under its base name, whose reads fail with EIO when told to: a storage device that fails and recovers, for the
// tests of what a restore does then (issue 15). CONTROL_FILE says how reads go, re-read whenever it changes:
//   ok            every read succeeds (also when the file is missing or empty)
//   fail          every read fails with EIO (a device gone for good, until the file says otherwise)
//   fail-next N   the next N reads fail, then reads succeed (a transient error)
// Reads bypass the page cache (direct_io), so each one reaches this process. Runs in the foreground until
// unmounted (fusermount3 -u MOUNTPOINT) or killed; prints the reads served and failed on exit.
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace {

struct State {
  std::string backing, name, control;
  int fd = -1;
  std::mutex mu;
  timespec control_mtime{};
  bool fail_all = false;
  long fail_next = 0;
  std::atomic<long> served{0}, failed{0};
} g;

// Re-reads the control file when its modification time changed. With g.mu held.
void RefreshControl() {
  struct stat st{};
  if (stat(g.control.c_str(), &st) != 0) {
    g.fail_all = false;
    return;
  }
  if (st.st_mtim.tv_sec == g.control_mtime.tv_sec && st.st_mtim.tv_nsec == g.control_mtime.tv_nsec) return;
  g.control_mtime = st.st_mtim;
  char buf[64] = {0};
  FILE* f = std::fopen(g.control.c_str(), "r");
  if (f != nullptr) {
    (void)!std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
  }
  long n = 0;
  g.fail_all = std::strncmp(buf, "fail\n", 5) == 0 || std::strcmp(buf, "fail") == 0;
  if (std::sscanf(buf, "fail-next %ld", &n) == 1) g.fail_next = n;
}

bool ThisReadFails() {
  std::lock_guard<std::mutex> lock(g.mu);
  RefreshControl();
  if (g.fail_all) return true;
  if (g.fail_next > 0) {
    --g.fail_next;
    return true;
  }
  return false;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
  std::memset(st, 0, sizeof *st);
  if (std::strcmp(path, "/") == 0) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
    return 0;
  }
  if (path + 1 != g.name) return -ENOENT;
  struct stat b{};
  if (fstat(g.fd, &b) != 0) return -errno;
  st->st_mode = S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = b.st_size;
  st->st_mtim = b.st_mtim;
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
  if (std::strcmp(path, "/") != 0) return -ENOENT;
  fill(buf, ".", nullptr, 0, FUSE_FILL_DIR_PLUS);
  fill(buf, "..", nullptr, 0, FUSE_FILL_DIR_PLUS);
  fill(buf, g.name.c_str(), nullptr, 0, FUSE_FILL_DIR_PLUS);
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if (path + 1 != g.name) return -ENOENT;
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  fi->direct_io = 1;  // every read comes here: none is answered from the page cache
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t offset, fuse_file_info*) {
  if (ThisReadFails()) {
    g.failed.fetch_add(1);
    return -EIO;
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(g.fd, buf + done, size - done, offset + off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += size_t(n);
  }
  g.served.fetch_add(1);
  return int(done);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: flaky-fs BACKING_FILE MOUNTPOINT CONTROL_FILE\n");
    return 2;
  }
  g.backing = argv[1];
  g.control = argv[3];
  const size_t slash = g.backing.rfind('/');
  g.name = slash == std::string::npos ? g.backing : g.backing.substr(slash + 1);
  g.fd = open(g.backing.c_str(), O_RDONLY | O_CLOEXEC);
  if (g.fd < 0) {
    std::fprintf(stderr, "flaky-fs: %s: %s\n", g.backing.c_str(), std::strerror(errno));
    return 1;
  }
  fuse_operations ops{};
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  char prog[] = "flaky-fs", fg[] = "-f", opt[] = "-o", opts[] = "ro,default_permissions,fsname=flaky-fs";
  char* fargs[] = {prog, fg, opt, opts, argv[2], nullptr};
  const int rc = fuse_main(5, fargs, &ops, nullptr);
  std::fprintf(stderr, "flaky-fs: %ld reads served, %ld failed\n", g.served.load(), g.failed.load());
  return rc;
}
