// A checkpoint back into a libvirt domain, as itself or as a clone (libvirt_checkpoint.h).
#include <dirent.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <cstdlib>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "domain_state_files.h"
#include "frozen_disks.h"
#include "qemu_process_lookup.h"
#include "qemu_process_owner.h"
#include "halite/checkpoint_location.h"
#include "halite/libvirt/domain_xml.h"
#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/qemu/qemu_migration_blocker.h"
#include "halite/restore_order_warmup.h"

namespace halite::libvirt {
namespace {

using Clock = std::chrono::steady_clock;

// Times consecutive steps of a restore into LibvirtRestoreResult::Phases: each Done() records the time since the
// previous one (or since construction).
class PhaseClock {
 public:
  explicit PhaseClock(LibvirtRestoreResult::Phases* phases) : phases_(phases) {}
  void Done(uint64_t LibvirtRestoreResult::Phases::*field) {
    const auto now = Clock::now();
    phases_->*field = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(now - last_).count());
    last_ = now;
  }

 private:
  LibvirtRestoreResult::Phases* phases_;
  Clock::time_point last_ = Clock::now();
};

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

// A random (version 4) UUID: a clone's, chosen here so that the TPM state libvirt keys by it is in place first.
std::string RandomUuid() {
  std::random_device rd;
  uint8_t b[16];
  for (int i = 0; i < 16; i += 4) {
    const uint32_t r = rd();
    for (int k = 0; k < 4; ++k) b[i + k] = uint8_t(r >> (8 * k));
  }
  b[6] = uint8_t((b[6] & 0x0f) | 0x40);
  b[8] = uint8_t((b[8] & 0x3f) | 0x80);
  std::string s;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += fmt::format("{:02x}", b[i]);
  }
  return s;
}

// What a failed restore must take back: the domain it started, the files it made (disk overlays, the NVRAM copy),
// the TPM state directory it made, its socket directory.
struct Undo {
  Domain domain;
  std::vector<std::string> overlays;
  std::vector<std::string> files;  // the NVRAM copy
  std::string tpm_dir;                // STORAGE/UUID, when this restore created it
  std::string runtime_dir;
  bool keep_domain = false;  // the guest ran: it is the user's now
  ~Undo() {
    if (domain && !keep_domain) (void)virDomainDestroy(domain.get());
    if (!keep_domain) {
      for (const auto& o : overlays) unlink(o.c_str());
      for (const auto& f : files) unlink(f.c_str());
      std::error_code ec;
      if (!tpm_dir.empty()) std::filesystem::remove_all(tpm_dir, ec);
    }
    if (!runtime_dir.empty()) {
      unlink((runtime_dir + kPrivateQmpSocketSuffix).c_str());
      rmdir(runtime_dir.c_str());
    }
  }
};

// The directory of a restore's own files: given, or the checkpoint's; created when missing (a broker names one
// per pool or per clone).
Result<std::string> RestoreFilesDir(const std::string& given, const std::string& checkpoint_path) {
  if (given.empty() && IsObjectStoreUri(checkpoint_path)) {
    return Status::InvalidArgument(checkpoint_path +
                                   " is on an object store: give a directory for the restore's disk overlays and "
                                   "NVRAM copy (--disk-dir DIR)");
  }
  const std::string dir = given.empty() ? DirectoryOf(checkpoint_path) : given;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(dir + ": cannot create the directory for the restore's disk overlays", ec.value());
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::InvalidArgument(dir + ": not a directory (the directory for the restore's disk overlays)");
  }
  return dir;
}

// The saved UEFI variables as this restore's own file, DIR/NAME_VARS.fd, handed to QEMU's user.
Status PlaceNvram(DomainXml& xml, const DomainStateFiles& state, const std::string& dir, const std::string& name,
                  const std::optional<ProcessOwner>& owner, Undo* undo, LibvirtRestoreResult* result) {
  if (xml.NvramPath().empty()) return Status::Ok();
  const std::string path = dir + "/" + name + "_VARS.fd";
  if (state.nvram_path.empty()) {
    // A checkpoint saved before NVRAM was kept: a clone still needs a file of its own (QEMU locks it), which
    // libvirt fills from the firmware's template.
    return xml.SetNvramPath(path);
  }
  HLT_RETURN_IF_ERROR(WriteNewFile(path, state.nvram));
  undo->files.push_back(path);
  if (owner) HLT_RETURN_IF_ERROR(GiveToOwner(path, *owner));
  result->nvram = path;
  return xml.SetNvramPath(path);
}

// The saved TPM state under the domain's UUID in libvirt's swtpm storage, so that its swtpm starts on it.
Status PlaceTpmState(const DomainXml& xml, const DomainStateFiles& state, const std::string& uuid, bool clone,
                     const std::string& storage_dir, Undo* undo, LibvirtRestoreResult* result) {
  const std::string version = xml.TpmEmulatorVersion();
  if (version.empty()) return Status::Ok();
  if (state.tpm_files.empty()) {
    result->tpm_note = "the checkpoint holds no TPM state files (saved by an older hlt-save): libvirt makes the "
                       "TPM afresh, and only what QEMU's device state carries comes back";
    return Status::Ok();
  }
  if (storage_dir.empty()) {
    return Status::InvalidArgument("the domain has an emulated TPM: libvirt's swtpm storage directory is needed to "
                                   "put its saved state in place (--swtpm-dir)");
  }
  const std::string path = TpmStatePath(storage_dir, uuid, version);
  const std::string uuid_dir = storage_dir + "/" + uuid;
  struct stat st;
  const bool existed = stat(uuid_dir.c_str(), &st) == 0;
  if (existed && clone) return Status::InvalidArgument(uuid_dir + ": exists already (TPM state of the clone's UUID)");
  if (!existed) undo->tpm_dir = uuid_dir;
  HLT_RETURN_IF_ERROR(InstallTpmState(state.tpm_files, path));
  result->tpm_state = path;
  return Status::Ok();
}

// Sets the guest's clock to the host's through the guest agent (virDomainSetTime), retrying until the agent
// answers or the time is up; reports rather than fails.
void SyncGuestTime(const Domain& domain, bool has_agent, int timeout_ms, LibvirtRestoreResult::TimeSync* out) {
  out->attempted = true;
  if (!has_agent) {
    out->note = "the domain has no guest agent channel (org.qemu.guest_agent.0): its clock was not set";
    return;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last_error;
  for (;;) {
    long long guest_s = 0;
    unsigned int guest_ns = 0;
    // The guest's clock before, for the report (an agent without guest-get-time still gets its clock set).
    const bool read = virDomainGetTime(domain.get(), &guest_s, &guest_ns, 0) == 0;
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    out->read_before = read;
    if (read) out->guest_behind_s = double(now.tv_sec - guest_s) + (double(now.tv_nsec) - double(guest_ns)) / 1e9;
    clock_gettime(CLOCK_REALTIME, &now);
    if (virDomainSetTime(domain.get(), now.tv_sec, unsigned(now.tv_nsec), 0) == 0) {
      out->synced = true;
      return;
    }
    const char* said = virGetLastErrorMessage();
    last_error = said ? said : "no message";
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  out->note = fmt::format("the guest agent did not set the clock within {} ms ({})", timeout_ms, last_error);
}

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

// Each disk's overlay and the NVRAM copy in `dir`, handed to QEMU's user when we are root.
Status PrepareRestoreFiles(const Connection& connection, const std::vector<FrozenDisk>& disks,
                           const DomainStateFiles& state, const std::string& dir, const std::string& name,
                           DomainXml& xml, Undo* undo, LibvirtRestoreResult* result) {
  std::string capabilities;
  if (geteuid() == 0) {
    char* caps = virConnectGetCapabilities(connection.get());
    if (caps == nullptr) return LastError("libvirt: the host's capabilities (who QEMU runs as)");
    capabilities = caps;
    free(caps);
  }
  // Made by root, written by QEMU: hand it over. (Unprivileged, we are the session's user and QEMU's, or libvirt's
  // dynamic ownership relabels it; either way there is nothing we could do.)
  auto owner_of = [&](const std::string& like) -> Result<std::optional<ProcessOwner>> {
    if (capabilities.empty()) return std::optional<ProcessOwner>();
    HLT_ASSIGN_OR_RETURN(ProcessOwner owner, ExpectedQemuOwner(capabilities, xml.type(), like));
    return std::optional<ProcessOwner>(owner);
  };
  for (const auto& d : disks) {
    const std::string overlay = dir + "/" + name + "-" + d.target + ".qcow2";
    HLT_RETURN_IF_ERROR(CreateOverlay(d.path, d.format, overlay));
    undo->overlays.push_back(overlay);
    HLT_ASSIGN_OR_RETURN(std::optional<ProcessOwner> owner, owner_of(d.path));
    if (owner) HLT_RETURN_IF_ERROR(GiveToOwner(overlay, *owner));
    HLT_RETURN_IF_ERROR(xml.SetDiskSource(d.target, overlay, "qcow2"));
  }
  // The NVRAM copy goes to QEMU's user as the overlays do (without a DAC label: the owner of the saved images).
  HLT_ASSIGN_OR_RETURN(std::optional<ProcessOwner> owner, owner_of(disks.empty() ? dir : disks.front().path));
  return PlaceNvram(xml, state, dir, name, owner, undo, result);
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
  PhaseClock phase(&result->phases);
  // Stopped before the memory restore begins (below), or on any early return by its destructor.
  RestoreOrderWarmup warmup;
  warmup.Start(reader, options.warm_restore_order_bytes, options.warm_decode);
  HLT_ASSIGN_OR_RETURN(std::string xml_text, ReadTextBlob(reader, kDomainXmlBlobName));
  HLT_ASSIGN_OR_RETURN(DomainXml xml, DomainXml::Parse(xml_text, reader.name() + ": blob " + kDomainXmlBlobName));
  HLT_ASSIGN_OR_RETURN(std::vector<FrozenDisk> disks, ReadFrozenDisks(reader));
  HLT_RETURN_IF_ERROR(qemu::ReadSavedVmState(reader).status());
  HLT_ASSIGN_OR_RETURN(DomainStateFiles state, ReadDomainStateBlobs(reader));
  phase.Done(&LibvirtRestoreResult::Phases::read_blobs_us);
  HLT_RETURN_IF_ERROR(VerifyFrozenDisks(disks));
  phase.Done(&LibvirtRestoreResult::Phases::verify_disks_us);

  std::string name = options.name;
  if (name.empty()) name = options.clone ? xml.name() + "-clone-" + RandomHex8() : xml.name();
  if (connection.HasDomain(name)) {
    return Status::InvalidArgument("a domain named " + name + " exists already (give another with --name)");
  }
  xml.SetName(name);
  std::string domain_uuid = xml.uuid();
  if (options.clone) {
    domain_uuid = RandomUuid();
    xml.SetUuid(domain_uuid);
    xml.DropMacs();
    HLT_ASSIGN_OR_RETURN(result->renamed, xml.GiveClonePathsOfItsOwn(name));
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
  if (!disks.empty() || !xml.NvramPath().empty()) {
    HLT_ASSIGN_OR_RETURN(const std::string dir, RestoreFilesDir(options.disk_dir, checkpoint_path));
    HLT_RETURN_IF_ERROR(PrepareRestoreFiles(connection, disks, state, dir, name, xml, &undo, result));
  }
  HLT_RETURN_IF_ERROR(
      PlaceTpmState(xml, state, domain_uuid, options.clone, options.swtpm_storage_dir, &undo, result));

  // A QMP socket of our own: QEMU must be told to listen for the migration before libvirt lets anyone use its
  // monitor (the domain is still "starting up"). QEMU may run as another user (libvirt-qemu): the socket goes
  // in the runtime directory itself (/tmp: open to it), named after a new scratch directory of this restore; it
  // is removed once the restore is done. Not inside that directory: the domain keeps these arguments in its live
  // XML, and a QEMU libvirt starts again from it (`virsh restore` of a `virsh save`) binds the socket anew, which
  // works only where the directory still exists.
  std::string runtime = (options.runtime_dir.empty() ? std::string("/tmp") : options.runtime_dir) + "/hlt-libvirt-XXXXXX";
  if (mkdtemp(runtime.data()) == nullptr) return Status::IoError(runtime + ": cannot create a directory", errno);
  undo.runtime_dir = runtime;
  const std::string qmp_path = runtime + kPrivateQmpSocketSuffix;
  if (qmp_path.find(',') != std::string::npos) {
    return Status::InvalidArgument(qmp_path + ": a QEMU socket path may not contain ','");
  }
  xml.DropRestoreQemuArgs();  // saved from a domain an earlier restore started
  xml.AddQemuArgs({"-incoming", "defer", "-qmp", "unix:" + qmp_path + ",server=on,wait=off"});

  if (options.before_start) HLT_RETURN_IF_ERROR(options.before_start(name));
  phase.Done(&LibvirtRestoreResult::Phases::prepare_files_us);
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
  phase.Done(&LibvirtRestoreResult::Phases::create_domain_us);
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
  phase.Done(&LibvirtRestoreResult::Phases::qemu_ready_us);
  // The memory restore reads for itself from here on; the warmup's batch in flight ends meanwhile.
  warmup.RequestStop();
  options.qemu.paused = options.paused;
  auto user_on_running = std::move(options.qemu.on_running);
  options.qemu.on_running = [&](uint64_t us) {
    undo.keep_domain = true;  // from here on the guest has run: never destroyed behind the user's back
    if (user_on_running) user_on_running(us);
  };
  Status s = qemu::RestoreCheckpointIntoQemu(reader, *qmp, options.qemu, &result->qemu);
  const WarmupStats warmed = warmup.Stop();
  result->phases.warm_blocks = warmed.blocks;
  result->phases.warm_stored_bytes = warmed.stored_bytes;
  result->phases.warm_from_cache = warmed.from_cache;
  if (!s.ok()) {
    return s.WithContext(undo.keep_domain ? "restoring domain " + name + " (it keeps running, its memory incomplete)"
                                          : "restoring domain " + name + " (destroyed)");
  }
  undo.keep_domain = true;
  HLT_RETURN_IF_ERROR(blocker.Remove());
  if (options.sync_time) {
    SyncGuestTime(undo.domain, xml.HasGuestAgentChannel(), options.sync_time_timeout_ms, &result->time_sync);
  }
  if (options.clone && options.replug_nics) {
    HLT_RETURN_IF_ERROR(ReplugInterfaces(undo.domain, options.replug_timeout_ms, &result->replugged));
  }
  return Status::Ok();
}

}  // namespace halite::libvirt
