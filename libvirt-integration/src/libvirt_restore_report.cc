// RestoredDomainText (moved here from tools/hlt-restore/restore_libvirt.cc, unchanged).
#include "halite/libvirt/libvirt_restore_report.h"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/printf.h>

#include "halite/qemu/qemu_restore_report.h"

namespace halite::libvirt {
namespace {
double Ms(uint64_t us) { return double(us) / 1e3; }
}  // namespace

std::string PhasesText(const LibvirtRestoreResult::Phases& p) {
  return fmt::format("  before the call  libvirt opened {:.1f} ms, checkpoint opened {:.1f} ms, blobs read {:.1f} ms, "
                     "disks verified {:.1f} ms, files placed {:.1f} ms, domain created {:.1f} ms, QEMU ready {:.1f} ms; "
                     "meanwhile {} blocks of the restore order read ahead ({:.2f} MiB stored, {} from the block "
                     "cache)\n",
                     Ms(p.connect_us), Ms(p.open_checkpoint_us), Ms(p.read_blobs_us), Ms(p.verify_disks_us),
                     Ms(p.prepare_files_us), Ms(p.create_domain_us), Ms(p.qemu_ready_us), p.warm_blocks,
                     double(p.warm_stored_bytes) / (1 << 20), p.warm_from_cache);
}

std::string RestoredDomainText(const std::string& ckpt, bool clone, const LibvirtRestoreResult& res) {
  std::string out;
  out += fmt::sprintf("restored %s as domain %s (uuid %s)%s\n", ckpt.c_str(), res.domain.c_str(), res.uuid.c_str(),
              clone ? ", a clone" : "");
  out += fmt::sprintf("  libvirt          domain started (waiting for its memory) %.1f ms after the call\n", Ms(res.define_us));
  out += PhasesText(res.phases);
  for (const auto& o : res.overlays) out += fmt::sprintf("  disk overlay     %s\n", o.c_str());
  for (const auto& r : res.renamed) {
    out += fmt::sprintf("  own file         %s: %s (saved: %s)\n", r.what.c_str(), r.to.c_str(), r.from.c_str());
  }
  if (!res.nvram.empty()) {
    out += fmt::sprintf("  nvram            %s, a copy of the saved UEFI variables\n", res.nvram.c_str());
  }
  if (!res.tpm_state.empty()) {
    out += fmt::sprintf("  tpm              %s, a copy of the saved TPM state\n", res.tpm_state.c_str());
  }
  if (!res.tpm_note.empty()) out += fmt::sprintf("  note             tpm: %s\n", res.tpm_note.c_str());
  if (res.time_sync.synced && res.time_sync.read_before) {
    out += fmt::sprintf("  clock            set to the host's through the guest agent (it was %.3f s behind)\n",
                res.time_sync.guest_behind_s);
  } else if (res.time_sync.synced) {
    out += fmt::sprintf("  clock            set to the host's through the guest agent\n");
  } else if (res.time_sync.attempted) {
    out += fmt::sprintf("  note             clock not synced: %s\n", res.time_sync.note.c_str());
  }
  for (const auto& m : res.replugged) out += fmt::sprintf("  nic              %s unplugged and plugged again: the guest probes it with its new MAC\n", m.c_str());
  if (clone && !res.had_genid) {
    out += fmt::sprintf("  note             the saved domain has no <genid>: the clone's kernel is not told it was cloned "
                "(its RNG is not reseeded); add <genid/> to the domain before saving\n");
  }
  return out;
}

std::string RestoredDomainReportText(const std::string& ckpt, bool clone, const LibvirtRestoreResult& res,
                                     uint64_t tool_to_running_us) {
  return RestoredDomainText(ckpt, clone, res) + qemu::RestoreSummaryText(res.qemu, tool_to_running_us);
}

std::string DomainRunningText(const std::string& name, double ms, const std::string& detached_status_path) {
  std::string line = fmt::format("running {} {:.1f} ms after hlt-restore started\n", name, ms);
  if (!detached_status_path.empty()) {
    line += fmt::format("  the restore goes on detached (pid {}); its outcome: {} (its output: {}.log)\n", getpid(),
                        detached_status_path, detached_status_path);
  }
  return line;
}

std::string DomainResumedText(const std::string& domain, double ms) {
  return fmt::sprintf("guest resumed: domain %s gets its pages again %.1f ms after hlt-restore started\n", domain, ms);
}

std::string ResumedRestoreText(const std::string& domain, const LibvirtRestoreResult& res) {
  return fmt::sprintf("resumed the restore of domain %s: QEMU held %llu pages already\n", domain,
                      (unsigned long long)res.qemu.resume_present_pages) +
         qemu::RestoreSummaryText(res.qemu, 0);
}

}  // namespace halite::libvirt
