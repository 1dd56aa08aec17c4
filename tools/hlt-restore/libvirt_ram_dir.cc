// hlt-restore libvirt --memory shared: the RAM directory server and registrations (libvirt_ram_dir.h).
#include "hlt-restore/libvirt_ram_dir.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "halite/hint_files.h"
#include "halite/image_server/ram_dir_server.h"
#include "hlt-restore/detached_server.h"

namespace halite::restore {
namespace {

// The value of `key = "..."` in a libvirt configuration file, else "".
std::string ConfValue(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#' || line.compare(start, key.size(), key) != 0) continue;
    const size_t eq = line.find('=', start + key.size());
    if (eq == std::string::npos || line.find_first_not_of(" \t", start + key.size()) != eq) continue;
    const size_t q1 = line.find('"', eq);
    const size_t q2 = q1 == std::string::npos ? q1 : line.find('"', q1 + 1);
    if (q2 != std::string::npos) return line.substr(q1 + 1, q2 - q1 - 1);
  }
  return "";
}

std::string QueryValue(const std::string& uri, const std::string& key) {
  const size_t q = uri.find('?');
  if (q == std::string::npos) return "";
  std::string query = uri.substr(q + 1);
  size_t at = 0;
  while (at <= query.size()) {
    const size_t amp = query.find('&', at);
    const std::string kv = query.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    if (kv.compare(0, key.size() + 1, key + "=") == 0) return kv.substr(key.size() + 1);
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return "";
}

std::string UserConfigDir() {
  const char* xdg = getenv("XDG_CONFIG_HOME");
  if (xdg != nullptr && *xdg) return std::string(xdg) + "/libvirt";
  const char* home = getenv("HOME");
  return std::string(home ? home : "") + "/.config/libvirt";
}

// The mount table's entry for `dir`: its file system type, else "".
std::string MountType(const std::string& dir) {
  std::ifstream mi("/proc/self/mountinfo");
  std::string line, type;
  while (std::getline(mi, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point, field;
    fields >> id >> parent >> dev >> root >> point;
    if (point != dir) continue;
    while (fields >> field && field != "-") {
    }
    fields >> type;  // the last mount over dir wins
  }
  return type;
}

std::string Tail(const std::string& path) {
  Result<std::string> text = ReadTextFile(path);
  if (!text) return "";
  return text->size() > 1500 ? text->substr(text->size() - 1500) : *text;
}

}  // namespace

Result<std::string> DefaultLibvirtRamDir(const std::string& given_uri) {
  std::string uri = given_uri;
  if (uri.empty()) {
    const char* env = getenv("LIBVIRT_DEFAULT_URI");
    uri = env != nullptr && *env ? env : (geteuid() == 0 ? "qemu:///system" : "qemu:///session");
  }
  const size_t scheme_end = uri.find("://");
  const std::string scheme = uri.substr(0, scheme_end);
  if (scheme_end == std::string::npos || (scheme != "qemu" && scheme != "qemu+unix")) {
    return Status::InvalidArgument("--memory shared: the connection " + uri +
                                   " is not to this host's QEMU driver (qemu:// or qemu+unix://): run hlt-restore on "
                                   "the libvirt host, or give --ram-dir");
  }
  const size_t path_start = uri.find('/', scheme_end + 3);
  if (path_start != scheme_end + 3) {
    return Status::InvalidArgument("--memory shared: " + uri + " names another host; run hlt-restore on it");
  }
  const std::string path = uri.substr(path_start, uri.find('?') == std::string::npos ? std::string::npos
                                                                                     : uri.find('?') - path_start);
  std::string conf, dflt;
  if (path == "/embed") {
    const std::string root = QueryValue(uri, "root");
    if (root.empty()) return Status::InvalidArgument(uri + ": an embedded driver URI without root=");
    conf = root + "/etc/qemu.conf";
    dflt = root + "/lib/qemu/ram";
  } else if (path == "/system") {
    conf = "/etc/libvirt/qemu.conf";
    dflt = "/var/lib/libvirt/qemu/ram";
  } else if (path == "/session") {
    conf = UserConfigDir() + "/qemu.conf";
    dflt = UserConfigDir() + "/qemu/ram";
  } else {
    return Status::InvalidArgument(uri + ": expected /system, /session or /embed?root=DIR (or give --ram-dir)");
  }
  const std::string configured = ConfValue(conf, "memory_backing_dir");
  return configured.empty() ? dflt : configured + "/libvirt/qemu";
}

RamDirRegistration& RamDirRegistration::operator=(RamDirRegistration&& o) noexcept {
  if (this != &o) {
    Remove();
    path_ = std::move(o.path_);
    started_ = o.started_;
    o.path_.clear();
  }
  return *this;
}

void RamDirRegistration::Remove() {
  if (!path_.empty()) unlink(path_.c_str());
  path_.clear();
}

Result<RamDirRegistration> RamDirRegistration::Register(const std::string& self, const std::string& ram_dir_given,
                                                        const std::string& short_name, const std::string& image) {
  std::error_code ec;
  std::filesystem::create_directories(ram_dir_given, ec);
  if (ec) return Status::IoError(ram_dir_given + ": cannot create libvirt's memory backing directory", ec.value());
  char resolved[PATH_MAX];
  if (realpath(ram_dir_given.c_str(), resolved) == nullptr) {
    // A server that died leaves its mount behind ("transport endpoint is not connected"): take it away first.
    if (errno == ENOTCONN) umount2(ram_dir_given.c_str(), MNT_DETACH);
    if (realpath(ram_dir_given.c_str(), resolved) == nullptr) {
      return Status::IoError(ram_dir_given + ": cannot resolve the memory backing directory", errno);
    }
  }
  const std::string ram_dir = resolved;
  const std::string lock_path = ram_dir + ".halite.lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return Status::IoError(lock_path + ": cannot open the RAM directory server's lock", errno);
  struct Unlock {
    int fd;
    ~Unlock() { close(fd); }
  } unlock{lock};
  if (flock(lock, LOCK_EX) != 0) return Status::IoError(lock_path + ": cannot lock it", errno);

  RamDirRegistration reg;
  if (MountType(ram_dir) != image_server::kRamDirFsType) {
    struct stat st;
    if (stat(ram_dir.c_str(), &st) != 0 && errno == ENOTCONN) umount2(ram_dir.c_str(), MNT_DETACH);
    // Domains libvirt started with file-backed RAM before the server: a mount would hide their directories
    // from libvirt's cleanup.
    for (const auto& e : std::filesystem::directory_iterator(ram_dir, ec)) {
      return Status::InvalidArgument(
          ram_dir + " holds " + e.path().filename().string() +
          " (a domain started with file-backed RAM without hlt-restore's RAM directory server): --memory shared "
          "mounts its server over this directory; stop those domains first, or point libvirt's memory_backing_dir "
          "(qemu.conf) elsewhere");
    }
    const std::string log = ram_dir + ".halite.log";
    HLT_ASSIGN_OR_RETURN(const pid_t pid, StartDetachedServer(self, {"serve-ram-dir", ram_dir, "--exit-when-unused",
                                                                     "30", "--lock", lock_path},
                                                              log));
    reg.started_ = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (MountType(ram_dir) != image_server::kRamDirFsType) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::IoError("the RAM directory server (pid " + std::to_string(pid) + ") did not come up at " +
                               ram_dir + " within 15 s; its log " + log + ":\n" + Tail(log));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const std::string path = ram_dir + "/" + image_server::kRamDirRegistry + "/" + short_name;
  if (symlink(image.c_str(), path.c_str()) != 0) {
    if (errno != EEXIST) return Status::IoError(path + ": cannot register the domain's RAM image", errno);
    char target[PATH_MAX];
    const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    const std::string existing = n < 0 ? "" : std::string(target, size_t(n));
    if (existing != image) {
      return Status::InvalidArgument(fmt::format(
          "{}: the short name \"{}\" (libvirt cuts domain names to {} bytes for the RAM file's directory) is "
          "registered to {}, not {}: another domain starting now has a name alike in its first {} bytes; give "
          "--name (or remove the registration if no restore is running)",
          path, short_name, image_server::kLibvirtShortNameBytes, existing, image,
          image_server::kLibvirtShortNameBytes));
    }
    // The same image: a registration a restore of the same checkpoint left (or still holds); either way the
    // domain gets the right memory.
  }
  reg.path_ = path;
  return reg;
}

Status CheckQemuMapsImage(int pid, const std::string& image, uint64_t size, int timeout_ms) {
  const std::string maps = fmt::format("/proc/{}/maps", pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string seen;
  for (;;) {
    std::ifstream f(maps);
    if (!f) return Status::IoError(maps + ": cannot read QEMU's mappings (QEMU gone?)", errno);
    std::string line;
    seen.clear();
    while (std::getline(f, line)) {
      // start-end perms offset dev inode path
      std::istringstream fields(line);
      std::string range, perms, offset, dev, inode, path;
      fields >> range >> perms >> offset >> dev >> inode;
      std::getline(fields >> std::ws, path);
      if (path != image) continue;
      const uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
      const uint64_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
      if (perms == "rw-p" && offset == "00000000" && end - start == size) return Status::Ok();
      seen += "\n  " + line;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::InvalidArgument(fmt::format(
      "QEMU (pid {}) does not map the checkpoint's image {} as its guest RAM (expected one rw-p mapping of {} "
      "bytes at offset 0; {}): refusing to run the guest on other memory",
      pid, image, size, seen.empty() ? "it maps none of it" : "found:" + seen));
}

}  // namespace halite::restore
