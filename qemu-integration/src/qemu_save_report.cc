// The reports of a save from QEMU (moved here from tools/hlt-save/save_qemu.cc, va_report.cc and
// parent_image.cc, unchanged: the tools' output stays byte for byte).
#include "halite/qemu/qemu_save_report.h"

#include <fmt/printf.h>

#include "halite/stats_text.h"

namespace halite::qemu {

std::string AccessWindowReportText(const CheckpointSaveResult& r) {
  std::string out;
  const AccessWindowReport& w = r.access_window;
  if (w.samples == 0) {
    out += fmt::sprintf("  access window    skipped: %s\n", w.skipped.c_str());
    return out;
  }
  out += fmt::sprintf(
      "  access window    %u samples in %.3f s (paused %.1f ms in all, at most %.1f ms), %u address spaces seen, "
      "%u measured; %llu pages touched, %llu given as the working set%s%s\n",
      w.samples, w.seconds, w.pause_total_ms, w.pause_max_ms, w.distinct_roots, w.measured_roots,
      (unsigned long long)w.accessed_pages, (unsigned long long)r.access_window_pages,
      w.skipped.empty() ? "" : "; stopped early: ", w.skipped.c_str());
  return out;
}

std::string ParentImageText(const CheckpointSaveResult& r) {
  std::string out;
  if (!r.parent_image.empty()) {
    out += fmt::sprintf("  parent's image   QEMU maps %s: %llu pages never written since (declared in the parent)\n",
                r.parent_image.c_str(), (unsigned long long)r.parent_image_unwritten_pages);
  } else if (!r.parent_image_note.empty()) {
    out += fmt::sprintf("  parent's image   not used: %s\n", r.parent_image_note.c_str());
  }
  return out;
}

std::string QemuSaveReportText(const CheckpointSaveResult& r, const std::string& path) {
  std::string text = WriteSummaryText(r.summary, path);
  const auto& st = r.save.stream;
  text += fmt::sprintf("  qemu             %s, %llu RAMBlocks, %s save; stream %s in %.3f s (%llu data pages, %llu zero)\n",
              r.machine_type.c_str(), (unsigned long long)r.blocks,
              r.live ? "live (background snapshot)" : "stopped-guest", HumanBytes(st.bytes).c_str(),
              r.stream_seconds, (unsigned long long)r.data_pages, (unsigned long long)r.zero_pages);
  if (r.live) {
    text += fmt::sprintf("  working set      %llu pages written by the guest during the save (out of QEMU's scan order)%s\n",
                (unsigned long long)r.save.out_of_order_pages.size(),
                r.access_trace_pages ? ", given as the access trace" : "");
  } else if (r.guest_stopped_seconds > 0) {
    text += fmt::sprintf("  guest stopped    %.3f s (stop to cont)\n", r.guest_stopped_seconds);
  }
  if (!r.live_note.empty()) text += fmt::sprintf("  not live         %s\n", r.live_note.c_str());
  text += ThpRegatherReportText(r.thp_regather);
  text += ParentImageText(r);
  text += fmt::sprintf("  state blob       %zu bytes (\"%s\")\n", r.state_blob_bytes, kQemuStateBlobName);
  text += AccessWindowReportText(r);
  text += x86::PageTableHintReportText(r.va);
  return text;
}

}  // namespace halite::qemu
