// hlt-restore replay CKPT --trace FILE [...]: restore lazily into userfaultfd memory of this process, touch the
// pages of a trace, check every byte, and print the engine's statistics. Users run it to judge a checkpoint's
// layout against a recorded access pattern; other tools parse its --json output, so its keys are stable.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "halite/checkpoint_reader.h"
#include "halite/hint_files.h"
#include "halite/trace_replay.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {
namespace {

using Clock = std::chrono::steady_clock;

const char* kReplayUsage =
    "usage: hlt-restore replay CKPT --trace FILE [--threads N] [--loader on|off] [--preload-ws] [--eager]\n"
    "                          [--wait-loader] [--record-trace OUT] [--json] [options]\n"
    "Restores CKPT lazily into userfaultfd-backed memory of this process (one locality block per fault), touches\n"
    "the pages of the trace in order with N threads taking the next entry in turn, checks that every touched page\n"
    "equals the checkpoint's content, and prints the restore engine's statistics: faults, and the stall they cost\n"
    "(engine: fault to page installed, summed; touching threads: the time spent in touches of missing pages).\n"
    "  --trace FILE           one access a line: PAGE or PAGE w (a write), REGION:PAGE for other regions than ram\n"
    "  --threads N            touching threads (default 1)\n"
    "  --loader on|off        stream the remaining blocks in the background (default on)\n"
    "  --rate-limit B         loader bytes per second (K/M/G suffixes; default unlimited)\n"
    "  --preload-ws           load the working-set blocks before the first access (Twinkle)\n"
    "  --eager                load every block before the first access (the eager baseline)\n"
    "  --predict N:P          Twinkle demand prediction: after P blocking faults in a segment of N pages, fetch it\n"
    "  --wait-loader          after the trace, wait until the loader has loaded every block (loader_done_seconds)\n"
    "  --stream-faults on|off a fault's block decoded piece by piece, its page in first (default on); off: the\n"
    "                         whole block decoded and installed before the faulting thread goes on\n"
    "  --record-trace OUT     write the pages touched, in first-touch order, as an access trace (for relayout)\n"
    "  --timeline CSV         write the engine's timeline (time_us,region,page,kind,block,latency_us)\n"
    "  --backing anon|memfd   memory behind the regions (default anon)\n"
    "  --handlers N           userfaultfd handler threads (default 4)\n"
    "  --json                 print one JSON object instead of text\n";
const char* kReplayExitCodes =
    "Exit codes: 0 all bytes matched, 2 usage, 3 I/O error (or no userfaultfd), 4 corrupt checkpoint or a mismatch.\n";

struct Config {
  std::string ckpt, trace;
  bool json = false;
  TraceReplayOptions replay;
  ReaderOptions reader;
  cli::ReaderFlagValues reader_flags;
};

// The flags as given: checked and converted by ParseArgs.
struct FlagText {
  std::string threads, loader, rate_limit, stream_faults, predict, backing, handlers;
};

// Converts what FlagText holds into *c; returns the usage error, empty when fine.
std::string ConvertFlags(const CLI::App& app, const FlagText& f, Config* c) {
  uint64_t n = 0;
  if (app.count("--threads")) {
    if (!cli::ParseU64(f.threads, &n) || n == 0 || n > 1024) return "--threads: bad value \"" + f.threads + "\"";
    c->replay.threads = unsigned(n);
  }
  if (app.count("--loader")) {
    if (f.loader != "on" && f.loader != "off") return "--loader: expected on or off, got \"" + f.loader + "\"";
    c->replay.engine.background_loader = f.loader == "on";
  }
  if (app.count("--rate-limit")) {
    if (!cli::ParseU64(f.rate_limit, &n)) return "--rate-limit: bad value \"" + f.rate_limit + "\"";
    c->replay.engine.loader_rate_bytes_per_s = n;
  }
  if (app.count("--stream-faults")) {
    if (f.stream_faults != "on" && f.stream_faults != "off") {
      return "--stream-faults: expected on or off, got \"" + f.stream_faults + "\"";
    }
    c->replay.engine.stream_faults = f.stream_faults == "on";
  }
  if (app.count("--predict")) {
    const std::string& v = f.predict;
    size_t colon = v.find(':');
    uint64_t seg = 0, thr = 0;
    if (colon == std::string::npos || !cli::ParseU64(v.substr(0, colon), &seg) ||
        !cli::ParseU64(v.substr(colon + 1), &thr) || seg == 0 || seg > (1u << 20) || thr == 0 || thr > seg) {
      return "--predict: expected N:P with 1 <= P <= N, got \"" + v + "\"";
    }
    c->replay.engine.predict_segment_pages = uint32_t(seg);
    c->replay.engine.predict_threshold = uint32_t(thr);
  }
  if (app.count("--backing")) {
    if (f.backing != "anon" && f.backing != "memfd") return "--backing: expected anon or memfd, got \"" + f.backing + "\"";
    c->replay.memory.backing = f.backing == "memfd" ? LazyBacking::kMemfd : LazyBacking::kAnonymous;
  }
  if (app.count("--handlers")) {
    if (!cli::ParseU64(f.handlers, &n) || n == 0 || n > 256) return "--handlers: bad value \"" + f.handlers + "\"";
    c->replay.memory.handler_threads = unsigned(n);
  }
  return "";
}

// Returns 0 to go on, -1 after --help, else the exit code.
int ParseArgs(cli::Args& args, cli::Parser& p, Config* c) {
  CLI::App& app = p.app();
  FlagText f;
  app.add_option("CKPT", c->ckpt);
  app.add_option("--trace", c->trace);
  app.add_option("--threads", f.threads);
  app.add_option("--loader", f.loader);
  app.add_option("--rate-limit", f.rate_limit);
  app.add_flag("--preload-ws", c->replay.engine.preload_working_set);
  app.add_flag("--eager", c->replay.engine.preload_all);
  app.add_option("--stream-faults", f.stream_faults);
  app.add_flag("--wait-loader", c->replay.wait_loader);
  app.add_option("--predict", f.predict);
  app.add_option("--record-trace", c->replay.record_trace_path);
  app.add_option("--timeline", c->replay.timeline_path);
  app.add_option("--backing", f.backing);
  app.add_option("--handlers", f.handlers);
  app.add_flag("--json", c->json);
  p.AddReaderFlags(&c->reader_flags);
  if (int rc = p.Parse(args); rc >= 0) return rc == cli::kExitOk ? -1 : rc;
  if (std::string bad = ConvertFlags(app, f, c); !bad.empty()) return p.UsageError(bad);
  if (c->ckpt.empty() || c->trace.empty()) return p.UsageError("CKPT and --trace FILE are required");
  if (int rc = p.CheckReaderFlags(c->reader_flags, &c->reader); rc >= 0) return rc;
  return 0;
}

}  // namespace

int Replay(cli::Args& args) {
  const std::string tool = "hlt-restore replay";
  Config c;
  cli::Parser p(tool, std::string(kReplayUsage) + cli::kReaderFlagsHelp + kReplayExitCodes);
  int rc = ParseArgs(args, p, &c);
  if (rc != 0) return rc < 0 ? cli::kExitOk : rc;

  Clock::time_point t_open = Clock::now();
  if (int opened = p.OpenReaderFlags(c.reader_flags, &c.reader); opened >= 0) return opened;
  auto reader = CheckpointReader::Open(c.ckpt, c.reader);
  if (!reader) return cli::Fail(tool, reader.error());
  const CheckpointReader& r = **reader;
  double open_seconds = std::chrono::duration<double>(Clock::now() - t_open).count();
  auto text = ReadTextFile(c.trace);
  if (!text) return cli::Fail(tool, text.error());
  auto trace = ParseReplayTrace(*text, c.trace, r.regions());
  if (!trace) return cli::Fail(tool, trace.error());

  TraceReplayStage stage;
  auto replayed = ReplayTrace(r, *trace, c.replay, &stage);
  if (!replayed) {
    Status e = replayed.error();
    std::cerr << tool << ": " << e.ToString() << "\n";
    if (stage == TraceReplayStage::kTouch) {
      // A touching thread is held in the kernel on a page that will not come: leave without joining it.
      std::fflush(nullptr);
      std::_Exit(cli::ExitCodeFor(e));
    }
    const bool no_uffd = stage == TraceReplayStage::kMemory && e.code() == StatusCode::kUnsupported;
    return no_uffd ? cli::kExitIo : cli::ExitCodeFor(e);
  }
  replayed->open_seconds = open_seconds;
  if (c.json) {
    std::cout << TraceReplayJson(c.ckpt, c.trace, c.replay, *replayed);
  } else {
    std::cout << TraceReplayText(c.ckpt, c.replay, *replayed);
  }
  if (replayed->mismatches > 0) {
    std::cerr << tool << ": " << replayed->mismatches
              << " touched page(s) differ from the checkpoint; first: " << replayed->first_mismatch << "\n";
    return cli::kExitCorrupt;
  }
  return cli::kExitOk;
}

}  // namespace halite::restore
