// Where a local libvirt QEMU driver keeps per-domain things, from its connection URI: what hlt-restore libvirt
// must put in place before libvirt starts a domain (the RAM directory of --memory shared, the TPM state).
#ifndef HALITE_LIBVIRT_LIBVIRT_DIRS_H_
#define HALITE_LIBVIRT_LIBVIRT_DIRS_H_

#include <string>

#include "halite/status.h"

namespace halite::libvirt {

struct LibvirtDriverDirs {
  std::string uri;            // the URI resolved (empty given: LIBVIRT_DEFAULT_URI, qemu:///system for root, else
                              // qemu:///session)
  std::string qemu_conf;      // the driver's qemu.conf
  std::string ram_dir;        // memory backing directory, before qemu.conf's memory_backing_dir
  std::string swtpm_storage;  // swtpm's state of a domain is SWTPM_STORAGE/UUID/tpm2
};

// For a URI of this host's QEMU driver (libvirt 9.0's paths):
//   qemu:///embed?root=R   R/etc/qemu.conf, R/lib/qemu/ram, R/lib/swtpm
//   qemu:///system         /etc/libvirt/qemu.conf, /var/lib/libvirt/qemu/ram, /var/lib/libvirt/swtpm
//   qemu:///session        $XDG_CONFIG_HOME/libvirt/ (~/.config/libvirt/): qemu.conf, qemu/ram, qemu/swtpm
// kInvalidArgument naming `needed_for` (the option that needs it) for a URI of another host or driver.
Result<LibvirtDriverDirs> LocalLibvirtDriverDirs(const std::string& uri, const std::string& needed_for);

// The value of `key = "..."` in a libvirt configuration file, else "".
std::string LibvirtConfValue(const std::string& path, const std::string& key);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_LIBVIRT_DIRS_H_
