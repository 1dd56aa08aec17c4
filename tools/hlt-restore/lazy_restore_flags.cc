#include "hlt-restore/lazy_restore_flags.h"

#include <cstdio>

#include "halite/qemu/qemu_option_names.h"

namespace halite::restore {
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

const char* kLearnLayoutHelp =
    "  --learn-layout         for many restores of one golden checkpoint: restore from CKPT.learned when it was\n"
    "                         learned from CKPT; otherwise, once this lazy restore is complete, write it: the\n"
    "                         golden's working set, then the blocks this guest had to wait for, in that order,\n"
    "                         restored first by the next restores (REAP's record and relayout)\n";

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
    auto placement = qemu::ParsePagePlacement(v.placement);
    if (!placement) return "--placement: " + placement.error().message();
    opt->placement = *placement;
  }
  return CheckLazyRestoreFlags(*opt);
}

std::string CheckLazyRestoreFlags(const qemu::CheckpointRestoreOptions& opt) {
  if (!opt.lazy && (opt.engine.preload_working_set || !opt.engine.background_loader)) {
    return "--eager sends everything first: --preload-ws and --loader off do not apply";
  }
  return "";
}

void PrintLearnedLayout(const Result<std::string>& line) {
  if (!line) {
    std::fprintf(stderr, "hlt-restore: warning: no learned layout written: %s\n", line.error().ToString().c_str());
    return;
  }
  std::fputs(line->c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace halite::restore
