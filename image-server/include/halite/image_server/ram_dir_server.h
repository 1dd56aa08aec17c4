// The "RAM directory" server: a small FUSE file system mounted over libvirt's memory backing directory (RAMDIR,
// e.g. /var/lib/libvirt/qemu/ram) so that a domain libvirt starts with
//   <memoryBacking><source type='file'/><access mode='private'/></memoryBacking>
// maps its guest RAM privately from a checkpoint's image (the image server's MOUNT/ckpt.pc.ram) instead of a new
// empty file. libvirt 9.0 cannot be told which file to map: it always gives QEMU
// mem-path=RAMDIR/<id>-<short name>/pc.ram, with the domain id known only once the domain starts.
//
// What the file system holds (all in memory, nothing on disk):
//   - directories, made by libvirt before QEMU starts (mkdir -p, chown/chmod to QEMU's user) and removed after
//     the domain stops (readdir, unlink, rmdir); their owner and mode are remembered and the kernel checks
//     access against them (default_permissions);
//   - the registry `.halite/` (writable only by the server's user): a symlink `.halite/<short name>` -> image
//     file, made by hlt-restore for the domain it is about to start;
//   - in a directory named `<digits>-<short name>` whose short name is registered, a lookup of `pc.ram` (the
//     main RAM's memory backend alias) makes an entry there: a symlink to the registered image, which QEMU's
//     open follows. The entry keeps its target after the registration is gone; libvirt's cleanup unlinks it.
//   - no regular files: create, mknod, link, rename and writes are refused (EROFS), so a domain nobody registered
//     fails to start with QEMU's "can't open backing store ... Read-only file system" instead of running on
//     empty memory.
//
// Thread-safe: the FUSE threads and the owner's calls share one mutex.
#ifndef HALITE_IMAGE_SERVER_RAM_DIR_SERVER_H_
#define HALITE_IMAGE_SERVER_RAM_DIR_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "halite/status.h"

namespace halite::image_server {

// The registry directory's name at the top of the mount.
inline constexpr const char* kRamDirRegistry = ".halite";
// The FUSE subtype: the mount shows as file system type "fuse.halite-ramdir" in /proc/self/mountinfo.
inline constexpr const char* kRamDirFsType = "fuse.halite-ramdir";
// libvirt's short name of a domain: its name cut to this many bytes (virDomainDefGetShortName).
inline constexpr size_t kLibvirtShortNameBytes = 20;

struct RamDirServerOptions {
  std::string mountpoint;    // an existing directory (its owner and mode become the root's)
  bool allow_other = true;   // libvirt and QEMU may run as other users
};

struct RamDirCounts {
  uint64_t registrations = 0;  // symlinks in .halite
  uint64_t directories = 0;    // every directory but the root and .halite
  uint64_t links_made = 0;     // pc.ram entries made for registered domains (since the start)
  uint64_t refused = 0;        // create/mknod/link/rename/write attempts refused (since the start)
};

class RamDirServer {
 public:
  // Mounts at options.mountpoint and serves on threads of its own. Errors: kIoError naming the mountpoint (no
  // /dev/fuse, mount refused).
  static Result<std::unique_ptr<RamDirServer>> Start(RamDirServerOptions options);
  // Unmounts and joins the threads.
  ~RamDirServer();

  RamDirCounts Counts() const;
  // True when nothing is registered and no directory exists but the registry: no domain can need the mount.
  bool Idle() const;
  // Unmounts (a directory libvirt still uses then goes with the mount; call when Idle()).
  void Stop();
  // Blocks until Stop() or an unmount from outside.
  void Wait();
  // False once the mount is gone (Stop() or an unmount from outside).
  bool Serving() const;

 private:
  class Impl;
  explicit RamDirServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// libvirt's short name for a domain named `name` (its first kLibvirtShortNameBytes bytes).
std::string LibvirtShortName(const std::string& name);

// How RamDirServeUntilStopped stops (the loop of `hlt-restore serve-ram-dir`, moved here so that a service of an
// embedder's keeps the mount the same way).
struct RamDirServeOptions {
  // Counted by the caller's signal handler (SIGINT, SIGTERM): each new signal asks the server to stop.
  const std::atomic<int>* signals = nullptr;
  // Stop by itself once the server has been Idle() for this many seconds (0: never).
  uint64_t exit_when_unused_s = 0;
  // Taken (flock, not waiting) before stopping by itself, so that a restore registering a domain under it never
  // meets a server going away; empty: none.
  std::string lock_path;
  // A signal refused because domains may still need the mount: told the counts; another signal within 5 s stops
  // anyway.
  std::function<void(const RamDirCounts& counts)> on_refused;
};

// Serves until stopped: a signal (refused once while not Idle()), unused for long enough, or unmounted from
// outside. Checks every 100 ms.
void RamDirServeUntilStopped(RamDirServer& server, const RamDirServeOptions& options);

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_RAM_DIR_SERVER_H_
