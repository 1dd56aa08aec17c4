// The reports of a restore into QEMU (moved here from tools/hlt-restore/restore_qemu.cc and
// lazy_restore_flags.cc, unchanged: the tools' output stays byte for byte).
#include "halite/qemu/qemu_restore_report.h"

#include <map>

#include <fmt/format.h>
#include <fmt/printf.h>
#include <nlohmann/json.hpp>

#include "halite/qemu/qemu_launcher.h"
#include "halite/stats_text.h"

namespace halite::qemu {
namespace {

double Ms(uint64_t us) { return double(us) / 1e3; }

// {"4096": n, "2097152": m}: how many of QEMU's page requests asked for each length.
nlohmann::ordered_json RequestSizesJson(const std::map<uint64_t, uint64_t>& sizes) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [bytes, n] : sizes) j[std::to_string(bytes)] = n;
  return j;
}

}  // namespace

std::string RestoreSummaryText(const CheckpointRestoreResult& res, uint64_t tool_to_running) {
  std::string out;
  const auto& c = res.channel;
  const auto& e = res.engine;
  const auto& ef = res.engine_final;
  if (res.start_to_resumed_us != 0) {
    // A resumed restore: the guest ran already; what counts is when it could get pages again.
    out += fmt::sprintf("  time             %.1f ms to QEMU's RESUME_ACK (from the resume call), all pages sent at %.1f ms, "
                "completed at %.1f ms\n",
                Ms(res.start_to_resumed_us), Ms(res.start_to_loaded_us), Ms(res.total_us));
  } else {
    // An eager restore starts the guest only once its load has completed, so its running time comes last.
    out += fmt::sprintf(
        "  time             %.1f ms to guest running (tool start to QEMU's RESUME; %.1f ms from the restore call%s), "
        "all pages sent at %.1f ms, completed at %.1f ms (both from the restore call)\n",
        Ms(tool_to_running), Ms(res.start_to_running_us), res.lazy ? "" : ", started after the load completed",
        Ms(res.start_to_loaded_us), Ms(res.total_us));
  }
  if (res.lazy) {
    out += fmt::sprintf(
        "  requests         %llu from QEMU (%llu for pages already on the way, %llu after the end); "
        "answered in p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
        (unsigned long long)c.requests, (unsigned long long)c.requests_already_sent,
        (unsigned long long)c.requests_after_end, Ms(c.request_latency_p50_us), Ms(c.request_latency_p99_us),
        Ms(c.request_latency_max_us));
    // Huge-page-backed RAM: QEMU asks for, and places, whole host pages.
    if (ef.host_pages_installed != 0) {
      std::string sizes;
      for (const auto& [bytes, n] : c.request_sizes) {
        sizes += (sizes.empty() ? "" : ", ") + std::to_string(n) + " of " + HumanBytes(bytes);
      }
      out += fmt::sprintf("  host pages       %llu larger than 4 KiB installed whole; requests by size: %s\n",
                  (unsigned long long)ef.host_pages_installed, sizes.empty() ? "none" : sizes.c_str());
    }
  }
  out += fmt::sprintf(
      "  pages sent       %llu before the guest started, %llu answering requests, %llu pushed; %llu of them "
      "as zero pages; %s on the wire in %llu sections",
      (unsigned long long)c.preload_pages, (unsigned long long)c.request_pages, (unsigned long long)c.pushed_pages,
      (unsigned long long)c.zero_pages, HumanBytes(c.bytes_sent).c_str(), (unsigned long long)c.sections);
  if (res.lazy) out += fmt::sprintf("; %llu zero pages never sent (they read as zero)", (unsigned long long)res.zero_pages_unsent);
  out += fmt::sprintf("\n");
  if (res.lazy) {
    out += fmt::sprintf(
        "  faults           %llu blocking (%llu joined a read in flight), %llu zero, %llu present; blocking "
        "p50 %.1f us, p99 %.1f us; stall %.1f ms (blocking %.1f ms, joined %.1f ms)",
        (unsigned long long)e.faults_blocking, (unsigned long long)e.faults_joined, (unsigned long long)e.faults_zero,
        (unsigned long long)e.faults_present, double(e.blocking_latency.p50_ns) / 1e3,
        double(e.blocking_latency.p99_ns) / 1e3, double(e.stall_ns) / 1e6, double(e.stall_blocking_ns) / 1e6,
        double(e.stall_joined_ns) / 1e6);
    if (res.sweep_blocks) out += fmt::sprintf(" (then %llu blocks swept after the guest went idle)", (unsigned long long)res.sweep_blocks);
    out += fmt::sprintf("\n");
  }
  if (res.placement == "direct") {
    std::string blocks;
    for (const auto& b : res.direct_blocks) blocks += (blocks.empty() ? "" : ", ") + b;
    const auto& d = res.direct;
    out += fmt::sprintf(
        "  placement        direct through QEMU's userfaultfd (%s): %llu pages copied in %llu ioctls, %llu "
        "zero pages mapped in %llu, %llu found present; set up in %.1f ms\n",
        blocks.c_str(), (unsigned long long)d.pages_copied, (unsigned long long)d.copy_ioctls,
        (unsigned long long)d.pages_zeroed, (unsigned long long)d.zero_ioctls, (unsigned long long)d.pages_existed,
        Ms(res.direct_setup_us));
  } else {
    out += fmt::sprintf("  placement        channel (%s)\n", res.placement_reason.c_str());
  }
  out += fmt::sprintf("  blocks read      %llu of %llu (demand %llu, loader %llu, preload %llu)\n",
              (unsigned long long)ef.blocks_read, (unsigned long long)ef.blocks_total,
              (unsigned long long)ef.blocks_read_demand, (unsigned long long)ef.blocks_read_loader,
              (unsigned long long)ef.blocks_read_preload);
  out += fmt::sprintf("  bytes read       %s of the checkpoint (%s decompressed)\n", HumanBytes(ef.bytes_read).c_str(),
              HumanBytes(ef.bytes_decompressed).c_str());
  return out;
}

std::string GuestRunningText(uint64_t us) {
  return fmt::sprintf("guest running %.1f ms after the restore began\n", Ms(us));
}

std::string GuestResumedText(uint64_t us, uint64_t caller_us, const std::string& tool) {
  return fmt::sprintf("guest resumed: QEMU acknowledged the recovery %.1f ms after the restore began (%.1f ms after "
                      "%s started)\n",
                      Ms(us), Ms(caller_us), tool);
}

std::string RestoreFailureText(RestoreSession& session, const std::string& tool, const std::string& ckpt) {
  if (session.resumable()) {
    return fmt::format("{}: QEMU (pid {}) keeps its guest waiting for the pages it lacks; once the cause above is "
                       "fixed, continue with: {} {} --resume {}\n",
                       tool, session.qemu_pid(), tool, ckpt, session.ResumeLocator());
  }
  if (session.process() && session.process()->Alive()) {
    return fmt::format("{}: killing the QEMU this restore started (pid {})\n", tool, session.process()->pid());
  }
  return "";
}

std::string RestoreSessionStartText(RestoreSession& session, const std::string& ckpt) {
  std::string out;
  const CheckpointRestoreOptions& opt = session.options().restore;
  if (session.resuming()) {
    out += fmt::sprintf("resuming the restore of %s into QEMU pid %d (file_id %s)\n", ckpt.c_str(), int(session.qemu_pid()),
                session.file_id().c_str());
  } else {
    const bool launched = session.process() != nullptr;
    out += fmt::sprintf("restoring %s into QEMU%s: %s%s%s\n", ckpt.c_str(),
                launched ? (" (pid " + std::to_string(session.qemu_pid()) + ")").c_str()
                         : (" at " + session.qmp_socket()).c_str(),
                opt.lazy ? "lazy (postcopy)" : "eager (every page before the guest runs)",
                opt.lazy ? (opt.engine.background_loader ? ", loader on" : ", loader off") : "",
                opt.engine.preload_working_set ? ", working set preloaded" : "");
  }
  return out;
}

std::string RestoreSessionReportText(RestoreSession& session, const std::string& ckpt, int64_t tool_wall_us) {
  std::string out;
  const CheckpointRestoreResult& res = session.result();
  const bool lazy = session.options().restore.lazy;
  const int64_t running_wall = res.wall_start_us + int64_t(res.start_to_running_us);
  const uint64_t tool_to_running = res.start_to_running_us ? uint64_t(running_wall - tool_wall_us) : 0;
  const uint64_t tool_to_resumed =
      res.start_to_resumed_us ? uint64_t(res.wall_start_us - tool_wall_us) + res.start_to_resumed_us : 0;
  if (session.resuming()) {
    out += fmt::sprintf("resumed from %s: QEMU held %llu pages already; its guest could get pages again %.1f ms after "
                        "hlt-restore --resume began\n",
                        res.resumed_from_status.c_str(), (unsigned long long)res.resume_present_pages,
                        Ms(tool_to_resumed));
  }
  out += fmt::sprintf("restored %s (%s)\n", ckpt.c_str(), lazy ? "lazy" : "eager");
  out += RestoreSummaryText(res, tool_to_running);
  if (std::string cached = BlockCacheSummary(session.reader().read_stats()); !cached.empty()) {
    out += fmt::sprintf("  block cache      %s\n", cached.c_str());
  }
  if (QemuProcess* proc = session.process()) {
    out += fmt::sprintf("  qemu             pid %d keeps running; QMP socket %s, stdout/stderr logs in %s\n",
                        int(proc->pid()), proc->qmp_socket_path().c_str(), proc->work_dir().c_str());
  }
  return out;
}

std::string RestoreSessionStatsJson(RestoreSession& session, const std::string& ckpt, int64_t tool_wall_us) {
  const CheckpointRestoreOptions& opt = session.options().restore;
  const CheckpointRestoreResult& res = session.result();
  const auto& c = res.channel;
  const auto& e = res.engine;
  const auto& ef = res.engine_final;
  const ReaderStats rs = session.reader().read_stats();
  const bool loader = opt.engine.background_loader;
  const bool resume = session.resuming();
  QemuProcess* proc = session.process();
  const int64_t open_done_wall_us = session.times().open_done_wall_us;
  const int64_t qemu_ready_wall_us = session.times().qemu_ready_wall_us;
  const int64_t running_wall = res.wall_start_us + int64_t(res.start_to_running_us);
  const uint64_t tool_to_running = res.start_to_running_us ? uint64_t(running_wall - tool_wall_us) : 0;
  const uint64_t tool_to_resumed =
      res.start_to_resumed_us ? uint64_t(res.wall_start_us - tool_wall_us) + res.start_to_resumed_us : 0;
  const nlohmann::ordered_json j{
    {"checkpoint", ckpt},
    {"lazy", opt.lazy},
    {"loader", loader},
    {"preload_ws", opt.engine.preload_working_set},
    {"tool_wall_start_us", tool_wall_us},
    {"open_done_wall_us", open_done_wall_us},
    {"qemu_ready_wall_us", qemu_ready_wall_us},
    {"restore_wall_start_us", res.wall_start_us},
    {"engine_created_wall_us", res.engine_created_wall_us},
    {"running_wall_us", res.start_to_running_us ? running_wall : 0},
    {"tool_to_running_us", tool_to_running},
    {"start_to_connect_us", res.start_to_connect_us},
    {"start_to_running_us", res.start_to_running_us},
    {"connect_to_running_pong_us", c.connect_to_running_us},
    {"start_to_loaded_us", res.start_to_loaded_us},
    {"total_us", res.total_us},
    {"requests", c.requests},
    {"requests_already_sent", c.requests_already_sent},
    {"requests_after_end", c.requests_after_end},
    {"request_pages", c.request_pages},
    {"preload_pages", c.preload_pages},
    {"pushed_pages", c.pushed_pages},
    {"zero_pages_sent", c.zero_pages},
    {"zero_pages_unsent", res.zero_pages_unsent},
    {"bytes_sent", c.bytes_sent},
    {"request_latency_p50_us", c.request_latency_p50_us},
    {"request_latency_p99_us", c.request_latency_p99_us},
    {"request_latency_max_us", c.request_latency_max_us},
    {"request_sizes", RequestSizesJson(c.request_sizes)},
    {"host_pages_installed", ef.host_pages_installed},
    {"host_page_extra_reads", ef.host_page_extra_reads},
    {"faults_blocking", e.faults_blocking},
    {"faults_joined", e.faults_joined},
    {"faults_zero", e.faults_zero},
    {"faults_present", e.faults_present},
    {"stall_us", e.stall_ns / 1000},
    {"stall_blocking_us", e.stall_blocking_ns / 1000},
    {"stall_joined_us", e.stall_joined_ns / 1000},
    {"stall_blocking_p50_us", double(e.stall_latency.p50_ns) / 1e3},
    {"stall_blocking_p99_us", double(e.stall_latency.p99_ns) / 1e3},
    {"blocks_total", e.blocks_total},
    {"blocks_read_demand", e.blocks_read_demand},
    {"blocks_read_loader", e.blocks_read_loader},
    {"blocks_read_preload", e.blocks_read_preload},
    {"bytes_read", e.bytes_read},
    {"bytes_read_final", ef.bytes_read},
    {"sweep_blocks", res.sweep_blocks},
    {"read_retries", ef.read_retries},
    {"blocking_p50_us", double(e.blocking_latency.p50_ns) / 1e3},
    {"blocking_p99_us", double(e.blocking_latency.p99_ns) / 1e3},
    {"engine_read_us", ef.read_ns / 1000},
    {"engine_install_us", ef.install_ns / 1000},
    {"bytes_decompressed", ef.bytes_decompressed},
    {"loader_batches", ef.loader_batches},
    {"preload_batches", ef.preload_batches},
    {"storage_requests", rs.storage_requests},
    {"storage_bytes", rs.storage_bytes},
    {"blocks_fetched", rs.blocks_fetched},
    {"block_bytes_fetched", rs.block_bytes_fetched},
    {"cache_hits", rs.cache_hits},
    {"cache_misses", rs.cache_misses},
    {"cache_dropped", rs.cache_dropped},
    {"cache_inserts", rs.cache_inserts},
    {"placement", res.placement},
    {"placement_reason", res.placement_reason},
    {"direct_blocks", res.direct_blocks},
    {"direct_pages_copied", res.direct.pages_copied},
    {"direct_pages_zeroed", res.direct.pages_zeroed},
    {"direct_pages_existed", res.direct.pages_existed},
    {"direct_zero_pages_after_end", res.direct.zero_pages_after_end},
    {"direct_copy_ioctls", res.direct.copy_ioctls},
    {"direct_zero_ioctls", res.direct.zero_ioctls},
    {"direct_partial_fills", res.direct.partial_fills},
    {"direct_setup_us", res.direct_setup_us},
    {"resumed", resume},
    {"resumed_from_status", res.resumed_from_status},
    {"resume_present_pages", res.resume_present_pages},
    {"resume_received_pages", c.resume_received_pages},
    {"engine_pages_present_at_start", ef.pages_present_at_start},
    {"engine_blocks_present_at_start", ef.blocks_present_at_start},
    {"tool_to_resumed_us", tool_to_resumed},
    {"qemu_pid", proc ? int(proc->pid()) : -1},
    {"qemu_dir", proc ? proc->work_dir() : std::string()},
  };
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace halite::qemu
