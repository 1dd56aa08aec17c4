// PageTableHintReportText (moved here from tools/hlt-save/va_report.cc, unchanged).
#include <fmt/printf.h>

#include "halite/x86_guest_hints.h"

namespace halite::x86 {

std::string PageTableHintReportText(const x86::PageTableHintReport& va) {
  std::string out;
  if (!va.skipped.empty()) {
    out += fmt::sprintf("  va walk          skipped: %s\n", va.skipped.c_str());
    return out;
  }
  out += fmt::sprintf(
      "  va walk          %u vCPUs, %u roots (+%u found sharing the kernel half, %u PTI kernel copies; "
      "skipped as aliases of the kernel half: %u roots, %llu entries), "
      "%llu table pages (%llu missing), %llu runs (%llu hints)%s; %llu possible roots noted; %.3f s\n",
      va.vcpus, va.cpu_roots, va.scan_roots, va.pti_kernel_copies, va.kernel_alias_roots,
      (unsigned long long)va.kernel_alias_entries, (unsigned long long)va.table_pages,
      (unsigned long long)va.missing_tables, (unsigned long long)va.runs, (unsigned long long)va.hint_runs,
      va.truncated ? ", TRUNCATED by a limit" : "", (unsigned long long)va.candidates, va.seconds);
  out += fmt::sprintf(
      "  va coverage      %.1f%% of non-zero pages (%llu of %llu) are mapped by a walked address space; "
      "%.1f%% (%llu) without the kernel's 2 MiB/1 GiB mappings\n",
      100.0 * va.coverage(), (unsigned long long)va.mapped_nonzero_pages, (unsigned long long)va.nonzero_pages,
      100.0 * va.small_coverage(), (unsigned long long)va.mapped_nonzero_small_pages);
  if (!va.notes.empty()) out += fmt::sprintf("  va notes         %s\n", va.notes.c_str());
  return out;
}

}  // namespace halite::x86
