// The few edits a restore makes to a saved libvirt domain XML, done with a real XML parser (libxml2):
// its name, UUID and MACs (a clone's identity), where its disks point, the VM generation ID, and the QEMU
// arguments libvirt passes through (`<qemu:commandline>`).
#ifndef HALITE_LIBVIRT_DOMAIN_XML_H_
#define HALITE_LIBVIRT_DOMAIN_XML_H_

#include <memory>
#include <string>
#include <vector>

#include "halite/status.h"

namespace halite::libvirt {

// A path a clone was given instead of the saved domain's: `what` names the element ("serial 0 log",
// "channel org.qemu.guest_agent.0 socket", "graphics vnc socket").
struct RenamedPath {
  std::string what;
  std::string from;
  std::string to;
};

// A disk the guest can write: its contents belong to the checkpoint.
struct WritableDisk {
  std::string target;  // "vda"
  std::string source;  // the image file
  std::string format;  // the driver type: "qcow2", "raw"
};

class DomainXml {
 public:
  // Errors: kCorrupt naming `what` when the text is not a <domain> document.
  static Result<DomainXml> Parse(const std::string& text, const std::string& what);
  DomainXml(DomainXml&&) noexcept;
  DomainXml& operator=(DomainXml&&) noexcept;
  ~DomainXml();

  std::string Format() const;

  std::string name() const;
  // The <domain type=...> attribute ("kvm", "qemu"): which of libvirt's QEMU flavours runs it.
  std::string type() const;
  void SetName(const std::string& name);
  std::string uuid() const;
  // Removes the <uuid>: libvirt gives the domain a new one.
  void DropUuid();
  // Removes every interface's <mac>: libvirt gives each a new address. Returns how many interfaces there are.
  size_t DropMacs();
  // Empties <genid>: libvirt gives the VM a new generation ID (QEMU's vmgenid device writes it into guest memory
  // after the load and notifies the guest). False, and nothing changed, when the domain has no <genid>: adding
  // the device would change the machine the saved state belongs to.
  bool RenewGenid();
  std::string genid() const;

  // Disks of device type "disk" backed by a file that the guest may write (not <readonly/>, not <shareable/>).
  // Disks on block devices or networks: kUnsupported naming the disk.
  Result<std::vector<WritableDisk>> WritableDisks() const;
  // Gives a clone its own path for every per-domain file libvirt or QEMU creates, writes, binds or locks by a
  // path the saved XML names: the files of file-backed character devices and their <log file=...> (serial,
  // console, channel, parallel, redirdev, smartcard, rng backends), the unix sockets QEMU listens on
  // (<source mode='bind' path=...>: guest agent channels among them), the VNC and SPICE unix sockets of
  // <graphics> (and fixed TCP ports become automatic ones). Each path becomes PATH.SUFFIX (a console that mirrors
  // a serial port gets the same new path as the port). Not here: NVRAM and TPM state, which need their contents
  // (SetNvramPath, the TPM state of the checkpoint). kInvalidArgument when a renamed socket path passes the 107
  // bytes a unix socket address holds.
  Result<std::vector<RenamedPath>> GiveClonePathsOfItsOwn(const std::string& suffix);
  // Sets <uuid> (a clone's new UUID, chosen by the caller so that files keyed by it can be made first).
  void SetUuid(const std::string& uuid);
  // The UEFI variable store (<os><nvram>PATH</nvram> or <nvram><source file=PATH/></nvram>), else "".
  std::string NvramPath() const;
  // Points <os><nvram> at `path` (kNotFound when the domain has no <nvram>).
  Status SetNvramPath(const std::string& path);
  // The version of an emulated TPM (<tpm><backend type='emulator' version=V>): "2.0", "1.2"; "" without one.
  std::string TpmEmulatorVersion() const;
  // True when the domain has a guest agent channel (<channel><target type='virtio'
  // name='org.qemu.guest_agent.0'/>).
  bool HasGuestAgentChannel() const;
  // Each <interface> element as XML text (what virDomainDetachDeviceFlags / AttachDeviceFlags take).
  std::vector<std::string> InterfaceElements() const;
  // The target of every <disk> (cdroms and read-only disks included).
  std::vector<std::string> DiskTargets() const;
  // Points disk `target` at `source` (format `format`). kNotFound when there is no such disk.
  Status SetDiskSource(const std::string& target, const std::string& source, const std::string& format);

  // The guest's RAM in bytes (<memory unit=...>, libvirt's units: b, KiB (default), MiB, GiB, TiB, and the SI
  // ones). kInvalidArgument naming the element when it is missing or unreadable.
  Result<uint64_t> MemoryBytes() const;
  // Backs guest RAM with a file libvirt names under its memory backing directory, mapped privately:
  // <memoryBacking><source type='file'/><access mode='private'/></memoryBacking>. kInvalidArgument when the
  // domain already has a <memoryBacking> (huge pages, memfd, ...) or NUMA cells (one backend per cell).
  Status SetPrivateFileMemoryBacking();
  // Removes a <memoryBacking> that is exactly what SetPrivateFileMemoryBacking writes: a domain restored with
  // --memory shared and saved again carries it, and its next restore decides its memory afresh (a copy restore
  // must not ask libvirt for a file nobody registered). True when it was there and is gone; any other
  // <memoryBacking> stays.
  bool DropPrivateFileMemoryBacking();

  // Appends QEMU arguments through libvirt's qemu namespace (<qemu:commandline><qemu:arg value=.../>).
  void AddQemuArgs(const std::vector<std::string>& args);
  // Removes the argument pairs an earlier restore added (`-incoming defer`, `-qmp unix:DIR/hlt-libvirt-XXXXXX/
  // qmp.sock,server=on,wait=off`): a domain restored by hlt-restore and saved again carries them, and its socket
  // directory is long gone. Returns how many pairs went; other arguments stay.
  int DropRestoreQemuArgs();

 private:
  struct Doc;
  explicit DomainXml(std::unique_ptr<Doc> doc);
  std::unique_ptr<Doc> doc_;
};

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_DOMAIN_XML_H_
