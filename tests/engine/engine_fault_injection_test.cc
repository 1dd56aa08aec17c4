// The restore engine over storage that fails the way real storage does (halite/fault_injection.h): EIO, short
// reads and flipped bits, transient or permanent, met by a demand fault or by the background loader.
//
// Whatever the storage does, the engine keeps three promises: no page is installed with bytes other than the
// ones saved (the recording sink starts as 0xEE, and a page installed twice is counted, so an overwrite cannot
// hide a wrong install); nothing of a block that failed is installed; and the error says what failed - kIoError
// for a read that failed, kCorrupt for bytes that do not verify - and where: region, page, block and offset.
// A transient error means at most max_read_attempts reads of the block, and a block that still failed is tried
// again by the next fault.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "engine_test_util.h"
#include "halite/fault_injection.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

namespace {

constexpr unsigned kAttempts = 3;

// Two regions, so the region named in an error is the right one and not just the first.
MemCheckpoint TwoRegionCheckpoint() {
  WriterOptions wo;
  wo.block_pages = 16;
  wo.dictionary = DictionaryMode::kOff;
  return BuildCheckpoint({{"ram", 256}, {"vga", 64}}, {SyntheticBytes(256 * 4096, 21), SyntheticBytes(64 * 4096, 22)},
                         wo);
}

// A checkpoint opened through a fault-injecting file. The injector is off while the reader opens (the faults
// under test are the engine's block reads, not the index reads of Open) and on afterwards.
struct InjectedReader {
  std::shared_ptr<FaultInjector> injector;
  std::unique_ptr<CheckpointReader> reader;
};

InjectedReader OpenInjected(const MemCheckpoint& m, const FaultPlan& plan) {
  InjectedReader r;
  r.injector = std::make_shared<FaultInjector>(plan);
  r.injector->set_enabled(false);
  auto opened = CheckpointReader::Open(NewFaultInjectingFile(NewMemoryFile("mem.hlt", m.bytes), r.injector));
  INFO((opened ? std::string() : opened.error().ToString()));
  REQUIRE(opened.has_value());
  r.reader = std::move(*opened);
  r.injector->set_enabled(true);
  return r;
}

// Faults on reads of the second half of block `b`'s payload, so a short read returns the first half and a bit
// flip lands in the middle: the engine sees a plausible, partly right buffer, the hardest case to get wrong.
FaultPlan PlanOnBlock(const BlockInfo& info, Fault fault, bool permanent, uint64_t max_faults) {
  FaultPlan plan;
  plan.fault = fault;
  plan.permanent = permanent;
  plan.offset_begin = info.offset + info.stored_length / 2;
  plan.offset_end = info.offset + info.stored_length;
  plan.max_faults = max_faults;
  return plan;
}

RestoreEngineOptions Options(bool loader) {
  RestoreEngineOptions o;
  o.background_loader = loader;
  o.zero_window_pages = 1;
  o.max_read_attempts = kAttempts;
  o.retry_backoff = std::chrono::microseconds(50);
  return o;
}

// A stored page near the middle of `region`, and its block.
PageRef StoredPageIn(const CheckpointReader& reader, uint32_t region) {
  uint64_t count = reader.regions()[region].page_count();
  for (uint64_t p = count / 2; p < count; ++p) {
    if (reader.Locate(reader.GlobalPage({region, p})).kind == PageKind::kStored) return {region, p};
  }
  FAIL("no stored page in region " << region);
  return {};
}

uint32_t BlockOf(const CheckpointReader& reader, PageRef p) { return reader.Locate(reader.GlobalPage(p)).block; }

// The error of a fault on `page` names the region and page, the block and the block's file offset.
void CheckNamesPlace(const Status& e, const MemCheckpoint& m, PageRef page, const CheckpointReader& reader,
                     uint32_t block) {
  INFO(e.ToString());
  CHECK_THAT(e.message(),
             Catch::Contains("region \"" + m.regions[page.region].name + "\" page " + std::to_string(page.page)));
  CHECK_THAT(e.message(), Catch::Contains("block " + std::to_string(block)));
  CHECK_THAT(e.message(), Catch::Contains(fmt::format("{:#x}", reader.blocks()[block].offset)));
}

// Every page the sink was given holds exactly the saved bytes, and none was given twice.
void CheckNoWrongBytes(const RecordingSink& sink, const MemCheckpoint& m, const CheckpointReader& reader) {
  uint64_t wrong = 0;
  for (uint64_t g = 0; g < reader.total_pages(); ++g) {
    PageRef p = reader.PageOf(g);
    if (sink.Installed(p) && std::memcmp(sink.Page(p), m.content[p.region].data() + p.page * 4096, 4096) != 0) {
      UNSCOPED_INFO("wrong bytes in region " << p.region << " page " << p.page);
      ++wrong;
    }
  }
  CHECK(wrong == 0);
  CHECK(sink.double_installs() == 0);
}

void CheckBlockNotInstalled(const RecordingSink& sink, const CheckpointReader& reader, uint32_t block,
                            const RestoreEngine& engine) {
  for (const auto& mb : reader.BlockMembers(block)) {
    PageRef p = reader.PageOf(mb.page);
    INFO("block " << block << " region " << p.region << " page " << p.page);
    CHECK(!sink.Installed(p));
    CHECK(!engine.IsInstalled(p));
  }
}

void CheckBlockInstalled(const RecordingSink& sink, const CheckpointReader& reader, uint32_t block) {
  for (const auto& mb : reader.BlockMembers(block)) {
    PageRef p = reader.PageOf(mb.page);
    INFO("block " << block << " region " << p.region << " page " << p.page);
    CHECK(sink.Installed(p));
  }
}

// The read faults that fail a read (as opposed to kBitFlip, which corrupts one).
const Fault kFailingReads[] = {Fault::kEio, Fault::kShortTransfer};

}  // namespace

TEST_CASE("a demand fault retries transient read errors and then installs the right bytes",
          "[engine][errors][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  for (Fault fault : kFailingReads) {
    DYNAMIC_SECTION(FaultName(fault)) {
      auto clean = OpenMem(m);
      PageRef page = StoredPageIn(*clean, 1);
      uint32_t b = BlockOf(*clean, page);
      // Two failures, then the third and last allowed attempt succeeds.
      auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], fault, false, kAttempts - 1));
      RecordingSink sink(m.regions);
      auto engine = RestoreEngine::Create(*in.reader, sink, Options(false));
      REQUIRE(engine.has_value());
      auto out = (*engine)->HandleFault(page);
      INFO((out ? std::string() : out.error().ToString()));
      REQUIRE(out.has_value());
      CHECK(out->kind == FaultKind::kBlocking);
      CHECK(in.injector->faults_injected() == kAttempts - 1);
      CHECK(in.injector->operations() == kAttempts);  // one read per attempt, no more
      auto st = (*engine)->Stats();
      CHECK(st.read_retries == kAttempts - 1);
      CHECK(st.blocks_read == 1);
      CHECK(st.faults_failed == 0);
      CheckBlockInstalled(sink, *in.reader, b);
      CheckNoWrongBytes(sink, m, *in.reader);
      CHECK((*engine)->failures().empty());
    }
  }
}

TEST_CASE("a demand fault whose transient errors outlast the retries fails, and the next fault succeeds",
          "[engine][errors][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  for (Fault fault : kFailingReads) {
    DYNAMIC_SECTION(FaultName(fault)) {
      auto clean = OpenMem(m);
      PageRef page = StoredPageIn(*clean, 1);
      uint32_t b = BlockOf(*clean, page);
      // Exactly as many failures as attempts: the first fault uses them all up, the storage then recovers.
      auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], fault, false, kAttempts));
      RecordingSink sink(m.regions);
      auto engine = RestoreEngine::Create(*in.reader, sink, Options(false));
      REQUIRE(engine.has_value());

      auto failed = (*engine)->HandleFault(page);
      REQUIRE(!failed.has_value());
      CHECK(failed.error().code() == StatusCode::kIoError);
      CHECK(failed.error().retryable());  // the caller may try again
      CheckNamesPlace(failed.error(), m, page, *in.reader, b);
      CHECK(in.injector->operations() == kAttempts);  // bounded: max_read_attempts reads, then it gave up
      CHECK((*engine)->Stats().read_retries == kAttempts - 1);
      CheckBlockNotInstalled(sink, *in.reader, b, **engine);
      auto failures = (*engine)->failures();
      REQUIRE(failures.size() == 1);
      CHECK(failures[0].block == b);
      CHECK(failures[0].offset == in.reader->blocks()[b].offset);
      CHECK(failures[0].status.code() == StatusCode::kIoError);

      // Not sticky: the next fault on the block (any of its pages) reads it again and gets it.
      PageRef other = in.reader->PageOf(in.reader->BlockMembers(b).back().page);
      auto later = (*engine)->HandleFault(other);
      INFO((later ? std::string() : later.error().ToString()));
      REQUIRE(later.has_value());
      CHECK(later->kind == FaultKind::kBlocking);
      CHECK(in.injector->operations() == kAttempts + 1);
      CheckBlockInstalled(sink, *in.reader, b);
      CheckNoWrongBytes(sink, m, *in.reader);
      CHECK((*engine)->failures().empty());  // the transient failure is history once the block is in
      auto st = (*engine)->Stats();
      CHECK(st.faults_failed == 1);
      CHECK(st.blocks_failed == 0);
      CHECK(st.blocks_loaded == 1);
    }
  }
}

TEST_CASE("a permanent read error fails the fault at once and installs nothing", "[engine][errors][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  for (Fault fault : kFailingReads) {
    DYNAMIC_SECTION(FaultName(fault)) {
      auto clean = OpenMem(m);
      PageRef page = StoredPageIn(*clean, 0);
      uint32_t b = BlockOf(*clean, page);
      auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], fault, true, kNoTrigger));
      RecordingSink sink(m.regions);
      auto engine = RestoreEngine::Create(*in.reader, sink, Options(false));
      REQUIRE(engine.has_value());

      for (int attempt = 0; attempt < 2; ++attempt) {
        auto out = (*engine)->HandleFault(page);
        REQUIRE(!out.has_value());
        CHECK(out.error().code() == StatusCode::kIoError);
        CHECK(!out.error().retryable());
        CheckNamesPlace(out.error(), m, page, *in.reader, b);
      }
      CHECK(in.injector->failed_permanently());
      CHECK(in.injector->operations() == 1);  // a permanent error is not retried, and the block stays failed
      CheckBlockNotInstalled(sink, *in.reader, b, **engine);

      // The device is dead: another block fails too, named as itself; zero pages still need no I/O.
      PageRef elsewhere = StoredPageIn(*clean, 1);
      uint32_t b2 = BlockOf(*clean, elsewhere);
      REQUIRE(b2 != b);
      auto out2 = (*engine)->HandleFault(elsewhere);
      REQUIRE(!out2.has_value());
      CHECK(out2.error().code() == StatusCode::kIoError);
      CheckNamesPlace(out2.error(), m, elsewhere, *in.reader, b2);
      CheckBlockNotInstalled(sink, *in.reader, b2, **engine);
      for (uint64_t g = 0; g < in.reader->total_pages(); ++g) {
        if (in.reader->Locate(g).kind == PageKind::kStored) continue;
        auto zero = (*engine)->HandleFault(in.reader->PageOf(g));
        CHECK(zero.has_value());
        break;
      }

      auto st = (*engine)->Stats();
      CHECK(st.read_retries == 0);
      CHECK(st.blocks_failed == 2);
      CHECK(st.blocks_read == 0);
      CHECK(st.pages_installed == 0);
      CHECK(st.faults_failed == 3);
      CHECK((*engine)->failures().size() == 2);
      CheckNoWrongBytes(sink, m, *in.reader);
    }
  }
}

TEST_CASE("a block whose bits flip on every read is corruption: read twice, never retried, never installed",
          "[engine][errors][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  auto clean = OpenMem(m);
  PageRef page = StoredPageIn(*clean, 1);
  uint32_t b = BlockOf(*clean, page);
  // Every read of the block comes back damaged: what storage holds is bad. The reader reads it a second time
  // before it says so; the engine then keeps the block failed (no third read on the next fault).
  auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], Fault::kBitFlip, false, kNoTrigger));
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*in.reader, sink, Options(false));
  REQUIRE(engine.has_value());
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto out = (*engine)->HandleFault(page);
    REQUIRE(!out.has_value());
    CHECK(out.error().code() == StatusCode::kCorrupt);
    CheckNamesPlace(out.error(), m, page, *in.reader, b);
    CHECK_THAT(out.error().message(), Catch::Contains("checksum mismatch") && Catch::Contains("also when read again"));
  }
  CHECK(in.injector->faults_injected() == 2);
  CHECK(in.injector->operations() == 2);
  CheckBlockNotInstalled(sink, *in.reader, b, **engine);
  auto st = (*engine)->Stats();
  CHECK(st.read_retries == 0);
  CHECK(st.blocks_reread == 0);
  CHECK(st.blocks_failed == 1);
  CHECK(in.reader->blocks_reread() == 0);
  // Other blocks are unaffected.
  PageRef elsewhere = StoredPageIn(*clean, 0);
  REQUIRE((*engine)->HandleFault(elsewhere).has_value());
  CheckBlockInstalled(sink, *in.reader, BlockOf(*clean, elsewhere));
  CheckNoWrongBytes(sink, m, *in.reader);
}

TEST_CASE("a block corrupted only on its first read is read again and restored, and the re-read is counted",
          "[engine][errors][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  auto clean = OpenMem(m);
  SECTION("met by a demand fault") {
    PageRef page = StoredPageIn(*clean, 1);
    uint32_t b = BlockOf(*clean, page);
    auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], Fault::kBitFlip, false, 1));
    RecordingSink sink(m.regions);
    auto engine = RestoreEngine::Create(*in.reader, sink, Options(false));
    REQUIRE(engine.has_value());
    auto out = (*engine)->HandleFault(page);
    INFO((out ? std::string() : out.error().ToString()));
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kBlocking);
    CHECK(in.injector->faults_injected() == 1);
    CHECK(in.injector->operations() == 2);  // the damaged read and the one that verified
    CheckBlockInstalled(sink, *in.reader, b);
    CheckNoWrongBytes(sink, m, *in.reader);
    auto st = (*engine)->Stats();
    CHECK(st.blocks_reread == 1);
    CHECK(st.read_retries == 0);
    CHECK(st.blocks_failed == 0);
    CHECK(st.blocks_read == 1);
    CHECK(in.reader->blocks_reread() == 1);
    CHECK((*engine)->failures().empty());
  }
  SECTION("met by the background loader") {
    uint32_t b = clean->restore_order()[clean->restore_order().size() / 2];
    auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], Fault::kBitFlip, false, 1));
    RecordingSink sink(m.regions);
    auto engine = RestoreEngine::Create(*in.reader, sink, Options(true));
    REQUIRE(engine.has_value());
    REQUIRE((*engine)->Start().ok());
    Status loader = (*engine)->WaitForLoader();
    INFO(loader.ToString());
    CHECK(loader.ok());
    size_t blocks = in.reader->blocks().size();
    CHECK(in.injector->faults_injected() == 1);
    CHECK(in.injector->operations() == blocks + 1);
    auto st = (*engine)->Stats();
    CHECK(st.blocks_reread == 1);
    CHECK(st.blocks_failed == 0);
    CHECK(st.blocks_loaded == blocks);
    for (uint32_t i = 0; i < blocks; ++i) CheckBlockInstalled(sink, *in.reader, i);
    CheckNoWrongBytes(sink, m, *in.reader);
    CHECK((*engine)->failures().empty());
  }
}

TEST_CASE("the background loader retries transient read errors and restores every block",
          "[engine][loader][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  for (Fault fault : kFailingReads) {
    DYNAMIC_SECTION(FaultName(fault)) {
      auto clean = OpenMem(m);
      uint32_t b = clean->restore_order()[clean->restore_order().size() / 2];
      auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], fault, false, kAttempts - 1));
      RecordingSink sink(m.regions);
      auto engine = RestoreEngine::Create(*in.reader, sink, Options(true));
      REQUIRE(engine.has_value());
      REQUIRE((*engine)->Start().ok());
      Status loader = (*engine)->WaitForLoader();
      INFO(loader.ToString());
      CHECK(loader.ok());
      size_t blocks = in.reader->blocks().size();
      CHECK(in.injector->faults_injected() == kAttempts - 1);
      CHECK(in.injector->operations() == blocks + kAttempts - 1);
      auto st = (*engine)->Stats();
      CHECK(st.read_retries == kAttempts - 1);
      CHECK(st.blocks_loaded == blocks);
      for (uint32_t i = 0; i < blocks; ++i) CheckBlockInstalled(sink, *in.reader, i);
      CheckNoWrongBytes(sink, m, *in.reader);
      CHECK((*engine)->failures().empty());
    }
  }
}

TEST_CASE("the background loader goes around a block whose transient errors outlast the retries",
          "[engine][loader][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  for (Fault fault : kFailingReads) {
    DYNAMIC_SECTION(FaultName(fault)) {
      auto clean = OpenMem(m);
      uint32_t b = clean->restore_order()[clean->restore_order().size() / 2];
      auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], fault, false, kAttempts));
      RecordingSink sink(m.regions);
      auto engine = RestoreEngine::Create(*in.reader, sink, Options(true));
      REQUIRE(engine.has_value());
      REQUIRE((*engine)->Start().ok());
      Status loader = (*engine)->WaitForLoader();
      INFO(loader.ToString());
      CHECK(loader.code() == StatusCode::kIoError);
      CHECK_THAT(loader.message(), Catch::Contains("block " + std::to_string(b)));
      CHECK_THAT(loader.message(), Catch::Contains(fmt::format("{:#x}", in.reader->blocks()[b].offset)));
      size_t blocks = in.reader->blocks().size();
      CHECK(in.injector->operations() == blocks - 1 + kAttempts);
      CHECK((*engine)->Stats().read_retries == kAttempts - 1);
      CHECK((*engine)->Stats().blocks_loaded == blocks - 1);
      CheckBlockNotInstalled(sink, *in.reader, b, **engine);
      for (uint32_t i = 0; i < blocks; ++i) {
        if (i != b) CheckBlockInstalled(sink, *in.reader, i);
      }
      CheckNoWrongBytes(sink, m, *in.reader);

      // The storage has recovered: the block's next fault reads it.
      PageRef page = in.reader->PageOf(in.reader->BlockMembers(b)[0].page);
      auto out = (*engine)->HandleFault(page);
      INFO((out ? std::string() : out.error().ToString()));
      REQUIRE(out.has_value());
      CHECK(out->kind == FaultKind::kBlocking);
      CheckBlockInstalled(sink, *in.reader, b);
      CheckNoWrongBytes(sink, m, *in.reader);
      CHECK((*engine)->failures().empty());
    }
  }
}

TEST_CASE("WaitForLoader does not report a transient loader error on a block a later fault loaded",
          "[engine][loader][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  auto clean = OpenMem(m);
  // Two blocks next to each other in the file (payloads are contiguous): every attempt the loader makes at
  // either fails, then storage recovers. A fault then loads b; nobody loads `other` until the end.
  const uint32_t b = uint32_t(clean->blocks().size() / 2);
  const uint32_t other = b + 1;
  FaultPlan plan;
  plan.fault = Fault::kEio;
  plan.max_faults = 2 * kAttempts;
  plan.offset_begin = clean->blocks()[b].offset;
  plan.offset_end = clean->blocks()[other].offset + clean->blocks()[other].stored_length;
  auto in = OpenInjected(m, plan);
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*in.reader, sink, Options(true));
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  Status loader = (*engine)->WaitForLoader();
  INFO(loader.ToString());
  CHECK(loader.code() == StatusCode::kIoError);
  const auto& order = clean->restore_order();
  const uint32_t met_first =
      std::find(order.begin(), order.end(), b) < std::find(order.begin(), order.end(), other) ? b : other;
  CHECK_THAT(loader.message(), Catch::Contains("block " + std::to_string(met_first) + " "));
  REQUIRE(in.injector->faults_injected() == 2 * kAttempts);
  CHECK((*engine)->Stats().blocks_loaded == clean->blocks().size() - 2);

  // A fault loads block b: its loader error is history. Block `other` is still not loaded: its error stays.
  auto out = (*engine)->HandleFault(in.reader->PageOf(in.reader->BlockMembers(b)[0].page));
  INFO((out ? std::string() : out.error().ToString()));
  REQUIRE(out.has_value());
  loader = (*engine)->WaitForLoader();
  INFO(loader.ToString());
  CHECK(loader.code() == StatusCode::kIoError);
  CHECK_THAT(loader.message(), Catch::Contains("block " + std::to_string(other) + " "));

  // Once `other` is loaded too, the loader's run ended well.
  out = (*engine)->HandleFault(in.reader->PageOf(in.reader->BlockMembers(other)[0].page));
  REQUIRE(out.has_value());
  loader = (*engine)->WaitForLoader();
  INFO(loader.ToString());
  CHECK(loader.ok());
  CHECK((*engine)->Stats().blocks_loaded == in.reader->blocks().size());
  CheckNoWrongBytes(sink, m, *in.reader);
}

TEST_CASE("a permanent read error under the background loader fails the rest of the restore without installing",
          "[engine][loader][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  for (Fault fault : kFailingReads) {
    DYNAMIC_SECTION(FaultName(fault)) {
      auto clean = OpenMem(m);
      const auto& order = clean->restore_order();
      size_t dies_at = order.size() / 2;
      uint32_t b = order[dies_at];
      auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], fault, true, kNoTrigger));
      RecordingSink sink(m.regions);
      auto engine = RestoreEngine::Create(*in.reader, sink, Options(true));
      REQUIRE(engine.has_value());
      REQUIRE((*engine)->Start().ok());
      Status loader = (*engine)->WaitForLoader();
      INFO(loader.ToString());
      CHECK(loader.code() == StatusCode::kIoError);
      CHECK_THAT(loader.message(), Catch::Contains("block " + std::to_string(b) + " "));
      CHECK(in.injector->failed_permanently());
      auto st = (*engine)->Stats();
      CHECK(st.read_retries == 0);
      CHECK(st.blocks_loaded == dies_at);
      CHECK(st.blocks_failed == order.size() - dies_at);
      for (size_t i = 0; i < order.size(); ++i) {
        if (i < dies_at) {
          CheckBlockInstalled(sink, *in.reader, order[i]);
        } else {
          CheckBlockNotInstalled(sink, *in.reader, order[i], **engine);
        }
      }
      // Each fault on a lost block reports its own block, and still installs nothing.
      for (size_t i = dies_at; i < order.size(); i += 3) {
        PageRef page = in.reader->PageOf(in.reader->BlockMembers(order[i])[0].page);
        auto out = (*engine)->HandleFault(page);
        REQUIRE(!out.has_value());
        CHECK(out.error().code() == StatusCode::kIoError);
        CheckNamesPlace(out.error(), m, page, *in.reader, order[i]);
        CheckBlockNotInstalled(sink, *in.reader, order[i], **engine);
      }
      CheckNoWrongBytes(sink, m, *in.reader);
    }
  }
}

TEST_CASE("the background loader reports a block flipped on every read as corruption and installs every other block",
          "[engine][loader][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  auto clean = OpenMem(m);
  uint32_t b = clean->restore_order()[clean->restore_order().size() / 2];
  // Flipped on every read: the re-read fails too.
  auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], Fault::kBitFlip, false, kNoTrigger));
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*in.reader, sink, Options(true));
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  Status loader = (*engine)->WaitForLoader();
  INFO(loader.ToString());
  CHECK(loader.code() == StatusCode::kCorrupt);
  CHECK_THAT(loader.message(), Catch::Contains("block " + std::to_string(b)));
  CHECK_THAT(loader.message(), Catch::Contains(fmt::format("{:#x}", in.reader->blocks()[b].offset)));
  size_t blocks = in.reader->blocks().size();
  auto st = (*engine)->Stats();
  CHECK(st.read_retries == 0);
  CHECK(st.blocks_failed == 1);
  CHECK(st.blocks_loaded == blocks - 1);
  CheckBlockNotInstalled(sink, *in.reader, b, **engine);
  for (uint32_t i = 0; i < blocks; ++i) {
    if (i != b) CheckBlockInstalled(sink, *in.reader, i);
  }
  PageRef page = in.reader->PageOf(in.reader->BlockMembers(b)[0].page);
  auto out = (*engine)->HandleFault(page);
  REQUIRE(!out.has_value());
  CHECK(out.error().code() == StatusCode::kCorrupt);
  CheckNamesPlace(out.error(), m, page, *in.reader, b);
  CheckBlockNotInstalled(sink, *in.reader, b, **engine);
  CheckNoWrongBytes(sink, m, *in.reader);
}

TEST_CASE("random read faults while the loader and faulting threads race never install wrong bytes",
          "[engine][concurrency][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  struct Case {
    Fault fault;
    bool permanent;
  };
  const Case cases[] = {{Fault::kEio, false},
                        {Fault::kShortTransfer, false},
                        {Fault::kBitFlip, false},
                        {Fault::kEio, true},
                        {Fault::kShortTransfer, true}};
  for (const Case& c : cases) {
    DYNAMIC_SECTION(FaultName(c.fault) << (c.permanent ? " permanent" : " transient")) {
      FaultPlan plan;
      plan.fault = c.fault;
      plan.permanent = c.permanent;
      // Transient: any read may fail, and the second one surely does, so the case never passes without a fault.
      // Permanent: the device dies on the eighth read, halfway through the loader's stream.
      plan.probability = c.permanent ? 0 : 0.2;
      plan.on_call = c.permanent ? 8 : 2;
      plan.seed = 99;
      auto in = OpenInjected(m, plan);
      REQUIRE(in.reader->blocks().size() >= 12);
      RecordingSink sink(m.regions);
      auto engine = RestoreEngine::Create(*in.reader, sink, Options(true));
      REQUIRE(engine.has_value());
      REQUIRE((*engine)->Start().ok());
      // What a fault may answer: a failed read is kIoError, a flipped bit kCorrupt, nothing else.
      const StatusCode expected = c.fault == Fault::kBitFlip ? StatusCode::kCorrupt : StatusCode::kIoError;
      std::atomic<uint64_t> unexpected{0}, not_installed{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 rng(uint64_t(t) + 1);
          for (int i = 0; i < 200; ++i) {
            PageRef p = in.reader->PageOf(rng() % in.reader->total_pages());
            auto out = (*engine)->HandleFault(p);
            if (out.has_value() ? !sink.Installed(p) && !sink.IsPresent(p) : false) not_installed++;
            if (!out.has_value() && out.error().code() != expected) unexpected++;
          }
        });
      }
      for (auto& t : threads) t.join();
      (void)(*engine)->WaitForLoader();
      CHECK(unexpected == 0);
      CHECK(not_installed == 0);
      CheckNoWrongBytes(sink, m, *in.reader);
      // A block listed as failed has nothing installed (a transient failure leaves the list once its block loads).
      for (const auto& f : (*engine)->failures()) CheckBlockNotInstalled(sink, *in.reader, f.block, **engine);
      CHECK(in.injector->faults_injected() > 0);

      // Once the storage is healthy again, a fault on every page succeeds unless its block failed for good
      // (a permanent error, or a checksum mismatch), and the sink then holds the checkpoint exactly.
      in.injector->set_enabled(false);
      for (uint64_t g = 0; g < in.reader->total_pages(); ++g) {
        PageRef p = in.reader->PageOf(g);
        auto out = (*engine)->HandleFault(p);
        if (!out.has_value()) {
          INFO(out.error().ToString());
          CHECK(out.error().code() == expected);
          bool sticky = c.permanent || c.fault == Fault::kBitFlip;
          CHECK(sticky);
          CHECK(!sink.Installed(p));
        }
      }
      CheckNoWrongBytes(sink, m, *in.reader);
      if (!c.permanent && c.fault != Fault::kBitFlip) CHECK((*engine)->failures().empty());
    }
  }
}

TEST_CASE("a preload that meets a read error fails Start, installs nothing of the block, and does not hang",
          "[engine][loader][fault-injection]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  auto clean = OpenMem(m);
  uint32_t b = clean->restore_order()[clean->restore_order().size() / 2];
  auto in = OpenInjected(m, PlanOnBlock(clean->blocks()[b], Fault::kEio, true, kNoTrigger));
  RecordingSink sink(m.regions);
  auto o = Options(true);
  o.preload_all = true;
  o.preload_threads = 2;
  auto engine = RestoreEngine::Create(*in.reader, sink, o);
  REQUIRE(engine.has_value());
  Status started = (*engine)->Start();
  INFO(started.ToString());
  CHECK(started.code() == StatusCode::kIoError);
  // The device fails for good at block b's read; with two preload threads the other one may meet the dead
  // device on a later block first, and that error is as true. Whichever is reported names its block and offset.
  std::smatch named;
  const std::string message = started.message();
  REQUIRE(std::regex_search(message, named, std::regex("block ([0-9]+) at offset")));
  const uint32_t reported = static_cast<uint32_t>(std::stoul(named[1].str()));
  REQUIRE(reported < in.reader->blocks().size());
  CHECK_THAT(message, Catch::Contains(fmt::format("{:#x}", in.reader->blocks()[reported].offset)));
  CheckBlockNotInstalled(sink, *in.reader, b, **engine);
  CheckBlockNotInstalled(sink, *in.reader, reported, **engine);
  // The loader never started, so there is nothing to wait for: WaitForLoader returns (with the failure) rather
  // than block a caller forever. Stop() releases it should it wait anyway, so a regression fails instead of hanging.
  auto waited = std::async(std::launch::async, [&] { return (*engine)->WaitForLoader(); });
  bool returned = waited.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!returned) (*engine)->Stop();
  CHECK(returned);
  CHECK(waited.get().code() == StatusCode::kIoError);
  CheckNoWrongBytes(sink, m, *in.reader);
}

namespace {

// A sink whose urgent installs (a fault's) wait while it is armed: a fault stuck after its read, installing (a
// vCPU's memory that the kernel cannot map, a UFFDIO_COPY that never returns).
class GatedSink : public RecordingSink {
 public:
  using RecordingSink::RecordingSink;
  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    if (priority == InstallPriority::kUrgent) {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !armed_; });
    }
    return RecordingSink::Install(batch, priority, runs_installed);
  }
  void set_armed(bool armed) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = armed;
    cv_.notify_all();
  }
  void WaitForInstaller() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = true;
  int waiting_ = 0;
};

}  // namespace

TEST_CASE("Stop releases WaitForLoader while a fault's install of its block never returns", "[engine][loader][stop]") {
  MemCheckpoint m = TwoRegionCheckpoint();
  auto reader = OpenMem(m);
  const uint32_t b = uint32_t(reader->blocks().size() / 2);
  const PageRef page = reader->PageOf(reader->BlockMembers(b)[0].page);
  GatedSink sink(m.regions);
  // Batches, as from an object store: the loader steps aside for a demand read only for a while, then goes on.
  RestoreEngineOptions o = Options(true);
  o.loader_batch_bytes = 64 << 10;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  // The fault claims block b, reads it and hangs installing it; the loader passes over b and loads the rest.
  auto fault = std::async(std::launch::async, [&] { return (*engine)->HandleFault(page); });
  sink.WaitForInstaller();
  REQUIRE((*engine)->Start().ok());
  auto waiter = std::async(std::launch::async, [&] { return (*engine)->WaitForLoader(); });
  // The loader loads every other block, however slow the machine (a fixed 300 ms was not always enough at load
  // 14-16) ...
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*engine)->Stats().blocks_loaded < reader->blocks().size() - 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK((*engine)->Stats().blocks_loaded == reader->blocks().size() - 1);
  // ... and WaitForLoader still waits for the fault's block: it must not return while the install hangs.
  CHECK(waiter.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  (*engine)->Stop();
  // Stop lets it go although the install still hangs.
  const bool released = waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  sink.set_armed(false);  // before any REQUIRE: the futures' destructors wait for their threads
  REQUIRE(released);
  CHECK(waiter.get().ok());
  auto out = fault.get();
  INFO((out ? std::string() : out.error().ToString()));
  CHECK(out.has_value());
  CHECK((*engine)->IsInstalled(page));
  CheckNoWrongBytes(sink, m, *reader);
}
