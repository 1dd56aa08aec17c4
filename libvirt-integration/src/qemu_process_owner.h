// Which user a libvirt-started QEMU runs as, and what follows from it for a lazy restore.
//
// libvirt's system instance runs QEMU as an unprivileged user (Debian: libvirt-qemu), a session instance as the
// session's user, the embedded driver as whatever its qemu.conf says. Two things depend on it: a clone's disk
// overlay, which hlt-restore creates, must be writable by that user; and QEMU 7.2's postcopy opens userfaultfd
// itself, which an unprivileged process may only do with vm.unprivileged_userfaultfd=1.
#ifndef HALITE_LIBVIRT_QEMU_PROCESS_OWNER_H_
#define HALITE_LIBVIRT_QEMU_PROCESS_OWNER_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "halite/status.h"

namespace halite::libvirt {

struct ProcessOwner {
  uid_t uid = 0;
  gid_t gid = 0;
};

// The DAC label libvirt gives QEMU processes of this domain type ("kvm", "qemu"), from the host capabilities XML
// (<secmodel><model>dac</model><baselabel type='qemu'>+UID:+GID</baselabel>). None when libvirt labels nothing
// (a session instance: QEMU runs as the daemon's user). kCorrupt when the XML or the label cannot be read.
Result<std::optional<ProcessOwner>> DacOwnerFromCapabilities(const std::string& capabilities_xml,
                                                             const std::string& domain_type);

// Who will own files QEMU opens for this domain: the DAC label when libvirt has one; otherwise the owner of
// `fallback_path` (a session's QEMU runs as the user whose images it uses).
Result<ProcessOwner> ExpectedQemuOwner(const std::string& capabilities_xml, const std::string& domain_type,
                                       const std::string& fallback_path);

// Hands a file hlt-restore made to QEMU's user. Nothing to do when that is us; a non-root caller cannot give files
// away and gets kIoError (EPERM) naming the file and both users.
Status GiveToOwner(const std::string& path, const ProcessOwner& owner);

// True when this kernel lets only privileged processes open a userfaultfd (vm.unprivileged_userfaultfd = 0).
bool UnprivilegedUserfaultfdOff();

// The lazy restore's up-front check, once QEMU runs (its QMP socket, which QEMU created, tells its user): an
// unprivileged QEMU on a kernel that refuses it userfaultfd cannot take a postcopy stream. kUnsupported with the
// remedies; Ok otherwise.
Status CheckQemuCanUseUserfaultfd(const std::string& qmp_socket_path, const std::string& domain);

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_QEMU_PROCESS_OWNER_H_
