#include "hlt-save/va_report.h"

#include <cstdio>
#include <cstdlib>

namespace halite::save {

void PrintVaReport(const x86::PageTableHintReport& va) {
  if (!va.skipped.empty()) {
    std::printf("  va walk          skipped: %s\n", va.skipped.c_str());
    return;
  }
  std::printf(
      "  va walk          %u vCPUs, %u roots (+%u found sharing the kernel half, %u PTI kernel copies; "
      "skipped as aliases of the kernel half: %u roots, %llu entries), "
      "%llu table pages (%llu missing), %llu runs (%llu hints)%s; %llu possible roots noted; %.3f s\n",
      va.vcpus, va.cpu_roots, va.scan_roots, va.pti_kernel_copies, va.kernel_alias_roots,
      (unsigned long long)va.kernel_alias_entries, (unsigned long long)va.table_pages,
      (unsigned long long)va.missing_tables, (unsigned long long)va.runs, (unsigned long long)va.hint_runs,
      va.truncated ? ", TRUNCATED by a limit" : "", (unsigned long long)va.candidates, va.seconds);
  std::printf(
      "  va coverage      %.1f%% of non-zero pages (%llu of %llu) are mapped by a walked address space; "
      "%.1f%% (%llu) without the kernel's 2 MiB/1 GiB mappings\n",
      100.0 * va.coverage(), (unsigned long long)va.mapped_nonzero_pages, (unsigned long long)va.nonzero_pages,
      100.0 * va.small_coverage(), (unsigned long long)va.mapped_nonzero_small_pages);
  if (!va.notes.empty()) std::printf("  va notes         %s\n", va.notes.c_str());
}

void AddAccessWindowFlags(CLI::App& app, AccessWindowText* text) {
  app.add_option("--access-window", text->window);
  app.add_option("--access-interval", text->interval);
}

std::string ApplyAccessWindowFlags(const CLI::App& app, const AccessWindowText& t, qemu::AccessWindowOptions* window) {
  if (app.count("--access-window")) {
    char* end = nullptr;
    const double seconds = std::strtod(t.window.c_str(), &end);
    if (end == t.window.c_str() || *end != '\0' || !(seconds >= 0) || seconds > 3600) {
      return "--access-window: expected seconds from 0 to 3600, got \"" + t.window + "\"";
    }
    window->window_ms = int(seconds * 1000);
  }
  if (app.count("--access-interval")) {
    uint64_t ms = 0;
    if (!cli::ParseU64(t.interval, &ms) || ms < 1 || ms > 60000) {
      return "--access-interval: expected milliseconds from 1 to 60000, got \"" + t.interval + "\"";
    }
    window->interval_ms = int(ms);
  }
  return "";
}

void PrintAccessWindow(const qemu::CheckpointSaveResult& r) {
  const qemu::AccessWindowReport& w = r.access_window;
  if (w.samples == 0) {
    std::printf("  access window    skipped: %s\n", w.skipped.c_str());
    return;
  }
  std::printf(
      "  access window    %u samples in %.3f s (paused %.1f ms in all, at most %.1f ms), %u address spaces seen, "
      "%u measured; %llu pages touched, %llu given as the working set%s%s\n",
      w.samples, w.seconds, w.pause_total_ms, w.pause_max_ms, w.distinct_roots, w.measured_roots,
      (unsigned long long)w.accessed_pages, (unsigned long long)r.access_window_pages,
      w.skipped.empty() ? "" : "; stopped early: ", w.skipped.c_str());
}

}  // namespace halite::save
