// hlt-restore libvirt --memory shared: the RAM directory server and registrations (libvirt_ram_dir.h).
#include "halite/libvirt/libvirt_ram_dir.h"

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
#include "halite/image_server_process.h"
#include "halite/libvirt/libvirt_dirs.h"

namespace halite::libvirt {

namespace {

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

Result<std::string> DefaultLibvirtRamDir(const std::string& uri) {
  HLT_ASSIGN_OR_RETURN(LibvirtDriverDirs dirs, LocalLibvirtDriverDirs(uri, "--memory shared (or give --ram-dir)"));
  const std::string configured = LibvirtConfValue(dirs.qemu_conf, "memory_backing_dir");
  return configured.empty() ? dirs.ram_dir : configured + "/libvirt/qemu";
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

Result<RamDirRegistration> RamDirRegistration::Register(const std::string& server, const std::string& ram_dir_given,
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
    HLT_ASSIGN_OR_RETURN(const pid_t pid, StartDetachedServer(server, {"serve-ram-dir", ram_dir, "--exit-when-unused",
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

}  // namespace halite::libvirt
