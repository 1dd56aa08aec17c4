// RestoreEngine against a recording sink: what a fault installs, what it reads, and how it fails.
#include "halite/restore_engine.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <set>

#include "engine_test_util.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

namespace {

// Two regions of synthetic memory, with explicit duplicates and zero pages sprinkled in.
MemCheckpoint SmallCheckpoint(WriterOptions options = {}, std::set<uint64_t> absent = {}) {
  std::vector<RegionSpec> specs = {{"ram", 512}, {"vga", 64}};
  std::vector<std::vector<uint8_t>> content = {SyntheticBytes(512 * 4096, 7), SyntheticBytes(64 * 4096, 8)};
  // Page 300 duplicates page 10 (both non-zero), page 301 is zero, vga page 5 duplicates ram page 11.
  std::memset(content[0].data() + 10 * 4096, 0x5A, 4096);
  std::memcpy(content[0].data() + 300 * 4096, content[0].data() + 10 * 4096, 4096);
  std::memset(content[0].data() + 301 * 4096, 0, 4096);
  std::memset(content[0].data() + 11 * 4096, 0xA5, 4096);
  std::memcpy(content[1].data() + 5 * 4096, content[0].data() + 11 * 4096, 4096);
  if (options.block_pages == 64) options.block_pages = 16;
  options.dictionary = DictionaryMode::kOff;
  return BuildCheckpoint(specs, std::move(content), options, {}, absent);
}

RestoreEngineOptions NoLoader() {
  RestoreEngineOptions o;
  o.background_loader = false;
  o.zero_window_pages = 1;
  return o;
}

bool PageEquals(const RecordingSink& sink, const MemCheckpoint& m, PageRef p) {
  return std::memcmp(sink.Page(p), m.content[p.region].data() + p.page * 4096, 4096) == 0;
}

uint64_t FirstStoredPage(const CheckpointReader& r, uint32_t block) { return r.BlockMembers(block)[0].page; }

}  // namespace

TEST_CASE("a fault installs its whole block, duplicates included, and nothing else", "[engine]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, NoLoader());
  REQUIRE(engine.has_value());
  PageRef p{0, 10};
  PageLocation loc = reader->Locate(reader->GlobalPage(p));
  REQUIRE(loc.kind == PageKind::kStored);
  auto out = (*engine)->HandleFault(p);
  REQUIRE(out.has_value());
  CHECK(out->kind == FaultKind::kBlocking);
  CHECK(!out->joined);
  CHECK(out->block == loc.block);
  std::set<uint64_t> members;
  for (const auto& mb : reader->BlockMembers(loc.block)) members.insert(mb.page);
  CHECK(members.count(reader->GlobalPage({0, 300})) == 1);  // the duplicate of page 10 comes with it
  for (uint64_t g = 0; g < reader->total_pages(); ++g) {
    PageRef ref = reader->PageOf(g);
    INFO("page " << g);
    CHECK(sink.Installed(ref) == (members.count(g) > 0));
    if (members.count(g)) CHECK(PageEquals(sink, m, ref));
  }
  auto st = (*engine)->Stats();
  CHECK(st.blocks_read == 1);
  CHECK(st.blocks_read_demand == 1);
  CHECK(st.bytes_read == reader->blocks()[loc.block].stored_length);
  CHECK(st.faults_blocking == 1);
  CHECK(st.pages_installed == members.size());
  // A second fault in the same block is served without I/O.
  auto again = (*engine)->HandleFault(reader->PageOf(*members.rbegin()));
  REQUIRE(again.has_value());
  CHECK(again->kind == FaultKind::kPresent);
  CHECK((*engine)->Stats().blocks_read == 1);
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("zero and absent pages are installed as zero without any I/O", "[engine]") {
  MemCheckpoint m = SmallCheckpoint({}, {5, 6});
  FaultyFile* file = nullptr;
  auto reader = OpenMem(m, &file);
  REQUIRE(reader->Locate(5).kind == PageKind::kAbsent);
  REQUIRE(reader->Locate(301).kind == PageKind::kZero);
  RecordingSink sink(m.regions);
  auto o = NoLoader();
  o.zero_window_pages = 4;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  uint64_t reads_before = file->reads();
  for (uint64_t page : {5, 301}) {
    auto out = (*engine)->HandleFault({0, page});
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kZero);
    CHECK(sink.Installed({0, page}));
    CHECK(PageEquals(sink, m, {0, page}));
  }
  // The window around page 5 (pages 4..7) took the absent page 6 along, and whatever else of it is zero, but no
  // stored page.
  CHECK(sink.Installed({0, 6}));
  for (uint64_t p = 4; p < 8; ++p) {
    INFO("page " << p);
    CHECK(sink.Installed({0, p}) == (reader->Locate(p).kind != PageKind::kStored));
  }
  auto again = (*engine)->HandleFault({0, 6});
  REQUIRE(again.has_value());
  CHECK(again->kind == FaultKind::kPresent);
  CHECK(file->reads() == reads_before);
  auto st = (*engine)->Stats();
  CHECK(st.faults_zero == 2);
  CHECK(st.blocks_read == 0);
  CHECK(st.bytes_read == 0);
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("threads faulting on one block at once read it once", "[engine][concurrency]") {
  MemCheckpoint m = SmallCheckpoint();
  FaultyFile* file = nullptr;
  auto reader = OpenMem(m, &file);
  file->set_delay_us(20000);  // a slow disk: every thread arrives while the read is in flight
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, NoLoader());
  REQUIRE(engine.has_value());
  auto members = reader->BlockMembers(3);
  REQUIRE(members.size() >= 4);
  std::vector<std::thread> threads;
  std::atomic<int> blocking{0}, joined{0}, failed{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto out = (*engine)->HandleFault(reader->PageOf(members[size_t(t) % members.size()].page));
      if (!out) {
        failed++;
        return;
      }
      if (out->kind == FaultKind::kBlocking) blocking++;
      if (out->joined) joined++;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failed == 0);
  auto st = (*engine)->Stats();
  CHECK(st.blocks_read == 1);
  CHECK(blocking + int(st.faults_present) == 8);
  CHECK(joined == blocking - 1);
  CHECK(st.faults_joined == uint64_t(joined.load()));
  for (const auto& mb : members) CHECK(PageEquals(sink, m, reader->PageOf(mb.page)));
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("the background loader restores everything, each block read once", "[engine][loader]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  RestoreEngineOptions o;
  o.record_timeline = true;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE((*engine)->WaitForLoader().ok());
  auto st = (*engine)->Stats();
  CHECK(st.loader_done);
  CHECK(st.blocks_read == reader->blocks().size());
  CHECK(st.blocks_loaded == reader->blocks().size());
  CHECK(st.blocks_read_loader == reader->blocks().size());
  // The loader installs stored pages; zero pages are left to their faults (they cost no I/O).
  for (uint64_t g = 0; g < reader->total_pages(); ++g) {
    PageRef p = reader->PageOf(g);
    if (reader->Locate(g).kind == PageKind::kStored) {
      CHECK(PageEquals(sink, m, p));
    } else {
      auto out = (*engine)->HandleFault(p);
      REQUIRE(out.has_value());
      CHECK(PageEquals(sink, m, p));
    }
  }
  CHECK(sink.double_installs() == 0);
  // The loader followed the restore order.
  auto events = (*engine)->Timeline();
  std::vector<uint32_t> loaded;
  for (const auto& e : events) {
    if (e.kind == EngineEventKind::kLoaderBlock) loaded.push_back(e.block);
  }
  CHECK(loaded == reader->restore_order());
}

TEST_CASE("loader off with an idle sweep: demand paging until the guest goes quiet, then the rest in order",
          "[engine][loader]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  RestoreEngineOptions o = NoLoader();
  o.idle_sweep_ms = 30;
  o.record_timeline = true;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  // The fault comes before Start: the sweep's 30 ms of quiet count from Start, so a slow machine (ASan, load)
  // cannot let the sweep take the fault's block first (it did, in CI's ASan leg).
  const uint32_t first = reader->restore_order().back();  // a fault on the block the sweep would load last
  REQUIRE((*engine)->HandleFault(reader->PageOf(FirstStoredPage(*reader, first))).has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE((*engine)->WaitForLoader().ok());
  auto st = (*engine)->Stats();
  CHECK(st.idle_sweep_started);
  CHECK(st.loader_done);
  CHECK(st.blocks_read_demand == 1);
  CHECK(st.blocks_read_sweep == reader->blocks().size() - 1);
  CHECK(st.blocks_read_loader == 0);
  CHECK(st.blocks_loaded == reader->blocks().size());
  const RestoreEngineStats before = (*engine)->StatsBeforeIdleSweep();
  CHECK(before.blocks_read == 1);  // demand paging alone: the one fault's block
  CHECK(before.blocks_read_sweep == 0);
  for (uint64_t g = 0; g < reader->total_pages(); ++g) {
    if (reader->Locate(g).kind == PageKind::kStored) CHECK(PageEquals(sink, m, reader->PageOf(g)));
  }
  CHECK(sink.double_installs() == 0);
  // The sweep followed the restore order, skipping the block the fault had loaded; every sweep load came after
  // that fault.
  std::vector<uint32_t> swept, expected;
  uint64_t fault_ns = 0, first_sweep_ns = UINT64_MAX;
  for (const auto& e : (*engine)->Timeline()) {
    if (e.kind == EngineEventKind::kFaultBlocking) fault_ns = e.time_ns;
    if (e.kind == EngineEventKind::kLoaderBlock) {
      swept.push_back(e.block);
      first_sweep_ns = std::min(first_sweep_ns, e.time_ns);
    }
  }
  for (uint32_t b : reader->restore_order()) {
    if (b != first) expected.push_back(b);
  }
  CHECK(swept == expected);
  CHECK(first_sweep_ns > fault_ns);
}

TEST_CASE("loader off without an idle sweep: WaitForLoader returns at once and nothing loads by itself",
          "[engine][loader]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, NoLoader());
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE((*engine)->WaitForLoader().ok());
  auto st = (*engine)->Stats();
  CHECK(!st.idle_sweep_started);
  CHECK(st.blocks_read == 0);
}

TEST_CASE("a fault jumps the loader's queue", "[engine][loader]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  RestoreEngineOptions o;
  // About one block a second: the loader would take minutes to reach the last block of the order.
  o.loader_rate_bytes_per_s = reader->blocks()[0].stored_length;
  o.record_timeline = true;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  uint32_t last = reader->restore_order().back();
  auto out = (*engine)->HandleFault(reader->PageOf(FirstStoredPage(*reader, last)));
  REQUIRE(out.has_value());
  CHECK(out->kind == FaultKind::kBlocking);
  auto st = (*engine)->Stats();
  CHECK(st.blocks_read_demand == 1);  // the fault read its block itself instead of waiting for the stream
  CHECK(st.blocks_read_loader < reader->blocks().size() / 2);
  (*engine)->Stop();
  // Proof without a clock (speed is measured in bench/): the last block of the order was loaded by the fault,
  // and the throttled loader never loaded it.
  bool fault_loaded_last = false;
  for (const auto& e : (*engine)->Timeline()) {
    CHECK_FALSE((e.kind == EngineEventKind::kLoaderBlock && e.block == last));
    fault_loaded_last |= e.kind == EngineEventKind::kFaultBlocking && e.block == last;
  }
  CHECK(fault_loaded_last);
}

TEST_CASE("preloading the working set loads exactly the hot blocks before Start returns", "[engine][loader]") {
  std::vector<PageRun> access = {{{0, 200}, 40, 0}, {{0, 20}, 10, 0}};
  WriterOptions wo;
  wo.block_pages = 16;
  wo.dictionary = DictionaryMode::kOff;
  MemCheckpoint m = BuildCheckpoint({{"ram", 512}}, {SyntheticBytes(512 * 4096, 3)}, wo, access);
  auto reader = OpenMem(m);
  REQUIRE(reader->working_set_blocks() > 0);
  RecordingSink sink(m.regions);
  auto o = NoLoader();
  o.preload_working_set = true;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  auto st = (*engine)->Stats();
  CHECK(st.blocks_read_preload == reader->working_set_blocks());
  CHECK(st.blocks_read == reader->working_set_blocks());
  for (uint64_t p = 200; p < 240; ++p) {
    if (reader->Locate(p).kind != PageKind::kStored) continue;
    auto out = (*engine)->HandleFault({0, p});
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kPresent);
  }
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("an eager preload loads every block", "[engine][loader]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto o = NoLoader();
  o.preload_all = true;
  o.preload_threads = 3;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  CHECK((*engine)->Stats().blocks_read_preload == reader->blocks().size());
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("Twinkle demand prediction fetches the rest of a segment after P faults", "[engine][predict]") {
  WriterOptions wo;
  wo.block_pages = 1;  // one page per block: prediction is the only way a fault brings more
  wo.policy = LayoutPolicy::kPhysical;
  wo.dictionary = DictionaryMode::kOff;
  std::vector<uint8_t> content(256 * 4096);
  for (size_t i = 0; i < content.size(); ++i) content[i] = uint8_t(i / 4096 + 1);  // no zero, no duplicate pages
  MemCheckpoint m = BuildCheckpoint({{"ram", 256}}, {content}, wo);
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto o = NoLoader();
  o.predict_segment_pages = 32;
  o.predict_threshold = 3;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  // Two faults in segment 2 (pages 64..95): nothing predicted yet.
  for (uint64_t p : {70, 71}) REQUIRE((*engine)->HandleFault({0, p}).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(!sink.Installed({0, 90}));
  // The third fault crosses the threshold: the rest of the segment arrives, and nothing beyond it.
  REQUIRE((*engine)->HandleFault({0, 80}).has_value());
  CHECK(WaitFor([&] {
    for (uint64_t p = 64; p < 96; ++p) {
      if (!sink.Installed({0, p})) return false;
    }
    return true;
  }));
  CHECK(!sink.Installed({0, 96}));
  CHECK(!sink.Installed({0, 63}));
  auto st = (*engine)->Stats();
  CHECK(st.blocks_read_predicted == 32 - 3);
  auto out = (*engine)->HandleFault({0, 95});
  REQUIRE(out.has_value());
  CHECK(out->kind == FaultKind::kPresent);
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("a block that fails verification is never installed and its faults name it", "[engine][errors]") {
  MemCheckpoint m = SmallCheckpoint();
  auto clean = OpenMem(m);
  uint32_t bad = 2;
  const BlockInfo& info = clean->blocks()[bad];
  m.bytes[info.offset + info.stored_length / 2] ^= 0x40;
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, NoLoader());
  REQUIRE(engine.has_value());
  PageRef p = reader->PageOf(FirstStoredPage(*reader, bad));
  char offset[32];
  std::snprintf(offset, sizeof offset, "0x%llx", (unsigned long long)info.offset);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto out = (*engine)->HandleFault(p);
    REQUIRE(!out.has_value());
    const Status& e = out.error();
    INFO(e.ToString());
    CHECK(e.code() == StatusCode::kCorrupt);
    CHECK_THAT(e.message(),
               Catch::Contains("region \"" + m.regions[p.region].name + "\" page " + std::to_string(p.page)));
    CHECK_THAT(e.message(), Catch::Contains("block " + std::to_string(bad)));
    CHECK_THAT(e.message(), Catch::Contains(offset));
  }
  for (const auto& mb : reader->BlockMembers(bad)) CHECK(!sink.Installed(reader->PageOf(mb.page)));
  auto failures = (*engine)->failures();
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].block == bad);
  CHECK(failures[0].offset == info.offset);
  auto st = (*engine)->Stats();
  CHECK(st.blocks_failed == 1);
  CHECK(st.faults_failed == 2);
  CHECK(st.blocks_read == 0);
  // Other blocks are unaffected, and the loader goes around the bad one and reports it.
  REQUIRE((*engine)->HandleFault(reader->PageOf(FirstStoredPage(*reader, bad + 1))).has_value());
  RecordingSink sink2(m.regions);
  auto engine2 = RestoreEngine::Create(*reader, sink2, {});
  REQUIRE(engine2.has_value());
  REQUIRE((*engine2)->Start().ok());
  Status loader = (*engine2)->WaitForLoader();
  CHECK(loader.code() == StatusCode::kCorrupt);
  CHECK((*engine2)->Stats().blocks_loaded == reader->blocks().size() - 1);
  for (const auto& mb : reader->BlockMembers(bad)) CHECK(!sink2.Installed(reader->PageOf(mb.page)));
}

TEST_CASE("transient read errors are retried a bounded number of times", "[engine][errors]") {
  MemCheckpoint m = SmallCheckpoint();
  FaultyFile* file = nullptr;
  auto reader = OpenMem(m, &file);
  RecordingSink sink(m.regions);
  auto o = NoLoader();
  o.max_read_attempts = 3;
  o.retry_backoff = std::chrono::microseconds(100);
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  uint32_t b = 4;
  PageRef p = reader->PageOf(FirstStoredPage(*reader, b));

  file->FailAt(reader->blocks()[b].offset, 2);  // fails twice, the third attempt succeeds
  auto out = (*engine)->HandleFault(p);
  REQUIRE(out.has_value());
  CHECK((*engine)->Stats().read_retries == 2);
  CHECK(PageEquals(sink, m, p));

  uint32_t b2 = 5;
  PageRef p2 = reader->PageOf(FirstStoredPage(*reader, b2));
  file->FailAt(reader->blocks()[b2].offset, 3);  // all three attempts fail
  auto failed = (*engine)->HandleFault(p2);
  REQUIRE(!failed.has_value());
  CHECK(failed.error().code() == StatusCode::kIoError);
  CHECK(!sink.Installed(p2));
  // Not sticky: the next fault tries again and succeeds.
  auto later = (*engine)->HandleFault(p2);
  REQUIRE(later.has_value());
  CHECK(later->kind == FaultKind::kBlocking);
  CHECK(PageEquals(sink, m, p2));
  CHECK((*engine)->failures().empty());  // the transient failure is not reported once the block is in
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("a failed install releases its pages for the next attempt", "[engine][errors]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, NoLoader());
  REQUIRE(engine.has_value());
  PageRef p = reader->PageOf(FirstStoredPage(*reader, 1));
  sink.FailNextInstalls(1);
  REQUIRE(!(*engine)->HandleFault(p).has_value());
  auto out = (*engine)->HandleFault(p);
  REQUIRE(out.has_value());
  for (const auto& mb : reader->BlockMembers(1)) CHECK(PageEquals(sink, m, reader->PageOf(mb.page)));
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("pages the sink already has are never installed", "[engine]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto members = reader->BlockMembers(0);
  REQUIRE(members.size() >= 2);
  PageRef kept = reader->PageOf(members[1].page);
  sink.SetPresent(kept);
  auto engine = RestoreEngine::Create(*reader, sink, NoLoader());
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->HandleFault(reader->PageOf(members[0].page)).has_value());
  CHECK(!sink.Installed(kept));
  CHECK((*engine)->IsInstalled(kept));
  CHECK((*engine)->Stats().pages_skipped_present == 1);
  auto out = (*engine)->HandleFault(kept);
  REQUIRE(out.has_value());
  CHECK(out->kind == FaultKind::kPresent);
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("bad requests and bad options are refused", "[engine][errors]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, NoLoader());
  REQUIRE(engine.has_value());
  CHECK((*engine)->HandleFault({0, 512}).error().code() == StatusCode::kInvalidArgument);
  CHECK((*engine)->HandleFault({2, 0}).error().code() == StatusCode::kInvalidArgument);
  RestoreEngineOptions bad;
  bad.predict_segment_pages = 16;
  bad.predict_threshold = 17;
  CHECK(RestoreEngine::Create(*reader, sink, bad).error().code() == StatusCode::kInvalidArgument);
  bad = {};
  bad.zero_window_pages = 3;
  CHECK(RestoreEngine::Create(*reader, sink, bad).error().code() == StatusCode::kInvalidArgument);

  std::vector<uint8_t> bytes;
  WriterOptions wo;
  wo.sink.sync = false;
  auto w = CheckpointWriter::Create(NewMemorySink("huge.hlt", &bytes), wo);
  REQUIRE(w.has_value());
  REQUIRE((*w)->AddRegion("ram", 0, 4 << 20, 2 << 20).has_value());
  REQUIRE((*w)->Finish().has_value());
  auto huge = CheckpointReader::Open(NewMemoryFile("huge.hlt", bytes));
  REQUIRE(huge.has_value());
  // Hugepage-backed regions are restored a whole host page at a time (host_page_test.cc): accepted.
  RecordingSink hsink((*huge)->regions());
  auto he = RestoreEngine::Create(**huge, hsink, NoLoader());
  REQUIRE(he.has_value());
  auto zero = (*he)->HandleFault({0, 600});
  REQUIRE(zero.has_value());
  CHECK(zero->kind == FaultKind::kZero);
  CHECK(hsink.Installed({0, 512}));
  CHECK(hsink.Installed({0, 1023}));
  CHECK_FALSE(hsink.Installed({0, 511}));
}

TEST_CASE("statistics and the timeline come from the engine", "[engine][stats]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto o = NoLoader();
  o.record_timeline = true;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->HandleFault({0, 10}).has_value());   // blocking
  REQUIRE((*engine)->HandleFault({0, 301}).has_value());  // zero
  REQUIRE((*engine)->HandleFault({0, 300}).has_value());  // present (duplicate of 10, same block)
  REQUIRE((*engine)->HandleFault({1, 5}).has_value());    // vga page 5
  auto st = (*engine)->Stats();
  CHECK(st.faults_zero == 1);
  CHECK(st.faults_present + st.faults_blocking == 3);
  CHECK(st.fault_latency.count == 4);
  CHECK(st.fault_latency.p50_ns <= st.fault_latency.p99_ns);
  CHECK(st.fault_latency.p99_ns <= st.fault_latency.max_ns);
  CHECK(st.blocking_latency.count == st.faults_blocking);
  CHECK(st.read_ns > 0);
  auto events = (*engine)->Timeline();
  REQUIRE(events.size() == 4);
  CHECK(events[0].kind == EngineEventKind::kFaultBlocking);
  CHECK(events[1].kind == EngineEventKind::kFaultZero);
  CHECK(events[2].kind == EngineEventKind::kFaultPresent);
  std::string csv = (*engine)->TimelineCsv();
  CHECK(csv.rfind("time_us,region,page,kind,block,latency_us\n", 0) == 0);
  CHECK_THAT(csv, Catch::Contains(",\"ram\",301,zero,,"));
  CHECK_THAT(csv, Catch::Contains(",\"vga\",5,"));
}

TEST_CASE("skip_present_at_start: pages the sink holds are never installed again, whole blocks are never read",
          "[engine][resume]") {
  MemCheckpoint m = SmallCheckpoint();
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  // What a destination held when its first restorer died: every page of block 0, and every other page of
  // block 1 (a block streamed half-way).
  std::set<uint64_t> held;
  for (const BlockMember& b : reader->BlockMembers(0)) held.insert(b.page);
  const auto half = reader->BlockMembers(1);
  for (size_t i = 0; i < half.size(); i += 2) held.insert(half[i].page);
  for (uint64_t g : held) sink.SetPresent(reader->PageOf(g));
  RestoreEngineOptions o;
  o.skip_present_at_start = true;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE((*engine)->WaitForLoader().ok());
  const auto st = (*engine)->Stats();
  CHECK(st.pages_present_at_start == held.size());
  CHECK(st.blocks_present_at_start == 1);
  CHECK(st.blocks_read == reader->blocks().size() - 1);  // block 1 is read for its other half
  CHECK(st.blocks_loaded == reader->blocks().size());
  for (uint64_t g = 0; g < reader->total_pages(); ++g) {
    const PageRef p = reader->PageOf(g);
    CHECK((*engine)->IsInstalled(p) == (held.count(g) > 0 || reader->Locate(g).kind == PageKind::kStored));
    if (held.count(g)) CHECK(!sink.Installed(p));
    if (!held.count(g) && reader->Locate(g).kind == PageKind::kStored) CHECK(PageEquals(sink, m, p));
  }
  CHECK(sink.double_installs() == 0);
}
