// RegatherHugePages: process_madvise(MADV_COLLAPSE) over the 2 MiB ranges of QEMU's guest RAM that khugepaged's
// rule would collapse (see the header for why a live save does this).
#include "halite/qemu/qemu_thp_regather.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "halite/qemu/qemu_direct_placement.h"  // RamBlockHostAddress
#include "halite/qemu/qemu_ram_mapping.h"
#include "halite/qemu/qemu_stream_input.h"  // UniqueFd

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1 (include/uapi/asm-generic/mman-common.h)
#endif

namespace halite::qemu {

namespace {

constexpr uint64_t kPage = 4096;
const char* const kThpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled";
const char* const kMaxPtesNone = "/sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none";

// "always [madvise] never": the bracketed word. QEMU madvises its RAM MADV_HUGEPAGE, so both always and madvise
// give it huge pages.
std::string ThpMode() {
  std::ifstream in(kThpEnabled);
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close <= open ? "" : line.substr(open + 1, close - open - 1);
}

uint32_t MaxPtesNone() {
  std::ifstream in(kMaxPtesNone);
  unsigned long v = 511;  // the kernel's default
  if (!(in >> v) || v > kPagesPerHugePage - 1) v = 511;
  return uint32_t(v);
}

// One MADV_COLLAPSE of [address, address + 2 MiB). 0 or the errno.
int Collapse(int pidfd, uint64_t address) {
  iovec range{reinterpret_cast<void*>(address), kHugePageBytes};
  if (syscall(SYS_process_madvise, pidfd, &range, 1, MADV_COLLAPSE, 0u) >= 0) return 0;
  return errno;
}

// Collapses the worthy 2 MiB ranges of one RAM range; false (with report->skipped set) when the kernel refuses
// the call itself rather than a range.
bool RegatherRange(int pidfd, pid_t pid, const HostRamRange& range, uint32_t min_own, ThpRegatherReport* report) {
  const uint64_t first = (range.address + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uint64_t end = (range.address + range.bytes) / kHugePageBytes * kHugePageBytes;
  if (end <= first) return true;
  auto own = OwnPages(pid, first, (end - first) / kPage);
  if (!own) {
    report->skipped = own.error().message();
    return false;
  }
  for (uint64_t at = first; at < end; at += kHugePageBytes) {
    ++report->ranges;
    const size_t base = (at - first) / kPage;
    uint32_t count = 0;
    for (uint32_t i = 0; i < kPagesPerHugePage; ++i) count += (*own)[base + i] ? 1 : 0;
    if (count < min_own) continue;
    ++report->candidates;
    const int err = Collapse(pidfd, at);
    if (err == 0) {
      ++report->collapsed;
      continue;
    }
    if (err == EPERM || err == ENOSYS || (err == EINVAL && report->collapsed == 0)) {
      // Not allowed (process_madvise needs CAP_SYS_NICE), or a kernel without process_madvise or MADV_COLLAPSE.
      report->skipped = fmt::format("process_madvise(MADV_COLLAPSE) on QEMU's {}: {}", range.block,
                                    std::strerror(err));
      return false;
    }
    ++report->failed;  // EAGAIN (pages locked or busy), ENOMEM (no free huge page): left as they are
    if (report->first_failure.empty()) report->first_failure = std::strerror(err);
  }
  return true;
}

}  // namespace

uint32_t MinOwnPagesToCollapse(uint32_t max_ptes_none) {
  return max_ptes_none >= kPagesPerHugePage ? 1 : kPagesPerHugePage - max_ptes_none;
}

ThpRegatherReport RegatherHugePages(pid_t pid, const std::vector<HostRamRange>& ranges) {
  const auto start = std::chrono::steady_clock::now();
  ThpRegatherReport report;
  const std::string mode = ThpMode();
  if (mode != "always" && mode != "madvise") {
    report.skipped = fmt::format("transparent huge pages are {} ({})", mode.empty() ? "unknown" : mode, kThpEnabled);
    return report;
  }
  UniqueFd pidfd(int(syscall(SYS_pidfd_open, pid, 0u)));
  if (!pidfd.valid()) {
    report.skipped = fmt::format("pidfd_open of QEMU (pid {}): {}", pid, std::strerror(errno));
    return report;
  }
  const uint32_t min_own = MinOwnPagesToCollapse(MaxPtesNone());
  for (const HostRamRange& r : ranges) {
    if (!RegatherRange(pidfd.get(), pid, r, min_own, &report)) break;
  }
  report.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::vector<HostRamRange> GuestRamHostRanges(QmpClient& qmp, const std::vector<RamBlockInfo>& blocks,
                                             const std::vector<GuestRamRange>& guest_ram) {
  std::vector<HostRamRange> out;
  for (const RamBlockInfo& b : blocks) {
    if (b.page_size != kPage || b.used_length < kHugePageBytes) continue;  // hugetlbfs is huge already
    for (const GuestRamRange& g : guest_ram) {
      if (g.block != b.name || g.offset != 0) continue;
      auto address = RamBlockHostAddress(qmp, qmp.PeerPid(), b.name, g.gpa, b.used_length);
      if (address) out.push_back({b.name, *address, b.used_length});
      break;
    }
  }
  return out;
}

std::string ThpRegatherReportText(const ThpRegatherReport& r) {
  if (!r.skipped.empty()) return fmt::format("  huge pages       not gathered before the pause: {}\n", r.skipped);
  if (r.ranges == 0) return "";
  std::string text = fmt::format(
      "  huge pages       {} of {} 2 MiB ranges of guest RAM held the guest's pages: {} gathered into huge pages "
      "before the pause in {:.1f} ms",
      r.candidates, r.ranges, r.collapsed, r.ms);
  if (r.failed > 0) text += fmt::format(", {} left as they were ({})", r.failed, r.first_failure);
  return text + "\n";
}

}  // namespace halite::qemu
