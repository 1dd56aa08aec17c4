// A running libvirt domain into a checkpoint (libvirt_checkpoint.h).
#include <libvirt/libvirt.h>

#include <chrono>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "domain_state_files.h"
#include "frozen_disks.h"
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
  if (options.qemu.live && !disks.empty()) {
    return Status::Unsupported("domain " + name + " has writable disks (" + disks.front().target +
                               "): a live save of them is not supported yet (its disk snapshot would not match the "
                               "memory); save it stopped (without --live)");
  }
  HLT_ASSIGN_OR_RETURN(std::unique_ptr<LibvirtQmpClient> qmp, LibvirtQmpClient::Open(connection, domain));

  LibvirtSaveResult result;
  result.domain = name;
  // The guest is paused and resumed through libvirt, so that libvirt knows (the access window's samples, the
  // stopped-guest save); the QEMU save leaves it paused, and the disks are frozen while it is.
  const bool was_running = state == VIR_DOMAIN_RUNNING;
  Clock::time_point paused_at = Clock::now();
  options.qemu.pause_guest = [&]() -> Status {
    if (virDomainSuspend(domain.get()) < 0) return LastError("libvirt: pausing domain " + name);
    paused_at = Clock::now();
    return Status::Ok();
  };
  options.qemu.resume_guest = [&]() -> Status {
    if (virDomainResume(domain.get()) < 0) return LastError("libvirt: resuming domain " + name);
    return Status::Ok();
  };
  auto resume = [&] {
    if (was_running && !options.qemu.live) (void)virDomainResume(domain.get());
  };
  options.qemu.then = options.qemu.live && options.then == LibvirtSaveOptions::Then::kContinue
                          ? qemu::SaveOptions::Then::kContinue
                          : qemu::SaveOptions::Then::kLeaveStopped;
  const std::string tag = fmt::format("hlt-{}", std::time(nullptr));
  options.qemu.before_finish = [&, user = std::move(options.qemu.before_finish)](CheckpointWriter& w) -> Status {
    if (user) HLT_RETURN_IF_ERROR(user(w));
    // The memory is in; the guest is still paused: freeze the disks, and read the NVRAM and the TPM's state, as
    // of now.
    HLT_RETURN_IF_ERROR(FreezeDisks(domain, xml, disks, tag, &result.disks, &result.overlays));
    HLT_ASSIGN_OR_RETURN(DomainStateFiles state, CaptureDomainStateFiles(xml, xml.uuid()));
    HLT_RETURN_IF_ERROR(AddDomainStateBlobs(w, state));
    result.nvram = state.nvram_path;
    result.nvram_bytes = state.nvram.size();
    result.tpm_state_dir = state.tpm_dir;
    for (const StateFile& f : state.tpm_files) result.tpm_state_files.push_back(f.name);
    HLT_RETURN_IF_ERROR(w.AddBlob(kDomainXmlBlobName, Bytes(xml_text)));
    return w.AddBlob(kDisksBlobName, Bytes(EncodeFrozenDisks(result.disks)));
  };
  auto saved = qemu::SaveQemuToCheckpoint(*qmp, path, std::move(options.qemu));
  if (!saved) {
    resume();
    return saved.error().WithContext("saving domain " + name);
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
