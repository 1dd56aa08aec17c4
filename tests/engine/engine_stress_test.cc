// Many threads fault at random while the loader and a prediction run: every page ends up right, none twice.
// Small enough to run under ThreadSanitizer, which is the point of it.
#include <catch2/catch.hpp>
#include <random>

#include "engine_test_util.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

TEST_CASE("8 threads fault at random while the loader and predictions run", "[engine][concurrency]") {
  const uint64_t pages = 4096;  // 16 MiB
  WriterOptions wo;
  wo.block_pages = 32;
  MemCheckpoint m = BuildCheckpoint({{"ram", pages}, {"rom", 64}},
                                    {SyntheticBytes(pages * 4096, 11), SyntheticBytes(64 * 4096, 12)}, wo);
  for (int round = 0; round < 3; ++round) {
    DYNAMIC_SECTION("round " << round) {
      FaultyFile* file = nullptr;
      auto reader = OpenMem(m, &file);
      file->set_delay_us(round == 1 ? 200 : 0);  // round 1: a slower disk, so reads overlap more
      RecordingSink sink(m.regions);
      RestoreEngineOptions o;
      o.background_loader = round != 2;
      o.loader_rate_bytes_per_s = 8 << 20;
      o.predict_segment_pages = 64;
      o.predict_threshold = 4;
      o.record_timeline = true;
      auto engine = RestoreEngine::Create(*reader, sink, o);
      REQUIRE(engine.has_value());
      REQUIRE((*engine)->Start().ok());
      std::atomic<uint64_t> bad{0}, errors{0};
      std::atomic<bool> stop_observer{false};
      std::thread observer([&] {
        while (!stop_observer) {
          auto st = (*engine)->Stats();
          if (st.fault_latency.p50_ns > st.fault_latency.max_ns) bad++;
          (void)(*engine)->Timeline();
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      });
      std::vector<std::thread> threads;
      for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 rng(uint64_t(round * 100 + t));
          for (int i = 0; i < 600; ++i) {
            PageRef p;
            if (i % 3 == 0) {
              p = {1, rng() % 64};
            } else if (t % 2 == 0) {
              p = {0, rng() % pages};  // random
            } else {
              p = {0, (uint64_t(t) * 512 + uint64_t(i)) % pages};  // sequential
            }
            auto out = (*engine)->HandleFault(p);
            if (!out) {
              errors++;
              continue;
            }
            if (!sink.Installed(p) && !(*engine)->IsInstalled(p)) bad++;
            if (std::memcmp(sink.Page(p), m.content[p.region].data() + p.page * 4096, 4096) != 0) bad++;
          }
        });
      }
      for (auto& t : threads) t.join();
      stop_observer = true;
      observer.join();
      (*engine)->Stop();
      CHECK(errors == 0);
      CHECK(bad == 0);
      CHECK(sink.double_installs() == 0);
      auto st = (*engine)->Stats();
      CHECK(st.blocks_read <= reader->blocks().size());
      CHECK(st.faults_failed == 0);
      CHECK(st.fault_latency.count == 8 * 600);
    }
  }
}
