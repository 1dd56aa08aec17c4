// Statistics and the timeline, as counted by the engine itself.
#include <cerrno>
#include <cstdio>

#include "engine/engine_impl.h"

namespace halite {

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kZero:
      return "zero";
    case FaultKind::kPresent:
      return "present";
    case FaultKind::kBlocking:
      return "blocking";
  }
  return "?";
}

const char* EngineEventKindName(EngineEventKind kind) {
  switch (kind) {
    case EngineEventKind::kFaultZero:
      return "zero";
    case EngineEventKind::kFaultPresent:
      return "present";
    case EngineEventKind::kFaultBlocking:
      return "blocking";
    case EngineEventKind::kFaultFailed:
      return "failed";
    case EngineEventKind::kLoaderBlock:
      return "loader";
    case EngineEventKind::kPredictedBlock:
      return "predicted";
    case EngineEventKind::kPreloadBlock:
      return "preload";
  }
  return "?";
}

RestoreEngineStats RestoreEngine::Impl::Stats() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  RestoreEngineStats s;
  s.faults_zero = get(c_.faults_zero);
  s.faults_present = get(c_.faults_present);
  s.faults_blocking = get(c_.faults_blocking);
  s.faults_joined = get(c_.faults_joined);
  s.faults_failed = get(c_.faults_failed);
  s.blocks_total = reader_.blocks().size();
  s.blocks_loaded = get(c_.blocks_loaded);
  s.blocks_read = get(c_.blocks_read);
  s.blocks_read_demand = get(c_.blocks_read_by[size_t(Cause::kDemand)]);
  s.blocks_read_loader = get(c_.blocks_read_by[size_t(Cause::kLoader)]);
  s.blocks_read_predicted = get(c_.blocks_read_by[size_t(Cause::kPredicted)]);
  s.blocks_read_preload = get(c_.blocks_read_by[size_t(Cause::kPreload)]);
  s.blocks_read_sweep = get(c_.blocks_read_by[size_t(Cause::kSweep)]);
  s.blocks_failed = get(c_.blocks_failed);
  s.read_retries = get(c_.read_retries);
  s.blocks_reread = get(c_.blocks_reread);
  s.loader_batches = get(c_.loader_batches);
  s.loader_fetched_unused = get(c_.loader_fetched_unused);
  s.preload_batches = get(c_.preload_batches);
  s.bytes_read = get(c_.bytes_read);
  s.bytes_decompressed = get(c_.bytes_decompressed);
  s.pages_installed = get(c_.pages_installed);
  s.zero_pages_installed = get(c_.zero_pages_installed);
  s.pages_skipped_present = get(c_.pages_skipped_present);
  s.pages_present_at_start = get(c_.pages_present_at_start);
  s.blocks_present_at_start = get(c_.blocks_present_at_start);
  s.install_calls = get(c_.install_calls);
  s.host_pages_installed = get(c_.host_pages_installed);
  s.host_page_extra_reads = get(c_.host_page_extra_reads);
  s.read_ns = get(c_.read_ns);
  s.install_ns = get(c_.install_ns);
  s.fault_latency = fault_hist_.Summary();
  s.blocking_latency = blocking_hist_.Summary();
  s.wake_latency = wake_hist_.Summary();
  s.stall_ns = get(c_.stall_ns);
  s.stall_blocking_ns = get(c_.stall_blocking_ns);
  s.stall_joined_ns = get(c_.stall_joined_ns);
  s.stall_latency = stall_hist_.Summary();
  s.join_latency = join_hist_.Summary();
  {
    std::lock_guard<std::mutex> lock(loader_mu_);
    s.loader_done = loader_done_;
    s.idle_sweep_started = sweeping_;
  }
  s.timeline_dropped = timeline_.dropped();
  return s;
}

RestoreEngineStats RestoreEngine::Impl::StatsBeforeIdleSweep() const {
  {
    std::lock_guard<std::mutex> lock(loader_mu_);
    if (before_sweep_) return *before_sweep_;
  }
  return Stats();
}

std::vector<BlockFailure> RestoreEngine::Impl::failures() const {
  std::lock_guard<std::mutex> lock(failures_mu_);
  std::vector<BlockFailure> v;
  for (const auto& [b, f] : failures_) v.push_back(f);
  return v;
}

std::string RestoreEngine::TimelineCsv() const {
  auto events = impl_->Timeline();
  return engine::EventsToCsv(events, impl_->reader().regions());
}

Status RestoreEngine::WriteTimelineCsv(const std::string& path) const {
  std::string csv = TimelineCsv();
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Status::IoError(path + ": cannot create the timeline file", errno);
  bool ok = std::fwrite(csv.data(), 1, csv.size(), f) == csv.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Status::IoError(path + ": writing the timeline failed", errno);
  return Status::Ok();
}

}  // namespace halite
