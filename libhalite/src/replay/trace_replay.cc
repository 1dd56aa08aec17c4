// ReplayTrace: the touching threads, the check of the touched pages, and the phases of a replay (moved here from
// tools/hlt-restore/replay.cc).
#include "halite/trace_replay.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "halite/format_constants.h"

namespace halite {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPage = format::kPageSize;

// What the touching threads did.
struct TouchLog {
  std::vector<uint64_t> first_touch_index;  // per distinct page touched: the trace index of its first touch
  std::vector<uint64_t> pages;              // ... and its global number (same order)
};

class Toucher {
 public:
  Toucher(const CheckpointReader& reader, LazyMemory& memory, const RestoreEngine& engine,
          std::span<const TraceAccess> trace, unsigned threads)
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
  std::span<const TraceAccess> trace_;
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

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Status WriteRecordedTrace(const std::string& path, const CheckpointReader& r, const std::vector<uint64_t>& pages) {
  std::vector<PageRef> refs;
  for (uint64_t g : pages) refs.push_back(r.PageOf(g));
  std::string out = FormatAccessTrace(refs, r.regions());
  FILE* f = std::fopen(path.c_str(), "w");
  bool ok = f && std::fwrite(out.data(), 1, out.size(), f) == out.size();
  ok = f && std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::IoError(path + ": cannot write the recorded trace", errno);
}

// A faulting thread resumes as soon as its page is in; let the handler finish counting its fault.
void WaitForFaultCounts(const LazyMemory& memory) {
  for (int i = 0; i < 1000; ++i) {
    LazyMemoryStats now = memory.Stats();
    if (now.faults_done == now.faults) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Result<TraceReplayResult> ReplayTrace(const CheckpointReader& r, std::span<const TraceAccess> trace,
                                      TraceReplayOptions o, TraceReplayStage* stage) {
  TraceReplayStage ignored;
  TraceReplayStage& at = stage ? *stage : ignored;
  TraceReplayResult res;
  res.accesses = trace.size();
  o.engine.record_timeline = !o.timeline_path.empty();
  // The clock starts when the restore does: mapping, preload and engine start count towards the first access.
  Clock::time_point t0 = Clock::now();
  at = TraceReplayStage::kMemory;
  o.memory.on_fault_error = [](PageRef, const Status&) { return FaultErrorAction::kHold; };
  auto memory = LazyMemory::Create(r.regions(), o.memory);
  if (!memory) return memory.error();
  at = TraceReplayStage::kEngine;
  auto engine = RestoreEngine::Create(r, (*memory)->sink(), o.engine);
  if (!engine) return engine.error();
  // Handlers call the engine: stop them before the engine goes, on every way out.
  struct StopHandlers {
    LazyMemory* m;
    ~StopHandlers() {
      if (m) m->Stop();
    }
  } stop_handlers{memory->get()};
  Status s = (*engine)->Start();
  if (!s.ok()) return s;
  res.start_seconds = Since(t0);
  s = (*memory)->Serve(**engine);
  if (!s.ok()) return s;

  at = TraceReplayStage::kTouch;
  auto toucher_owner = std::make_unique<Toucher>(r, **memory, **engine, trace, o.threads);
  Toucher& toucher = *toucher_owner;
  if (!toucher.Run(t0)) {
    // A fault failed and its thread is held in the kernel: it cannot be joined, so everything it uses stays
    // alive (leaked on purpose) and the caller exits without running destructors.
    Status e = (*memory)->status();
    stop_handlers.m = nullptr;
    (void)memory->release();
    (void)engine->release();
    (void)toucher_owner.release();
    return e;
  }
  res.seconds = Since(t0);
  at = TraceReplayStage::kAfter;
  if (o.wait_loader && o.engine.background_loader) {
    s = (*engine)->WaitForLoader();
    if (!s.ok()) return s.WithContext("the loader");
    res.loader_done_seconds = Since(t0);
  }
  WaitForFaultCounts(**memory);
  res.engine = (*engine)->Stats();
  res.reader = r.read_stats();  // before the check below reads blocks again
  res.memory = (*memory)->Stats();
  (*engine)->Stop();

  TouchLog log = toucher.Log();
  Check check = VerifyTouched(r, **memory, log.pages);
  if (!check.status.ok()) return check.status.WithContext("verifying the touched pages");
  if (!o.record_trace_path.empty()) {
    if (s = WriteRecordedTrace(o.record_trace_path, r, log.pages); !s.ok()) return s;
  }
  if (!o.timeline_path.empty()) {
    if (s = (*engine)->WriteTimelineCsv(o.timeline_path); !s.ok()) return s;
  }
  res.touched = log.pages.size();
  res.nonzero = check.nonzero;
  res.mismatches = check.mismatches;
  res.first_mismatch = check.first_mismatch;
  res.prefetched = toucher.prefetched();
  res.missing_touches = toucher.missing_touches();
  res.touch_stall_seconds = toucher.stall_seconds();
  res.first_access_seconds = toucher.first_access_seconds();
  return res;
}

}  // namespace halite
