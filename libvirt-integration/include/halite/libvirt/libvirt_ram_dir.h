// hlt-restore libvirt --memory shared: libvirt's memory backing directory (RAMDIR) served by the RAM directory
// server (halite/image_server/ram_dir_server.h), and the registration that makes a domain's pc.ram resolve to a
// checkpoint image.
#ifndef HALITE_LIBVIRT_LIBVIRT_RAM_DIR_H_
#define HALITE_LIBVIRT_LIBVIRT_RAM_DIR_H_

#include <cstdint>
#include <string>

#include "halite/status.h"

namespace halite::libvirt {

// Where libvirt puts the domain directories of file-backed guest RAM, for a connection URI (empty: libvirt's
// default for this user):
//   qemu:///embed?root=R   R/lib/qemu/ram
//   qemu:///system         /var/lib/libvirt/qemu/ram
//   qemu:///session        $XDG_CONFIG_HOME/libvirt/qemu/ram (~/.config/...)
// or, when the driver's qemu.conf (R/etc/qemu.conf, /etc/libvirt/qemu.conf, $XDG_CONFIG_HOME/libvirt/qemu.conf)
// sets memory_backing_dir = "D", D/libvirt/qemu. kInvalidArgument for a URI naming another host (the directory
// must be on this one) or a driver other than QEMU's.
Result<std::string> DefaultLibvirtRamDir(const std::string& uri);

// A domain's registration with the RAM directory server at ram_dir: while it exists, QEMU's open of
// RAMDIR/<id>-<short name>/pc.ram follows a symlink to `image`. Removed by Remove() or the destructor.
class RamDirRegistration {
 public:
  // Finds the server mounted at ram_dir or starts one (`SERVER serve-ram-dir RAMDIR --exit-when-unused 30`,
  // detached; its output in RAMDIR.halite.log), under a lock (RAMDIR.halite.lock) that the server's own idle
  // exit takes too, then registers. Errors: kInvalidArgument when ram_dir holds files of domains started without
  // the server (their RAM would vanish under the mount), when the short name is registered to another image
  // (two names alike in their first 20 bytes: give --name), kIoError when the server does not come up.
  static Result<RamDirRegistration> Register(const std::string& server, const std::string& ram_dir,
                                             const std::string& short_name, const std::string& image);
  RamDirRegistration() = default;
  RamDirRegistration(RamDirRegistration&& o) noexcept : path_(std::move(o.path_)), started_(o.started_) {
    o.path_.clear();
  }
  RamDirRegistration& operator=(RamDirRegistration&& o) noexcept;
  ~RamDirRegistration() { Remove(); }

  void Remove();
  bool started_server() const { return started_; }

 private:
  std::string path_;  // RAMDIR/.halite/<short name>
  bool started_ = false;
};

// Checks in /proc/PID/maps that QEMU maps `image` privately and writable (rw-p) over exactly `size` bytes: its
// guest RAM is the checkpoint's. Waits up to timeout_ms for the mapping. kInvalidArgument naming what it found.
Status CheckQemuMapsImage(int pid, const std::string& image, uint64_t size, int timeout_ms = 10000);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_RAM_DIR_H_
