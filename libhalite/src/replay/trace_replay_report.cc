// The reports of a trace replay: the JSON document and the text summary `hlt-restore replay` prints (moved here
// from tools/hlt-restore/replay.cc, unchanged).
#include <fmt/printf.h>
#include <nlohmann/json.hpp>

#include "halite/stats_text.h"
#include "halite/trace_replay.h"

namespace halite {
namespace {
double Us(uint64_t ns) { return double(ns) / 1e3; }
}  // namespace

std::string TraceReplayJson(const std::string& checkpoint, const std::string& trace, const TraceReplayOptions& c,
                            const TraceReplayResult& o) {
  nlohmann::ordered_json j = {
      {"checkpoint", checkpoint},
      {"trace", trace},
      {"accesses", o.accesses},
      {"pages_touched", o.touched},
      {"nonzero_pages_touched", o.nonzero},
      {"pages_prefetched", o.prefetched},
      {"threads", c.threads},
      {"loader", c.engine.background_loader},
      {"preload_ws", c.engine.preload_working_set},
      {"eager", c.engine.preload_all},
      {"stream_faults", c.engine.stream_faults},
      {"faults_blocking", o.engine.faults_blocking},
      {"faults_joined", o.engine.faults_joined},
      {"faults_zero", o.engine.faults_zero},
      {"faults_present", o.engine.faults_present},
      {"stall_seconds", double(o.engine.stall_ns) / 1e9},
      {"stall_blocking_seconds", double(o.engine.stall_blocking_ns) / 1e9},
      {"stall_joined_seconds", double(o.engine.stall_joined_ns) / 1e9},
      {"stall_blocking_p50_us", Us(o.engine.stall_latency.p50_ns)},
      {"stall_blocking_p99_us", Us(o.engine.stall_latency.p99_ns)},
      {"stall_joined_p50_us", Us(o.engine.join_latency.p50_ns)},
      {"stall_joined_p99_us", Us(o.engine.join_latency.p99_ns)},
      {"touches_missing", o.missing_touches},
      {"touch_stall_seconds", o.touch_stall_seconds},
      {"blocks_read", o.engine.blocks_read},
      {"blocks_read_demand", o.engine.blocks_read_demand},
      {"blocks_read_loader", o.engine.blocks_read_loader},
      {"blocks_read_predicted", o.engine.blocks_read_predicted},
      {"blocks_read_preload", o.engine.blocks_read_preload},
      {"blocks_total", o.engine.blocks_total},
      {"bytes_read", o.engine.bytes_read},
      {"loader_batches", o.engine.loader_batches},
      {"loader_fetched_unused", o.engine.loader_fetched_unused},
      {"preload_batches", o.engine.preload_batches},
      {"storage_requests", o.reader.storage_requests},
      {"storage_bytes", o.reader.storage_bytes},
      {"blocks_fetched", o.reader.blocks_fetched},
      {"block_bytes_fetched", o.reader.block_bytes_fetched},
      {"cache_hits", o.reader.cache_hits},
      {"cache_misses", o.reader.cache_misses},
      {"cache_dropped", o.reader.cache_dropped},
      {"cache_inserts", o.reader.cache_inserts},
      {"bytes_decompressed", o.engine.bytes_decompressed},
      {"pages_installed", o.engine.pages_installed},
      {"zero_pages_installed", o.engine.zero_pages_installed},
      {"uffd_faults", o.memory.faults},
      {"seconds", o.seconds},
      {"open_seconds", o.open_seconds},
      {"start_seconds", o.start_seconds},
      {"loader_done_seconds", o.loader_done_seconds},
      {"time_to_first_access_us", o.first_access_seconds * 1e6},
      {"read_seconds", double(o.engine.read_ns) / 1e9},
      {"install_seconds", double(o.engine.install_ns) / 1e9},
      {"fault_p50_us", Us(o.engine.fault_latency.p50_ns)},
      {"fault_p90_us", Us(o.engine.fault_latency.p90_ns)},
      {"fault_p99_us", Us(o.engine.fault_latency.p99_ns)},
      {"fault_max_us", Us(o.engine.fault_latency.max_ns)},
      {"blocking_p50_us", Us(o.engine.blocking_latency.p50_ns)},
      {"blocking_p99_us", Us(o.engine.blocking_latency.p99_ns)},
      {"mismatches", o.mismatches},
  };
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string TraceReplayText(const std::string& checkpoint, const TraceReplayOptions& c,
                            const TraceReplayResult& o) {
  std::string out;
  out += fmt::sprintf("replayed %zu accesses to %llu pages (%llu non-zero) of %s with %u thread(s), loader %s%s%s\n",
              o.accesses, (unsigned long long)o.touched, (unsigned long long)o.nonzero, checkpoint.c_str(),
              c.threads, c.engine.background_loader ? "on" : "off",
              c.engine.preload_working_set ? ", working set preloaded" : "", c.engine.preload_all ? ", eager" : "");
  out += fmt::sprintf("  time            %.3f s (first access after %.1f us; start %.3f s)\n", o.seconds,
              o.first_access_seconds * 1e6, o.start_seconds);
  if (o.loader_done_seconds > 0) out += fmt::sprintf("  loader done     %.3f s\n", o.loader_done_seconds);
  out += fmt::sprintf("  faults          %llu blocking (%llu joined a read in flight), %llu zero, %llu present\n",
              (unsigned long long)o.engine.faults_blocking, (unsigned long long)o.engine.faults_joined,
              (unsigned long long)o.engine.faults_zero, (unsigned long long)o.engine.faults_present);
  out += fmt::sprintf("  stall           %.2f ms in the engine (blocking faults %.2f ms, of which joined %.2f ms; "
              "blocking p50 %.1f us, p99 %.1f us); touching threads %.2f ms in %llu touches of pages not in yet\n",
              double(o.engine.stall_ns) / 1e6, double(o.engine.stall_blocking_ns) / 1e6, double(o.engine.stall_joined_ns) / 1e6,
              Us(o.engine.stall_latency.p50_ns), Us(o.engine.stall_latency.p99_ns), o.touch_stall_seconds * 1e3,
              (unsigned long long)o.missing_touches);
  out += fmt::sprintf("  prefetched      %llu of the pages touched were in before their first touch\n",
              (unsigned long long)o.prefetched);
  out += fmt::sprintf("  fault latency   p50 %.1f us, p99 %.1f us, max %.1f us (blocking: p50 %.1f us, p99 %.1f us)\n",
              Us(o.engine.fault_latency.p50_ns), Us(o.engine.fault_latency.p99_ns), Us(o.engine.fault_latency.max_ns),
              Us(o.engine.blocking_latency.p50_ns), Us(o.engine.blocking_latency.p99_ns));
  out += fmt::sprintf("  blocks read     %llu of %llu (demand %llu, loader %llu, predicted %llu, preload %llu)\n",
              (unsigned long long)o.engine.blocks_read, (unsigned long long)o.engine.blocks_total,
              (unsigned long long)o.engine.blocks_read_demand, (unsigned long long)o.engine.blocks_read_loader,
              (unsigned long long)o.engine.blocks_read_predicted, (unsigned long long)o.engine.blocks_read_preload);
  out += fmt::sprintf("  bytes read      %s (%s decompressed)\n", HumanBytes(o.engine.bytes_read).c_str(),
              HumanBytes(o.engine.bytes_decompressed).c_str());
  out += fmt::sprintf("  storage         %llu requests, %s", (unsigned long long)o.reader.storage_requests,
              HumanBytes(o.reader.storage_bytes).c_str());
  if (o.engine.preload_batches) out += fmt::sprintf(" (preload: %llu batches)", (unsigned long long)o.engine.preload_batches);
  if (o.engine.loader_batches) {
    out += fmt::sprintf(" (loader: %llu batches, %llu blocks a fault took meanwhile)", (unsigned long long)o.engine.loader_batches,
                (unsigned long long)o.engine.loader_fetched_unused);
  }
  out += fmt::sprintf("\n");
  if (std::string cached = BlockCacheSummary(o.reader); !cached.empty()) out += fmt::sprintf("  block cache     %s\n", cached.c_str());
  out += fmt::sprintf("  mismatches      %llu%s%s\n", (unsigned long long)o.mismatches,
              o.mismatches ? ", first: " : "", o.first_mismatch.c_str());
  return out;
}

}  // namespace halite
