// The reports of the Xen tools (moved here from tools/hlt-save/save_xen.cc and tools/hlt-restore/restore_xen.cc,
// unchanged: the tools' output stays byte for byte).
#include "halite/xen/xen_report.h"

#include <fmt/printf.h>

#include "halite/stats_text.h"
#include "halite/x86_guest_hints.h"

namespace halite::xen {

std::string XenSaveReportText(const SaveResult& r, const std::string& path, bool va_walk) {
  std::string out = WriteSummaryText(r.summary, path);
  const auto& im = r.import;
  out += fmt::sprintf("  xen stream       %s, %llu batches, %llu data pages, %llu XTAB, %llu XALLOC, %llu resent; "
                      "%.3f s to import\n",
                      StreamFormatName(r.format), (unsigned long long)im.batches, (unsigned long long)im.data_pages,
                      (unsigned long long)im.xtab_entries, (unsigned long long)im.xalloc_entries,
                      (unsigned long long)im.resent_entries, r.import_seconds);
  out += fmt::sprintf("  xen physmap      %llu pages: %llu with data, %llu zero, %llu holes; state blob %zu bytes\n",
                      (unsigned long long)r.region_pages, (unsigned long long)r.data_pages,
                      (unsigned long long)r.zero_pages, (unsigned long long)r.hole_pages, r.state_blob_bytes);
  out += va_walk ? x86::PageTableHintReportText(r.va) : std::string("  va walk          off (--no-va)\n");
  return out;
}

std::string XenExportReportText(const std::string& checkpoint, const std::string& out, const ExportStats& stats) {
  return fmt::sprintf("exported %s -> %s: %llu bytes, %llu data pages, %llu block reads (%llu distinct blocks), "
                      "%.3f s\n",
                      checkpoint, out == "-" ? "stdout" : out, (unsigned long long)stats.stream_bytes,
                      (unsigned long long)stats.data_pages, (unsigned long long)stats.blocks_read,
                      (unsigned long long)stats.distinct_blocks, stats.seconds);
}

}  // namespace halite::xen
