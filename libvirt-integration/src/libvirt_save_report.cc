// LibvirtSaveReportText (moved here from tools/hlt-save/save_libvirt.cc, unchanged).
#include "halite/libvirt/libvirt_save_report.h"

#include <fmt/printf.h>

#include "halite/qemu/qemu_save_report.h"
#include "halite/stats_text.h"

namespace halite::libvirt {

std::string LibvirtSaveReportText(const LibvirtSaveResult& r, const std::string& uri, const std::string& path) {
  std::string text = WriteSummaryText(r.qemu.summary, path);
  const auto& st = r.qemu.save.stream;
  text += fmt::sprintf("  domain           %s (%s), %s save; stream %s in %.3f s\n", r.domain.c_str(),
              uri.c_str(), r.qemu.live ? "live" : "paused-guest", HumanBytes(st.bytes).c_str(),
              r.qemu.stream_seconds);
  if (r.guest_paused_seconds > 0) text += fmt::sprintf("  guest paused     %.3f s\n", r.guest_paused_seconds);
  if (const qemu::LivePauseReport& p = r.qemu.live_pause; p.paused) {
    text += fmt::sprintf("  guest paused     %.1f ms at the saved instant: suspend %.1f, disks and state files %.1f, QEMU "
                "capturing the guest %.1f, resume %.1f\n",
                p.total_ms, p.pause_ms, p.instant_ms, p.capture_ms, p.resume_ms);
    text += fmt::sprintf("                   vCPUs stopped %.1f ms (QEMU's STOP to RESUME events); QEMU's own account of "
                "its capture: setup %lld ms, downtime %lld ms\n",
                p.vcpus_stopped_ms, (long long)r.qemu.save.qemu_setup_ms, (long long)r.qemu.save.qemu_downtime_ms);
  }
  if (!r.qemu.live_note.empty()) text += fmt::sprintf("  not live         %s\n", r.qemu.live_note.c_str());
  text += qemu::ThpRegatherReportText(r.qemu.thp_regather);
  text += qemu::ParentImageText(r.qemu);
  for (size_t i = 0; i < r.disks.size(); ++i) {
    const auto& d = r.disks[i];
    text += fmt::sprintf("  disk %-11s frozen %s (%s, %s, XXH3-128 %s); the domain goes on on %s\n", d.target.c_str(),
                d.path.c_str(), d.format.c_str(), HumanBytes(d.size).c_str(), d.xxh3_128.c_str(),
                r.overlays[i].c_str());
  }
  if (r.disks.empty()) text += fmt::sprintf("  disks            none writable\n");
  if (!r.nvram.empty()) {
    std::string flash;
    for (const auto& b : r.qemu.blocks_from_instant) flash += (flash.empty() ? "" : ", ") + b;
    text += fmt::sprintf("  nvram            %s (%s) saved with the memory%s\n", r.nvram.c_str(),
                HumanBytes(r.nvram_bytes).c_str(),
                flash.empty() ? "" : (", also as QEMU's flash " + flash).c_str());
  }
  if (!r.tpm_state_dir.empty()) {
    std::string files;
    for (const auto& f : r.tpm_state_files) files += (files.empty() ? "" : ", ") + f;
    text += fmt::sprintf("  tpm              state of %s saved with the memory (%s)\n", r.tpm_state_dir.c_str(),
                files.empty() ? "no files" : files.c_str());
  }
  text += qemu::AccessWindowReportText(r.qemu);
  text += x86::PageTableHintReportText(r.qemu.va);
  return text;
}

}  // namespace halite::libvirt
