// A running libvirt domain into a checkpoint (libvirt_checkpoint.h).
#include <libvirt/libvirt.h>

#include <chrono>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "snapshot_instant.h"
#include "halite/libvirt/domain_xml.h"
#include "halite/libvirt/libvirt_checkpoint.h"
#include "halite/libvirt/libvirt_qmp.h"

namespace halite::libvirt {
namespace {

using Clock = std::chrono::steady_clock;

std::span<const uint8_t> Bytes(const std::string& s) {
  return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

Result<std::string> MigratableXml(const Domain& domain) {
  char* xml = virDomainGetXMLDesc(domain.get(), VIR_DOMAIN_XML_MIGRATABLE | VIR_DOMAIN_XML_SECURE);
  if (xml == nullptr) return LastError("libvirt: the XML of domain " + domain.name());
  std::string out = xml;
  free(xml);
  return out;
}

}  // namespace

Result<LibvirtSaveOptions::Then> ParseLibvirtSaveThen(std::string_view name) {
  if (name == "cont") return LibvirtSaveOptions::Then::kContinue;
  if (name == "stop") return LibvirtSaveOptions::Then::kStop;
  if (name == "destroy") return LibvirtSaveOptions::Then::kDestroy;
  return Status::InvalidArgument("expected cont, stop or destroy, got \"" + std::string(name) + "\"");
}

Result<LibvirtSaveResult> SaveLibvirtDomain(const Connection& connection, const std::string& name,
                                            const std::string& path, LibvirtSaveOptions options) {
  HLT_ASSIGN_OR_RETURN(Domain domain, connection.LookupDomain(name));
  int state = 0, reason = 0;
  if (virDomainGetState(domain.get(), &state, &reason, 0) < 0) return LastError("libvirt: state of domain " + name);
  if (state != VIR_DOMAIN_RUNNING && state != VIR_DOMAIN_PAUSED) {
    return Status::InvalidArgument("domain " + name + " is not running: only a running (or paused) domain is saved");
  }
  HLT_ASSIGN_OR_RETURN(std::string xml_text, MigratableXml(domain));
  HLT_ASSIGN_OR_RETURN(DomainXml xml, DomainXml::Parse(xml_text, "domain " + name));
  HLT_ASSIGN_OR_RETURN(std::vector<WritableDisk> disks, xml.WritableDisks());
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<LibvirtQmpClient> qmp, LibvirtQmpClient::Open(connection, domain));

  LibvirtSaveResult result;
  result.domain = name;
  // Disks, NVRAM and TPM state are taken at the saved instant with the memory (snapshot_instant.h): the overlays
  // the domain goes on to are made now, before any pause.
  const std::string tag = fmt::format("hlt-{}", std::time(nullptr));
  HLT_ASSIGN_OR_RETURN(DomainSnapshotInstant instant, DomainSnapshotInstant::Prepare(domain, xml, disks, tag));
  // The guest is paused and resumed through libvirt, so that libvirt knows (the access window's samples, the
  // saved instant of a live save, the stopped-guest save).
  const bool was_running = state == VIR_DOMAIN_RUNNING;
  Clock::time_point paused_at = Clock::now();
  options.qemu.pause_guest = [&]() -> Status {
    if (virDomainSuspend(domain.get()) < 0) return LastError("libvirt: pausing domain " + name);
    paused_at = Clock::now();
    return Status::Ok();
  };
  options.qemu.resume_guest = [&]() -> Status {
    if (virDomainResume(domain.get()) == 0) return Status::Ok();
    Status s = LastError("libvirt: resuming domain " + name);
    // QEMU 7.2's background snapshot starts the vCPUs itself once it has captured the guest, and libvirt has seen
    // them start (QEMU's RESUME event): then there is nothing left to resume.
    int now = 0, why = 0;
    if (virDomainGetState(domain.get(), &now, &why, 0) == 0 && now == VIR_DOMAIN_RUNNING) return Status::Ok();
    return s;
  };
  options.qemu.then = options.qemu.live && options.then == LibvirtSaveOptions::Then::kContinue
                          ? qemu::SaveOptions::Then::kContinue
                          : qemu::SaveOptions::Then::kLeaveStopped;
  options.qemu.at_snapshot_instant = [&] { return instant.Capture(); };
  options.qemu.block_content_at_instant = [&](const std::string& block, uint64_t used_length) {
    return instant.NvramForBlock(block, used_length);
  };
  options.qemu.before_finish = [&, user = std::move(options.qemu.before_finish)](CheckpointWriter& w) -> Status {
    if (user) HLT_RETURN_IF_ERROR(user(w));
    HLT_RETURN_IF_ERROR(instant.AddToCheckpoint(w, &result));
    return w.AddBlob(kDomainXmlBlobName, Bytes(xml_text));
  };
  auto saved = qemu::SaveQemuToCheckpoint(*qmp, path, std::move(options.qemu));
  if (!saved) {
    // The guest runs again as it did before (a live save's is running already), then goes back onto its disks.
    const bool live = options.qemu.live;
    if (was_running && !live) (void)virDomainResume(domain.get());
    Status error = saved.error().WithContext("saving domain " + name);
    if (Status undo = instant.Undo(); !undo.ok()) {
      return Status(error.code(), error.message() + "; undoing its disk snapshot: " + undo.message());
    }
    return error;
  }
  result.qemu = std::move(*saved);
  switch (options.then) {
    case LibvirtSaveOptions::Then::kContinue:
      if (was_running && !result.qemu.live) {
        if (virDomainResume(domain.get()) < 0) return LastError("libvirt: resuming domain " + name);
        result.guest_paused_seconds = std::chrono::duration<double>(Clock::now() - paused_at).count();
      }
      break;
    case LibvirtSaveOptions::Then::kStop:  // paused already (a live save's QEMU stop: libvirt saw the event)
      break;
    case LibvirtSaveOptions::Then::kDestroy:
      if (virDomainDestroy(domain.get()) < 0) return LastError("libvirt: destroying domain " + name);
      break;
  }
  return result;
}

}  // namespace halite::libvirt
