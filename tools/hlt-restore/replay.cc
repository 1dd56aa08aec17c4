// hlt-restore replay CKPT --trace FILE [...]: restore lazily into userfaultfd memory of this process, touch the
// pages of a trace, check every byte, and print the engine's statistics. Users run it to judge a checkpoint's
// layout against a recorded access pattern; other tools parse its --json output, so its keys are stable.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/hint_files.h"
#include "halite/lazy_memory.h"
#include "halite/restore_engine.h"
#include "common/cli_parser.h"
#include "hlt-restore/restore_modes.h"

namespace halite::restore {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPage = format::kPageSize;

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
  std::string ckpt, trace, record, timeline;
  unsigned threads = 1;
  bool json = false;
  bool wait_loader = false;
  RestoreEngineOptions engine;
  LazyMemoryOptions memory;
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
    c->threads = unsigned(n);
  }
  if (app.count("--loader")) {
    if (f.loader != "on" && f.loader != "off") return "--loader: expected on or off, got \"" + f.loader + "\"";
    c->engine.background_loader = f.loader == "on";
  }
  if (app.count("--rate-limit")) {
    if (!cli::ParseU64(f.rate_limit, &n)) return "--rate-limit: bad value \"" + f.rate_limit + "\"";
    c->engine.loader_rate_bytes_per_s = n;
  }
  if (app.count("--stream-faults")) {
    if (f.stream_faults != "on" && f.stream_faults != "off") {
      return "--stream-faults: expected on or off, got \"" + f.stream_faults + "\"";
    }
    c->engine.stream_faults = f.stream_faults == "on";
  }
  if (app.count("--predict")) {
    const std::string& v = f.predict;
    size_t colon = v.find(':');
    uint64_t seg = 0, thr = 0;
    if (colon == std::string::npos || !cli::ParseU64(v.substr(0, colon), &seg) ||
        !cli::ParseU64(v.substr(colon + 1), &thr) || seg == 0 || seg > (1u << 20) || thr == 0 || thr > seg) {
      return "--predict: expected N:P with 1 <= P <= N, got \"" + v + "\"";
    }
    c->engine.predict_segment_pages = uint32_t(seg);
    c->engine.predict_threshold = uint32_t(thr);
  }
  if (app.count("--backing")) {
    if (f.backing != "anon" && f.backing != "memfd") return "--backing: expected anon or memfd, got \"" + f.backing + "\"";
    c->memory.backing = f.backing == "memfd" ? LazyBacking::kMemfd : LazyBacking::kAnonymous;
  }
  if (app.count("--handlers")) {
    if (!cli::ParseU64(f.handlers, &n) || n == 0 || n > 256) return "--handlers: bad value \"" + f.handlers + "\"";
    c->memory.handler_threads = unsigned(n);
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
  app.add_flag("--preload-ws", c->engine.preload_working_set);
  app.add_flag("--eager", c->engine.preload_all);
  app.add_option("--stream-faults", f.stream_faults);
  app.add_flag("--wait-loader", c->wait_loader);
  app.add_option("--predict", f.predict);
  app.add_option("--record-trace", c->record);
  app.add_option("--timeline", c->timeline);
  app.add_option("--backing", f.backing);
  app.add_option("--handlers", f.handlers);
  app.add_flag("--json", c->json);
  p.AddReaderFlags(&c->reader_flags);
  if (int rc = p.Parse(args); rc >= 0) return rc == cli::kExitOk ? -1 : rc;
  if (std::string bad = ConvertFlags(app, f, c); !bad.empty()) return p.UsageError(bad);
  c->engine.record_timeline = !c->timeline.empty();
  if (c->ckpt.empty() || c->trace.empty()) return p.UsageError("CKPT and --trace FILE are required");
  if (int rc = p.CheckReaderFlags(c->reader_flags, &c->reader); rc >= 0) return rc;
  return 0;
}

// What the touching threads did.
struct TouchLog {
  std::vector<uint64_t> first_touch_index;  // per distinct page touched: the trace index of its first touch
  std::vector<uint64_t> pages;              // ... and its global number (same order)
};

class Toucher {
 public:
  Toucher(const CheckpointReader& reader, LazyMemory& memory, const RestoreEngine& engine,
          const std::vector<TraceAccess>& trace, unsigned threads)
      : reader_(reader),
        memory_(memory),
        engine_(engine),
        trace_(trace),
        threads_(threads),
        touched_(reader.total_pages()) {}

  // Runs the trace; returns false when a fault error stopped it (the caller exits: held threads cannot join).
  bool Run(Clock::time_point t0) {
    t0_ = t0;
    for (unsigned i = 0; i < threads_; ++i) workers_.emplace_back([this, i] { Work(i); });
    std::unique_lock<std::mutex> lock(mu_);
    while (done_ < threads_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (!memory_.status().ok()) return false;
    }
    lock.unlock();
    for (auto& w : workers_) w.join();
    return true;
  }

  double first_access_seconds() const { return double(first_ns_.load()) / 1e9; }
  // First touches of pages the engine had installed before the touch (by an earlier block or the loader).
  uint64_t prefetched() const { return prefetched_.load(); }
  // Touches of pages the engine had not installed yet, and the sum of the time the touching threads spent in them.
  uint64_t missing_touches() const { return missing_touches_.load(); }
  double stall_seconds() const { return double(stall_ns_.load()) / 1e9; }
  TouchLog Log() const {
    // First touches in trace order: the order the guest would have shown a recorder.
    std::vector<std::pair<uint64_t, uint64_t>> all;
    for (const auto& l : logs_) all.insert(all.end(), l.begin(), l.end());
    std::sort(all.begin(), all.end());
    TouchLog log;
    for (auto& [i, g] : all) {
      log.first_touch_index.push_back(i);
      log.pages.push_back(g);
    }
    return log;
  }

 private:
  void Work(unsigned id) {
    std::vector<std::pair<uint64_t, uint64_t>> log;
    for (uint64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < trace_.size();) {
      const TraceAccess& a = trace_[i];
      uint8_t* p = memory_.base(a.page.region) + a.page.page * kPage;
      bool was_installed = engine_.IsInstalled(a.page);
      // A touch of a page not in yet is a fault (or meets one in flight): time what this thread waits for it,
      // userfaultfd round trip included (the engine sees only its own part).
      const Clock::time_point t_touch = was_installed ? Clock::time_point{} : Clock::now();
      if (a.write) {
        // A write that keeps the content: the page faults in for writing and still equals the checkpoint.
        __atomic_fetch_add(reinterpret_cast<uint64_t*>(p), 0, __ATOMIC_RELAXED);
      } else {
        // Atomic too: another thread may be doing the content-keeping write above on the same word.
        (void)__atomic_load_n(reinterpret_cast<uint64_t*>(p), __ATOMIC_RELAXED);
      }
      if (!was_installed) {
        missing_touches_.fetch_add(1, std::memory_order_relaxed);
        stall_ns_.fetch_add(uint64_t(std::chrono::nanoseconds(Clock::now() - t_touch).count()),
                            std::memory_order_relaxed);
      }
      if (first_ns_.load(std::memory_order_relaxed) == 0) {
        uint64_t zero = 0, now = uint64_t((Clock::now() - t0_).count());
        first_ns_.compare_exchange_strong(zero, now);
      }
      uint64_t g = reader_.GlobalPage(a.page);
      if (!touched_[g].exchange(true, std::memory_order_relaxed)) {
        log.emplace_back(i, g);
        if (was_installed) prefetched_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    logs_.push_back(std::move(log));
    ++done_;
    cv_.notify_all();
    (void)id;
  }

  const CheckpointReader& reader_;
  LazyMemory& memory_;
  const RestoreEngine& engine_;
  const std::vector<TraceAccess>& trace_;
  unsigned threads_;
  std::vector<std::atomic<bool>> touched_;
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> first_ns_{0};
  std::atomic<uint64_t> prefetched_{0};
  std::atomic<uint64_t> missing_touches_{0};
  std::atomic<uint64_t> stall_ns_{0};
  Clock::time_point t0_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  unsigned done_ = 0;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> logs_;
};

struct Check {
  uint64_t mismatches = 0;
  uint64_t nonzero = 0;  // touched pages whose content is not all zero
  std::string first_mismatch;
  Status status;
};

// Compares every touched page with the checkpoint, reading each needed block once (after the timed part).
Check VerifyTouched(const CheckpointReader& reader, const LazyMemory& memory, const std::vector<uint64_t>& pages) {
  Check c;
  std::vector<std::pair<uint32_t, uint64_t>> stored;  // (block, global page)
  static const std::vector<uint8_t> kZero(kPage, 0);
  auto mismatch = [&](uint64_t g, const char* what) {
    if (c.mismatches++ == 0) {
      PageRef r = reader.PageOf(g);
      c.first_mismatch =
          "region \"" + reader.regions()[r.region].name + "\" page " + std::to_string(r.page) + ": " + what;
    }
  };
  for (uint64_t g : pages) {
    PageLocation loc = reader.Locate(g);
    if (loc.kind == PageKind::kStored) {
      stored.emplace_back(loc.block, g);
      continue;
    }
    PageRef r = reader.PageOf(g);
    if (std::memcmp(memory.base(r.region) + r.page * kPage, kZero.data(), kPage) != 0) {
      mismatch(g, "expected a zero page");
    }
  }
  std::sort(stored.begin(), stored.end());
  std::vector<uint8_t> raw;
  for (size_t i = 0; i < stored.size();) {
    uint32_t b = stored[i].first;
    raw.resize(reader.blocks()[b].raw_length());
    Status s = reader.ReadBlock(b, raw);
    if (!s.ok()) {
      c.status = s;
      return c;
    }
    for (; i < stored.size() && stored[i].first == b; ++i) {
      uint64_t g = stored[i].second;
      PageRef r = reader.PageOf(g);
      const uint8_t* want = raw.data() + uint64_t(reader.Locate(g).slot_in_block) * kPage;
      if (std::memcmp(memory.base(r.region) + r.page * kPage, want, kPage) != 0) {
        mismatch(g, "content differs from the checkpoint");
      }
      if (std::memcmp(want, kZero.data(), kPage) != 0) ++c.nonzero;
    }
  }
  return c;
}

double Us(uint64_t ns) { return double(ns) / 1e3; }

// What a replay measured, for the report.
struct ReplayOutcome {
  size_t accesses = 0;
  uint64_t touched = 0;
  Check check;
  RestoreEngineStats st;
  ReaderStats rs;
  LazyMemoryStats ms;
  double seconds = 0, open_seconds = 0, start_seconds = 0, loader_done_seconds = 0;
  uint64_t prefetched = 0, missing_touches = 0;
  double touch_stall_seconds = 0, first_access_seconds = 0;
};

void PrintReplayJson(const Config& c, const ReplayOutcome& o) {
  nlohmann::ordered_json j = {
      {"checkpoint", c.ckpt},
      {"trace", c.trace},
      {"accesses", o.accesses},
      {"pages_touched", o.touched},
      {"nonzero_pages_touched", o.check.nonzero},
      {"pages_prefetched", o.prefetched},
      {"threads", c.threads},
      {"loader", c.engine.background_loader},
      {"preload_ws", c.engine.preload_working_set},
      {"eager", c.engine.preload_all},
      {"stream_faults", c.engine.stream_faults},
      {"faults_blocking", o.st.faults_blocking},
      {"faults_joined", o.st.faults_joined},
      {"faults_zero", o.st.faults_zero},
      {"faults_present", o.st.faults_present},
      {"stall_seconds", double(o.st.stall_ns) / 1e9},
      {"stall_blocking_seconds", double(o.st.stall_blocking_ns) / 1e9},
      {"stall_joined_seconds", double(o.st.stall_joined_ns) / 1e9},
      {"stall_blocking_p50_us", Us(o.st.stall_latency.p50_ns)},
      {"stall_blocking_p99_us", Us(o.st.stall_latency.p99_ns)},
      {"stall_joined_p50_us", Us(o.st.join_latency.p50_ns)},
      {"stall_joined_p99_us", Us(o.st.join_latency.p99_ns)},
      {"touches_missing", o.missing_touches},
      {"touch_stall_seconds", o.touch_stall_seconds},
      {"blocks_read", o.st.blocks_read},
      {"blocks_read_demand", o.st.blocks_read_demand},
      {"blocks_read_loader", o.st.blocks_read_loader},
      {"blocks_read_predicted", o.st.blocks_read_predicted},
      {"blocks_read_preload", o.st.blocks_read_preload},
      {"blocks_total", o.st.blocks_total},
      {"bytes_read", o.st.bytes_read},
      {"loader_batches", o.st.loader_batches},
      {"loader_fetched_unused", o.st.loader_fetched_unused},
      {"preload_batches", o.st.preload_batches},
      {"storage_requests", o.rs.storage_requests},
      {"storage_bytes", o.rs.storage_bytes},
      {"blocks_fetched", o.rs.blocks_fetched},
      {"block_bytes_fetched", o.rs.block_bytes_fetched},
      {"cache_hits", o.rs.cache_hits},
      {"cache_misses", o.rs.cache_misses},
      {"cache_dropped", o.rs.cache_dropped},
      {"cache_inserts", o.rs.cache_inserts},
      {"bytes_decompressed", o.st.bytes_decompressed},
      {"pages_installed", o.st.pages_installed},
      {"zero_pages_installed", o.st.zero_pages_installed},
      {"uffd_faults", o.ms.faults},
      {"seconds", o.seconds},
      {"open_seconds", o.open_seconds},
      {"start_seconds", o.start_seconds},
      {"loader_done_seconds", o.loader_done_seconds},
      {"time_to_first_access_us", o.first_access_seconds * 1e6},
      {"read_seconds", double(o.st.read_ns) / 1e9},
      {"install_seconds", double(o.st.install_ns) / 1e9},
      {"fault_p50_us", Us(o.st.fault_latency.p50_ns)},
      {"fault_p90_us", Us(o.st.fault_latency.p90_ns)},
      {"fault_p99_us", Us(o.st.fault_latency.p99_ns)},
      {"fault_max_us", Us(o.st.fault_latency.max_ns)},
      {"blocking_p50_us", Us(o.st.blocking_latency.p50_ns)},
      {"blocking_p99_us", Us(o.st.blocking_latency.p99_ns)},
      {"mismatches", o.check.mismatches},
  };
  std::cout << cli::JsonText(j);
}

void PrintReplayText(const Config& c, const ReplayOutcome& o) {
  std::printf("replayed %zu accesses to %llu pages (%llu non-zero) of %s with %u thread(s), loader %s%s%s\n",
              o.accesses, (unsigned long long)o.touched, (unsigned long long)o.check.nonzero, c.ckpt.c_str(),
              c.threads, c.engine.background_loader ? "on" : "off",
              c.engine.preload_working_set ? ", working set preloaded" : "", c.engine.preload_all ? ", eager" : "");
  std::printf("  time            %.3f s (first access after %.1f us; start %.3f s)\n", o.seconds,
              o.first_access_seconds * 1e6, o.start_seconds);
  if (o.loader_done_seconds > 0) std::printf("  loader done     %.3f s\n", o.loader_done_seconds);
  std::printf("  faults          %llu blocking (%llu joined a read in flight), %llu zero, %llu present\n",
              (unsigned long long)o.st.faults_blocking, (unsigned long long)o.st.faults_joined,
              (unsigned long long)o.st.faults_zero, (unsigned long long)o.st.faults_present);
  std::printf("  stall           %.2f ms in the engine (blocking faults %.2f ms, of which joined %.2f ms; "
              "blocking p50 %.1f us, p99 %.1f us); touching threads %.2f ms in %llu touches of pages not in yet\n",
              double(o.st.stall_ns) / 1e6, double(o.st.stall_blocking_ns) / 1e6, double(o.st.stall_joined_ns) / 1e6,
              Us(o.st.stall_latency.p50_ns), Us(o.st.stall_latency.p99_ns), o.touch_stall_seconds * 1e3,
              (unsigned long long)o.missing_touches);
  std::printf("  prefetched      %llu of the pages o.touched were in before their first touch\n",
              (unsigned long long)o.prefetched);
  std::printf("  fault latency   p50 %.1f us, p99 %.1f us, max %.1f us (blocking: p50 %.1f us, p99 %.1f us)\n",
              Us(o.st.fault_latency.p50_ns), Us(o.st.fault_latency.p99_ns), Us(o.st.fault_latency.max_ns),
              Us(o.st.blocking_latency.p50_ns), Us(o.st.blocking_latency.p99_ns));
  std::printf("  blocks read     %llu of %llu (demand %llu, loader %llu, predicted %llu, preload %llu)\n",
              (unsigned long long)o.st.blocks_read, (unsigned long long)o.st.blocks_total,
              (unsigned long long)o.st.blocks_read_demand, (unsigned long long)o.st.blocks_read_loader,
              (unsigned long long)o.st.blocks_read_predicted, (unsigned long long)o.st.blocks_read_preload);
  std::printf("  bytes read      %s (%s decompressed)\n", cli::HumanBytes(o.st.bytes_read).c_str(),
              cli::HumanBytes(o.st.bytes_decompressed).c_str());
  std::printf("  storage         %llu requests, %s", (unsigned long long)o.rs.storage_requests,
              cli::HumanBytes(o.rs.storage_bytes).c_str());
  if (o.st.preload_batches) std::printf(" (preload: %llu batches)", (unsigned long long)o.st.preload_batches);
  if (o.st.loader_batches) {
    std::printf(" (loader: %llu batches, %llu blocks a fault took meanwhile)", (unsigned long long)o.st.loader_batches,
                (unsigned long long)o.st.loader_fetched_unused);
  }
  std::printf("\n");
  if (std::string cached = cli::StorageSummary(o.rs); !cached.empty()) std::printf("  block cache     %s\n", cached.c_str());
  std::printf("  mismatches      %llu%s%s\n", (unsigned long long)o.check.mismatches,
              o.check.mismatches ? ", first: " : "", o.check.first_mismatch.c_str());
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

  // The clock starts when the restore does: mapping, preload and engine start count towards the first access.
  Clock::time_point t0 = Clock::now();
  c.memory.on_fault_error = [](PageRef, const Status&) { return FaultErrorAction::kHold; };
  auto memory = LazyMemory::Create(r.regions(), c.memory);
  if (!memory) {
    Status s = memory.error();
    std::cerr << tool << ": " << s.ToString() << "\n";
    return s.code() == StatusCode::kUnsupported ? cli::kExitIo : cli::ExitCodeFor(s);
  }
  auto engine = RestoreEngine::Create(r, (*memory)->sink(), c.engine);
  if (!engine) return cli::Fail(tool, engine.error());
  // Handlers call the engine: stop them before the engine goes, on every way out.
  struct StopHandlers {
    LazyMemory* m;
    ~StopHandlers() { m->Stop(); }
  } stop_handlers{memory->get()};
  Status s = (*engine)->Start();
  if (!s.ok()) return cli::Fail(tool, s);
  double start_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  s = (*memory)->Serve(**engine);
  if (!s.ok()) return cli::Fail(tool, s);

  Toucher toucher(r, **memory, **engine, *trace, c.threads);
  if (!toucher.Run(t0)) {
    // A fault failed and its thread is held in the kernel: report and leave without joining it.
    Status e = (*memory)->status();
    std::cerr << tool << ": " << e.ToString() << "\n";
    std::fflush(nullptr);
    std::_Exit(cli::ExitCodeFor(e));
  }
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  double loader_done_seconds = 0;
  if (c.wait_loader && c.engine.background_loader) {
    s = (*engine)->WaitForLoader();
    if (!s.ok()) return cli::Fail(tool, s.WithContext("the loader"));
    loader_done_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  // A faulting thread resumes as soon as its page is in; let the handler finish counting its fault.
  for (int i = 0; i < 1000; ++i) {
    LazyMemoryStats now = (*memory)->Stats();
    if (now.faults_done == now.faults) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  RestoreEngineStats st = (*engine)->Stats();
  const ReaderStats rs = r.read_stats();  // before the check below reads blocks again
  LazyMemoryStats ms = (*memory)->Stats();
  (*engine)->Stop();

  TouchLog log = toucher.Log();
  Check check = VerifyTouched(r, **memory, log.pages);
  if (!check.status.ok()) return cli::Fail(tool, check.status.WithContext("verifying the touched pages"));
  if (!c.record.empty()) {
    std::vector<PageRef> refs;
    for (uint64_t g : log.pages) refs.push_back(r.PageOf(g));
    std::string out = FormatAccessTrace(refs, r.regions());
    FILE* f = std::fopen(c.record.c_str(), "w");
    bool ok = f && std::fwrite(out.data(), 1, out.size(), f) == out.size();
    ok = f && std::fclose(f) == 0 && ok;
    if (!ok) return cli::Fail(tool, Status::IoError(c.record + ": cannot write the recorded trace", errno));
  }
  if (!c.timeline.empty()) {
    s = (*engine)->WriteTimelineCsv(c.timeline);
    if (!s.ok()) return cli::Fail(tool, s);
  }
  ReplayOutcome o;
  o.accesses = trace->size();
  o.touched = log.pages.size();
  o.check = check;
  o.st = st;
  o.rs = rs;
  o.ms = ms;
  o.seconds = seconds;
  o.open_seconds = open_seconds;
  o.start_seconds = start_seconds;
  o.loader_done_seconds = loader_done_seconds;
  o.prefetched = toucher.prefetched();
  o.missing_touches = toucher.missing_touches();
  o.touch_stall_seconds = toucher.stall_seconds();
  o.first_access_seconds = toucher.first_access_seconds();
  if (c.json) {
    PrintReplayJson(c, o);
  } else {
    PrintReplayText(c, o);
  }
  if (check.mismatches > 0) {
    std::cerr << tool << ": " << check.mismatches
              << " touched page(s) differ from the checkpoint; first: " << check.first_mismatch << "\n";
    return cli::kExitCorrupt;
  }
  return cli::kExitOk;
}

}  // namespace halite::restore
