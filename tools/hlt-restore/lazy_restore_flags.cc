#include "hlt-restore/lazy_restore_flags.h"

#include <cstdio>

namespace halite::restore {
namespace {
double Ms(uint64_t us) { return double(us) / 1e3; }
}  // namespace

const char* kLazyRestoreFlagsHelp =
    "  --eager                load every page before the guest runs (QEMU's guest starts paused, then `cont`)\n"
    "  --loader on|off        push the pages not asked for in the background, in the checkpoint's restore order\n"
    "                         (default on); off: only on request until the guest has asked for nothing for\n"
    "                         --idle-ms (default 1000), then the rest\n"
    "  --rate-limit R         the loader reads at most R bytes of the checkpoint a second (K/M/G suffixes)\n"
    "  --loader-threads N     threads that stream the restore order together (default 1; more only from a local\n"
    "                         file without --rate-limit: each decodes and places a block at a time)\n"
    "  --preload-ws           send the working-set blocks before the guest starts\n"
    "  --placement auto|direct|channel\n"
    "                         where the pages of the big RAMBlocks (pc.ram) go. direct: straight into QEMU's\n"
    "                         memory through its own userfaultfd (pidfd_getfd; needs ptrace permission over QEMU:\n"
    "                         the same user, or root), a whole block per ioctl, from several threads; eager, in\n"
    "                         a postcopy whose guest stays paused until all is in. Small ROM blocks stay in the\n"
    "                         stream. channel: every page in QEMU's migration stream (eager: a precopy load).\n"
    "                         auto (default): direct when permitted, else channel (the summary and --stats-json\n"
    "                         say which, and why)\n";

namespace {
const char* const kLazyFlagNames[] = {"--eager",         "--loader",    "--idle-ms",   "--rate-limit",
                                      "--loader-threads", "--placement", "--preload-ws"};
}  // namespace

void AddLazyRestoreFlags(CLI::App& app, LazyRestoreFlagValues* v) {
  app.add_flag("--eager", v->eager);
  app.add_option("--loader", v->loader);
  app.add_option("--idle-ms", v->idle_ms);
  app.add_option("--rate-limit", v->rate_limit);
  app.add_option("--loader-threads", v->loader_threads);
  app.add_option("--placement", v->placement);
  app.add_flag("--preload-ws", v->preload_ws);
}

bool AnyLazyRestoreFlag(const CLI::App& app) {
  for (const char* name : kLazyFlagNames) {
    if (app.count(name)) return true;
  }
  return false;
}

std::string ApplyLazyRestoreFlags(const CLI::App& app, const LazyRestoreFlagValues& v,
                                  qemu::CheckpointRestoreOptions* opt) {
  if (v.eager) opt->lazy = false;
  if (v.preload_ws) opt->engine.preload_working_set = true;
  if (app.count("--loader")) {
    if (v.loader != "on" && v.loader != "off") return "--loader: expected on or off, got \"" + v.loader + "\"";
    opt->engine.background_loader = v.loader == "on";
  }
  uint64_t n = 0;
  if (app.count("--idle-ms")) {
    if (!cli::ParseU64(v.idle_ms, &n) || n > 3600000) return "--idle-ms: bad value \"" + v.idle_ms + "\"";
    opt->engine.idle_sweep_ms = uint32_t(n);
  }
  if (app.count("--rate-limit")) {
    if (!cli::ParseU64(v.rate_limit, &n)) return "--rate-limit: bad value \"" + v.rate_limit + "\"";
    opt->engine.loader_rate_bytes_per_s = n;
  }
  if (app.count("--loader-threads")) {
    if (!cli::ParseU64(v.loader_threads, &n) || n < 1 || n > 16) {
      return "--loader-threads: expected 1 to 16, got \"" + v.loader_threads + "\"";
    }
    opt->engine.loader_threads = unsigned(n);
  }
  if (app.count("--placement")) {
    if (v.placement == "auto") {
      opt->placement = qemu::PagePlacement::kAuto;
    } else if (v.placement == "direct") {
      opt->placement = qemu::PagePlacement::kDirect;
    } else if (v.placement == "channel") {
      opt->placement = qemu::PagePlacement::kChannel;
    } else {
      return "--placement: expected auto, direct or channel, got \"" + v.placement + "\"";
    }
  }
  return CheckLazyRestoreFlags(*opt);
}

std::string CheckLazyRestoreFlags(const qemu::CheckpointRestoreOptions& opt) {
  if (!opt.lazy && (opt.engine.preload_working_set || !opt.engine.background_loader)) {
    return "--eager sends everything first: --preload-ws and --loader off do not apply";
  }
  return "";
}

void PrintRestoreSummary(const qemu::CheckpointRestoreResult& res, uint64_t tool_to_running) {
  const auto& c = res.channel;
  const auto& e = res.engine;
  const auto& ef = res.engine_final;
  if (res.start_to_resumed_us != 0) {
    // A resumed restore: the guest ran already; what counts is when it could get pages again.
    std::printf("  time             %.1f ms to QEMU's RESUME_ACK (from the resume call), all pages sent at %.1f ms, "
                "completed at %.1f ms\n",
                Ms(res.start_to_resumed_us), Ms(res.start_to_loaded_us), Ms(res.total_us));
  } else {
    std::printf(
        "  time             %.1f ms to guest running (tool start to QEMU's RESUME; %.1f ms from the restore call), "
        "all pages sent at %.1f ms, completed at %.1f ms\n",
        Ms(tool_to_running), Ms(res.start_to_running_us), Ms(res.start_to_loaded_us), Ms(res.total_us));
  }
  if (res.lazy) {
    std::printf(
        "  requests         %llu from QEMU (%llu for pages already on the way, %llu after the end); "
        "answered in p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
        (unsigned long long)c.requests, (unsigned long long)c.requests_already_sent,
        (unsigned long long)c.requests_after_end, Ms(c.request_latency_p50_us), Ms(c.request_latency_p99_us),
        Ms(c.request_latency_max_us));
    // Huge-page-backed RAM: QEMU asks for, and places, whole host pages.
    if (ef.host_pages_installed != 0) {
      std::string sizes;
      for (const auto& [bytes, n] : c.request_sizes) {
        sizes += (sizes.empty() ? "" : ", ") + std::to_string(n) + " of " + cli::HumanBytes(bytes);
      }
      std::printf("  host pages       %llu larger than 4 KiB installed whole; requests by size: %s\n",
                  (unsigned long long)ef.host_pages_installed, sizes.empty() ? "none" : sizes.c_str());
    }
  }
  std::printf(
      "  pages sent       %llu before the guest started, %llu answering requests, %llu pushed; %llu of them "
      "as zero pages; %s on the wire in %llu sections",
      (unsigned long long)c.preload_pages, (unsigned long long)c.request_pages, (unsigned long long)c.pushed_pages,
      (unsigned long long)c.zero_pages, cli::HumanBytes(c.bytes_sent).c_str(), (unsigned long long)c.sections);
  if (res.lazy) std::printf("; %llu zero pages never sent (they read as zero)", (unsigned long long)res.zero_pages_unsent);
  std::printf("\n");
  if (res.lazy) {
    std::printf(
        "  faults           %llu blocking (%llu joined a read in flight), %llu zero, %llu present; blocking "
        "p50 %.1f us, p99 %.1f us; stall %.1f ms (blocking %.1f ms, joined %.1f ms)",
        (unsigned long long)e.faults_blocking, (unsigned long long)e.faults_joined, (unsigned long long)e.faults_zero,
        (unsigned long long)e.faults_present, double(e.blocking_latency.p50_ns) / 1e3,
        double(e.blocking_latency.p99_ns) / 1e3, double(e.stall_ns) / 1e6, double(e.stall_blocking_ns) / 1e6,
        double(e.stall_joined_ns) / 1e6);
    if (res.sweep_blocks) std::printf(" (then %llu blocks swept after the guest went idle)", (unsigned long long)res.sweep_blocks);
    std::printf("\n");
  }
  if (res.placement == "direct") {
    std::string blocks;
    for (const auto& b : res.direct_blocks) blocks += (blocks.empty() ? "" : ", ") + b;
    const auto& d = res.direct;
    std::printf(
        "  placement        direct through QEMU's userfaultfd (%s): %llu pages copied in %llu ioctls, %llu "
        "zero pages mapped in %llu, %llu found present; set up in %.1f ms\n",
        blocks.c_str(), (unsigned long long)d.pages_copied, (unsigned long long)d.copy_ioctls,
        (unsigned long long)d.pages_zeroed, (unsigned long long)d.zero_ioctls, (unsigned long long)d.pages_existed,
        Ms(res.direct_setup_us));
  } else {
    std::printf("  placement        channel (%s)\n", res.placement_reason.c_str());
  }
  std::printf("  blocks read      %llu of %llu (demand %llu, loader %llu, preload %llu)\n",
              (unsigned long long)ef.blocks_read, (unsigned long long)ef.blocks_total,
              (unsigned long long)ef.blocks_read_demand, (unsigned long long)ef.blocks_read_loader,
              (unsigned long long)ef.blocks_read_preload);
  std::printf("  bytes read       %s of the checkpoint (%s decompressed)\n", cli::HumanBytes(ef.bytes_read).c_str(),
              cli::HumanBytes(ef.bytes_decompressed).c_str());
}

}  // namespace halite::restore
