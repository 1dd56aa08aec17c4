// Accessed-bit sampling of a running QEMU guest before its save (halite/qemu/qemu_access_window.h).
#include "halite/qemu/qemu_access_window.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_set>

#include "halite/qemu/qemu_live_memory.h"

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The roots the vCPUs have loaded now (the guest is stopped).
Result<std::vector<x86::PagingRoot>> LiveRoots(QmpClient& qmp) {
  HLT_ASSIGN_OR_RETURN(std::vector<CpuPagingRegisters> cpus, QueryCpuPagingRegisters(qmp));
  std::vector<x86::PagingRoot> roots;
  std::string why;
  for (const CpuPagingRegisters& c : cpus) {
    auto root = x86::PagingRootFromRegisters(c.cr0, c.cr3, c.cr4, c.efer);
    if (root) {
      roots.push_back(*root);
    } else {
      why = "vCPU " + std::to_string(c.cpu) + ": " + root.error().message();
    }
  }
  if (roots.empty()) return Status::Unsupported("no vCPU is in 64-bit paging mode" + (why.empty() ? "" : " (" + why + ")"));
  return roots;
}

void CountPages(const x86::AccessSample& s, std::unordered_set<uint64_t>* pages) {
  for (const auto& space : s.spaces) {
    for (const x86::VaRun& r : space.runs) {
      if (r.kernel_half() && r.leaf_level > 1) continue;  // the direct map: not in the trace (AccessedPageRuns)
      for (uint64_t p = 0; p < r.pages; ++p) pages->insert(r.pfn + p);
    }
  }
}

}  // namespace

Result<AccessWindow> SampleGuestAccesses(QmpClient& qmp, pid_t pid, const std::vector<GuestRamRange>& ranges,
                                         const AccessWindowOptions& options) {
  const auto start = Clock::now();
  AccessWindow out;
  AccessWindowReport& report = out.report;
  if (pid <= 0) {
    report.skipped = "QEMU's pid is unknown (its QMP socket does not say, or several processes match the domain)";
    return out;
  }
  auto memory = QemuLiveMemory::Open(qmp, pid, ranges);
  if (!memory) {
    report.skipped = memory.error().ToString();
    return out;
  }
  const QemuLiveMemory& mem = *memory;
  x86::WalkLimits limits;
  limits.max_pfn = mem.max_pfn();
  x86::AccessedBitSampler sampler(
      [&mem](uint64_t pfn, std::span<uint8_t, 4096> page) { return mem.ReadPage(pfn, page); },
      [&mem](uint64_t pfn, std::span<const uint8_t, 4096> page) { return mem.WritePage(pfn, page); }, limits);

  const int interval_ms = std::max(options.interval_ms, 1);
  const int measuring = std::max(1, options.window_ms / interval_ms);
  std::unordered_set<uint64_t> roots_seen, pages;
  auto next = Clock::now();
  for (int i = 0; i <= measuring; ++i) {
    std::this_thread::sleep_until(next);
    next = Clock::now() + std::chrono::milliseconds(interval_ms);
    const auto paused = Clock::now();
    HLT_RETURN_IF_ERROR(options.pause_guest ? options.pause_guest() : qmp.Execute("stop").status());
    auto roots = LiveRoots(qmp);
    Result<x86::AccessSample> sample = roots ? sampler.Sample(*roots) : Result<x86::AccessSample>(roots.error());
    const bool stay_stopped = sample && i == measuring && options.leave_stopped;
    if (!stay_stopped) {
      HLT_RETURN_IF_ERROR(options.resume_guest ? options.resume_guest() : qmp.Execute("cont").status());
    }
    const double pause_ms = MsSince(paused);
    report.pause_total_ms += pause_ms;
    report.pause_max_ms = std::max(report.pause_max_ms, pause_ms);
    ++report.samples;
    if (!sample) {
      report.skipped = "sample " + std::to_string(i + 1) + ": " + sample.error().ToString();
      break;
    }
    for (const x86::PagingRoot& r : *roots) roots_seen.insert(r.table_pfn);
    report.measured_roots += sample->measured_roots;
    report.entries_cleared += sample->entries_cleared;
    if (i == 0) continue;  // the clearing sample: everything since boot
    CountPages(*sample, &pages);
    out.samples.push_back(std::move(*sample));
    out.left_stopped = stay_stopped;
  }
  report.distinct_roots = uint32_t(roots_seen.size());
  report.accessed_pages = pages.size();
  report.seconds = MsSince(start) / 1000;
  return out;
}

}  // namespace halite::qemu
