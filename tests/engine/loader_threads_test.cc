// Loader helpers (RestoreEngineOptions::loader_threads): several threads stream the restore order of a local
// file together, and every promise of the single loader still holds - each block read and installed once with
// the saved bytes while faults come, WaitForLoader returning only once the last block of every thread is in, a
// block error reported, and a loader that batches or is rate-limited staying on one thread.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "engine_test_util.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

namespace {

// A recording sink that also records how many background installs were in flight at once (each takes a while,
// so that threads loading together overlap).
class OverlapSink : public RecordingSink {
 public:
  using RecordingSink::RecordingSink;
  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    if (priority != InstallPriority::kBackground) return RecordingSink::Install(batch, priority, runs_installed);
    const int now = in_flight_.fetch_add(1) + 1;
    for (int seen = max_in_flight_.load(); now > seen && !max_in_flight_.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    Status s = RecordingSink::Install(batch, priority, runs_installed);
    in_flight_.fetch_sub(1);
    return s;
  }
  int max_in_flight() const { return max_in_flight_.load(); }

 private:
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
};

MemCheckpoint Checkpoint() {
  WriterOptions wo;
  wo.block_pages = 16;
  wo.dictionary = DictionaryMode::kOff;
  return BuildCheckpoint({{"ram", 2048}, {"vga", 64}}, {SyntheticBytes(2048 * 4096, 41), SyntheticBytes(64 * 4096, 42)},
                         wo);
}

}  // namespace

TEST_CASE("three loader threads stream the restore order together while faults come: each block once, all in when "
          "WaitForLoader returns",
          "[engine][loader][threads]") {
  MemCheckpoint m = Checkpoint();
  auto reader = OpenMem(m);
  OverlapSink sink(m.regions);
  RestoreEngineOptions opts;
  opts.loader_threads = 3;
  opts.loader_nice = 0;
  auto engine = RestoreEngine::Create(*reader, sink, opts);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  // Faults on random pages while the loaders run: a block is never read by two of them, or by one and a fault.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    PageRef p = reader->PageOf(rng() % reader->total_pages());
    auto f = (*engine)->HandleFault(p);
    REQUIRE(f.has_value());
  }
  REQUIRE((*engine)->WaitForLoader().ok());
  // Everything is in at that moment, not a little later.
  CheckEveryStoredPage(sink, m, *reader);
  const auto st = (*engine)->Stats();
  const size_t blocks = reader->blocks().size();
  CHECK(st.blocks_read == blocks);
  CHECK(st.blocks_loaded == blocks);
  CHECK(st.blocks_read_loader + st.blocks_read_demand == blocks);
  CHECK(st.blocks_read_loader > 0);
  CHECK(sink.max_in_flight() >= 2);  // the helpers did load beside the background thread
  CHECK(sink.max_in_flight() <= 3);
  (*engine)->Stop();
}

TEST_CASE("a block that cannot be read by a loader helper is reported by WaitForLoader, the others are in",
          "[engine][loader][threads]") {
  MemCheckpoint m = Checkpoint();
  FaultyFile* file = nullptr;
  auto reader = OpenMem(m, &file);
  const uint32_t bad = reader->restore_order()[reader->restore_order().size() / 2];
  file->FailAt(reader->blocks()[bad].offset, 1000);  // every attempt fails
  OverlapSink sink(m.regions);
  RestoreEngineOptions opts;
  opts.loader_threads = 2;
  opts.loader_nice = 0;
  opts.retry_backoff = std::chrono::microseconds(10);
  auto engine = RestoreEngine::Create(*reader, sink, opts);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  Status s = (*engine)->WaitForLoader();
  CHECK_FALSE(s.ok());
  INFO(s.ToString());
  CHECK(s.ToString().find("block " + std::to_string(bad) + " at offset") != std::string::npos);
  CHECK((*engine)->Stats().blocks_loaded == reader->blocks().size() - 1);
  CHECK(sink.double_installs() == 0);
  (*engine)->Stop();
}

TEST_CASE("a rate-limited or batching loader stays on one thread whatever loader_threads says",
          "[engine][loader][threads]") {
  MemCheckpoint m = Checkpoint();
  for (bool limited : {true, false}) {
    auto reader = OpenMem(m);
    OverlapSink sink(m.regions);
    RestoreEngineOptions opts;
    opts.loader_threads = 4;
    opts.loader_nice = 0;
    if (limited) {
      opts.loader_rate_bytes_per_s = 1ull << 40;  // a limit that never waits: only its presence counts
    } else {
      opts.loader_batch_bytes = 1 << 20;
    }
    auto engine = RestoreEngine::Create(*reader, sink, opts);
    REQUIRE(engine.has_value());
    REQUIRE((*engine)->Start().ok());
    REQUIRE((*engine)->WaitForLoader().ok());
    INFO("rate limited: " << limited);
    CHECK(sink.max_in_flight() == 1);
    CheckEveryStoredPage(sink, m, *reader);
    (*engine)->Stop();
  }
}
