// A checkpoint back into a libvirt domain, as itself or as a clone (libvirt_checkpoint.h).
#include <dirent.h>
#include <libvirt/libvirt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "frozen_disks.h"
#include "qemu_process_lookup.h"
#include "qemu_process_owner.h"
#include "halite/libvirt/domain_xml.h"
#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/qemu/qemu_migration_blocker.h"

namespace halite::libvirt {
namespace {

using Clock = std::chrono::steady_clock;

Result<std::string> ReadTextBlob(const CheckpointReader& reader, const char* name) {
  bool present = false;
  for (const auto& b : reader.blobs()) present = present || b.name == name;
  if (!present) {
    return Status::InvalidArgument(reader.name() + ": not a checkpoint of a libvirt domain (no blob \"" + name +
                                   "\"; made with `hlt-save libvirt`?)");
  }
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, reader.ReadBlob(std::string_view(name)));
  return std::string(bytes.begin(), bytes.end());
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string RandomHex8() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

// What a failed restore must take back: the domain it started, the overlays it made, its socket directory.
struct Undo {
  Domain domain;
  std::vector<std::string> overlays;
  std::string runtime_dir;
  bool keep_domain = false;  // the guest ran: it is the user's now
  ~Undo() {
    if (domain && !keep_domain) {
      (void)virDomainDestroy(domain.get());
      for (const auto& o : overlays) unlink(o.c_str());
    }
    if (!runtime_dir.empty()) {
      unlink((runtime_dir + "/qmp.sock").c_str());
      rmdir(runtime_dir.c_str());
    }
  }
};

Result<std::string> LiveXml(const Domain& domain) {
  char* xml = virDomainGetXMLDesc(domain.get(), 0);
  if (xml == nullptr) return LastError("libvirt: the XML of domain " + domain.name());
  std::string out = xml;
  free(xml);
  return out;
}

// A clone's NICs carry new MACs in libvirt's definition and on QEMU's command line, but the migrated virtio-net
// state brought the saved MAC back, and the guest's driver keeps the one it read when it probed the NIC. Each NIC
// is unplugged (libvirt returns once QEMU asked the guest; the device goes when the guest lets go of it) and then
// plugged again with the same definition, which the guest probes afresh with the new MAC.
Status ReplugInterfaces(const Domain& domain, int timeout_ms, std::vector<std::string>* replugged) {
  HLT_ASSIGN_OR_RETURN(std::string live, LiveXml(domain));
  HLT_ASSIGN_OR_RETURN(DomainXml xml, DomainXml::Parse(live, "domain " + domain.name()));
  for (std::string nic : xml.InterfaceElements()) {
    const size_t m = nic.find("<mac address=\"");
    const std::string mac = m == std::string::npos ? "" : nic.substr(m + 14, 17);
    // libvirt names the device itself (its alias is not one a user may give back).
    const size_t a = nic.find("<alias ");
    if (a != std::string::npos) nic.erase(a, nic.find("/>", a) + 2 - a);
    if (virDomainDetachDeviceFlags(domain.get(), nic.c_str(), VIR_DOMAIN_AFFECT_LIVE) < 0) {
      return LastError("libvirt: unplugging NIC " + mac + " of clone " + domain.name());
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      HLT_ASSIGN_OR_RETURN(std::string now, LiveXml(domain));
      if (now.find(mac) == std::string::npos) break;
      if (Clock::now() > deadline) {
        return Status::IoError("clone " + domain.name() + ": the guest did not release NIC " + mac + " within " +
                               std::to_string(timeout_ms) + " ms (no ACPI PCI hotplug?); it keeps the saved MAC");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (virDomainAttachDeviceFlags(domain.get(), nic.c_str(), VIR_DOMAIN_AFFECT_LIVE) < 0) {
      return LastError("libvirt: plugging NIC " + mac + " of clone " + domain.name() + " again");
    }
    replugged->push_back(mac);
  }
  return Status::Ok();
}

// The QEMU whose command line listens on our private QMP socket: the one libvirt started for this restore.
Result<int> QemuPidBySocketArgument(const std::string& qmp_path) {
  const std::string want = "unix:" + qmp_path + ",";
  return FindProcessByArguments([&](const std::vector<std::string>& args) { return HasArgument(args, "", want); },
                                "-qmp " + want + "...");
}

}  // namespace

Result<std::vector<FrozenDisk>> ReadFrozenDisks(const CheckpointReader& reader) {
  HLT_ASSIGN_OR_RETURN(std::string text, ReadTextBlob(reader, kDisksBlobName));
  return DecodeFrozenDisks(text, reader.name() + ": blob " + kDisksBlobName);
}

Status VerifyFrozenDisks(const std::vector<FrozenDisk>& disks) {
  for (const auto& d : disks) {
    uint64_t size = 0;
    std::string hash;
    Status s = Fingerprint(d.path, &size, &hash);
    if (!s.ok()) {
      return Status::InvalidArgument("frozen disk " + d.target + " (" + d.path + ") is gone or unreadable: " +
                                     s.message());
    }
    if (size != d.size || hash != d.xxh3_128) {
      return Status::InvalidArgument(fmt::format(
          "frozen disk {} ({}) changed since the save: {} bytes, XXH3-128 {}; the checkpoint expects {} bytes, {}",
          d.target, d.path, size, hash, d.size, d.xxh3_128));
    }
  }
  return Status::Ok();
}

Status RestoreLibvirtDomain(const Connection& connection, const CheckpointReader& reader,
                            const std::string& checkpoint_path, LibvirtRestoreOptions options,
                            LibvirtRestoreResult* result) {
  const auto t0 = Clock::now();
  *result = LibvirtRestoreResult{};
  HLT_ASSIGN_OR_RETURN(std::string xml_text, ReadTextBlob(reader, kDomainXmlBlobName));
  HLT_ASSIGN_OR_RETURN(DomainXml xml, DomainXml::Parse(xml_text, reader.name() + ": blob " + kDomainXmlBlobName));
  HLT_ASSIGN_OR_RETURN(std::vector<FrozenDisk> disks, ReadFrozenDisks(reader));
  HLT_RETURN_IF_ERROR(qemu::ReadSavedVmState(reader).status());
  HLT_RETURN_IF_ERROR(VerifyFrozenDisks(disks));

  std::string name = options.name;
  if (name.empty()) name = options.clone ? xml.name() + "-clone-" + RandomHex8() : xml.name();
  if (connection.HasDomain(name)) {
    return Status::InvalidArgument("a domain named " + name + " exists already (give another with --name)");
  }
  xml.SetName(name);
  if (options.clone) {
    xml.DropUuid();
    xml.DropMacs();
    xml.SuffixCharDeviceFiles(name);
    result->had_genid = xml.RenewGenid();
  } else {
    result->had_genid = !xml.genid().empty();
  }

  xml.DropPrivateFileMemoryBacking();  // saved from a --memory shared restore: decided afresh below
  if (options.private_file_memory) {
    auto region = reader.FindRegion("pc.ram");
    HLT_ASSIGN_OR_RETURN(uint64_t memory, xml.MemoryBytes());
    if (!region || reader.regions()[*region].size != memory) {
      return Status::InvalidArgument(fmt::format(
          "{}: the domain's <memory> is {} bytes, the checkpoint's RAMBlock pc.ram {}: its RAM cannot be mapped "
          "from the checkpoint's image",
          reader.name(), memory, region ? std::to_string(reader.regions()[*region].size) : "is missing"));
    }
    HLT_RETURN_IF_ERROR(xml.SetPrivateFileMemoryBacking());
  }

  Undo undo;
  const std::string disk_dir = options.disk_dir.empty() ? DirectoryOf(checkpoint_path) : options.disk_dir;
  std::string capabilities;
  if (!disks.empty() && geteuid() == 0) {
    char* caps = virConnectGetCapabilities(connection.get());
    if (caps == nullptr) return LastError("libvirt: the host's capabilities (who QEMU runs as)");
    capabilities = caps;
    free(caps);
  }
  for (const auto& d : disks) {
    const std::string overlay = disk_dir + "/" + name + "-" + d.target + ".qcow2";
    HLT_RETURN_IF_ERROR(CreateOverlay(d.path, d.format, overlay));
    undo.overlays.push_back(overlay);
    if (!capabilities.empty()) {
      // Made by root, written by QEMU: hand it over. (Unprivileged, we are the session's user and QEMU's, or
      // libvirt's dynamic ownership relabels it; either way there is nothing we could do.)
      HLT_ASSIGN_OR_RETURN(ProcessOwner owner, ExpectedQemuOwner(capabilities, xml.type(), d.path));
      HLT_RETURN_IF_ERROR(GiveToOwner(overlay, owner));
    }
    HLT_RETURN_IF_ERROR(xml.SetDiskSource(d.target, overlay, "qcow2"));
  }

  // A QMP socket of our own: QEMU must be told to listen for the migration before libvirt lets anyone use its
  // monitor (the domain is still "starting up"). QEMU may run as another user (libvirt-qemu): the directory is
  // open to it; the socket is removed once the restore is done.
  std::string runtime = (options.runtime_dir.empty() ? std::string("/tmp") : options.runtime_dir) + "/hlt-libvirt-XXXXXX";
  if (mkdtemp(runtime.data()) == nullptr) return Status::IoError(runtime + ": cannot create a directory", errno);
  undo.runtime_dir = runtime;
  chmod(runtime.c_str(), 0777);
  const std::string qmp_path = runtime + "/qmp.sock";
  if (qmp_path.find(',') != std::string::npos) {
    return Status::InvalidArgument(qmp_path + ": a QEMU socket path may not contain ','");
  }
  xml.DropRestoreQemuArgs();  // saved from a domain an earlier restore started
  xml.AddQemuArgs({"-incoming", "defer", "-qmp", "unix:" + qmp_path + ",server=on,wait=off"});

  if (options.before_start) HLT_RETURN_IF_ERROR(options.before_start(name));
  const std::string final_xml = xml.Format();
  virDomainPtr created =
      virDomainCreateXML(connection.get(), final_xml.c_str(), options.paused ? VIR_DOMAIN_START_PAUSED : 0);
  if (created == nullptr) return LastError("libvirt: starting domain " + name);
  undo.domain = Domain(created);
  char uuid[VIR_UUID_STRING_BUFLEN] = {0};
  virDomainGetUUIDString(created, uuid);
  result->domain = name;
  result->uuid = uuid;
  result->overlays = undo.overlays;
  result->define_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  if (options.on_started) options.on_started(name, uuid);

  HLT_ASSIGN_OR_RETURN(std::unique_ptr<qemu::QmpClient> qmp, qemu::QmpClient::Connect(qmp_path, 30000));
  if (options.on_qemu_up) {
    HLT_ASSIGN_OR_RETURN(int pid, QemuPidBySocketArgument(qmp_path));
    HLT_RETURN_IF_ERROR(options.on_qemu_up(pid));  // Undo destroys the domain
  }
  qemu::MigrationBlocker blocker;  // destroyed before qmp, which it uses
  // Only a lazy restore serves pages after the guest runs: an eager one (--memory shared among them, whose RAM
  // QEMU maps itself) has sent everything before the guest starts, so a save or migration afterwards is QEMU's
  // own business and no userfaultfd is involved.
  if (options.qemu.lazy) {
    HLT_RETURN_IF_ERROR(CheckQemuCanUseUserfaultfd(qmp_path, name));  // Undo destroys the domain
    // Until every page is in, a save, a snapshot with memory or a migration is refused by QEMU at once.
    HLT_ASSIGN_OR_RETURN(blocker, qemu::MigrationBlocker::Install(*qmp, runtime));
  }
  options.qemu.paused = options.paused;
  auto user_on_running = std::move(options.qemu.on_running);
  options.qemu.on_running = [&](uint64_t us) {
    undo.keep_domain = true;  // from here on the guest has run: never destroyed behind the user's back
    if (user_on_running) user_on_running(us);
  };
  Status s = qemu::RestoreCheckpointIntoQemu(reader, *qmp, options.qemu, &result->qemu);
  if (!s.ok()) {
    return s.WithContext(undo.keep_domain ? "restoring domain " + name + " (it keeps running, its memory incomplete)"
                                          : "restoring domain " + name + " (destroyed)");
  }
  undo.keep_domain = true;
  HLT_RETURN_IF_ERROR(blocker.Remove());
  if (options.clone && options.replug_nics) {
    HLT_RETURN_IF_ERROR(ReplugInterfaces(undo.domain, options.replug_timeout_ms, &result->replugged));
  }
  return Status::Ok();
}

}  // namespace halite::libvirt
