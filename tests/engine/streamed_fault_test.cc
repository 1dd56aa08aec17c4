// Streamed demand faults (RestoreEngineOptions::stream_faults): the faulting page goes in alone as soon as its
// piece of the block is decoded, then the block's other pages piece by piece; every page once, with its content.
#include <algorithm>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <thread>
#include <mutex>
#include <set>
#include <vector>

#include "engine_test_util.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

namespace {

constexpr uint64_t kPage = 4096;

// 512 pages of synthetic memory (a few zero pages and duplicates), 64-page blocks cut every `cut` pages, stored as
// independent frames of `frames` pages when not 0 (FRAMED).
MemCheckpoint Checkpoint(uint32_t cut, uint32_t frames = 0) {
  std::vector<std::vector<uint8_t>> content = {SyntheticBytes(512 * kPage, 21)};
  std::memset(content[0].data() + 70 * kPage, 0, kPage);
  std::memcpy(content[0].data() + 200 * kPage, content[0].data() + 3 * kPage, kPage);
  WriterOptions o;
  o.block_pages = 64;
  o.zstd_block_pages = cut;
  o.frame_pages = frames;
  o.dictionary = DictionaryMode::kOff;
  return BuildCheckpoint({{"ram", 512}}, std::move(content), o);
}

RestoreEngineOptions Demand(bool stream) {
  RestoreEngineOptions o;
  o.background_loader = false;
  o.zero_window_pages = 1;
  o.stream_faults = stream;
  return o;
}

// Records each Install call's data pages in call order, with whether each page's content was right when it came;
// can fail the Nth call.
class OrderSink : public RecordingSink {
 public:
  OrderSink(const std::vector<Region>& regions, const MemCheckpoint& m) : RecordingSink(regions), m_(m) {}
  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (++call_ == fail_call_) {
        *runs_installed = 0;
        return Status::IoError("injected sink failure");
      }
      std::vector<uint64_t> pages;
      for (const PageInstall& run : batch) {
        for (uint64_t i = 0; i < run.count && !run.zero(); ++i) {
          pages.push_back(run.first.page + i);
          if (std::memcmp(run.data.data() + i * kPage, m_.content[0].data() + (run.first.page + i) * kPage, kPage)) {
            ++wrong_;
          }
        }
      }
      if (!pages.empty()) calls_.push_back(std::move(pages));
    }
    return RecordingSink::Install(batch, priority, runs_installed);
  }
  void FailCall(int n) { fail_call_ = call_ + n; }
  std::vector<std::vector<uint64_t>> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  uint64_t wrong() const { return wrong_; }

 private:
  const MemCheckpoint& m_;
  mutable std::mutex mu_;
  int call_ = 0, fail_call_ = -1;
  uint64_t wrong_ = 0;
  std::vector<std::vector<uint64_t>> calls_;
};

// The page of `block` in slot `slot` (its first member there).
uint64_t PageInSlot(const CheckpointReader& r, uint32_t block, uint32_t slot) {
  for (const auto& mb : r.BlockMembers(block)) {
    if (mb.slot == slot) return mb.page;
  }
  FAIL("no page in slot " << slot);
  return 0;
}

}  // namespace

TEST_CASE("a streamed fault installs its page alone first, then the block piece by piece, each page once",
          "[engine][stream]") {
  for (uint32_t slot : {0u, 5u, 37u, 63u}) {
    INFO("faulting slot " << slot);
    MemCheckpoint m = Checkpoint(4);
    auto reader = OpenMem(m);
    OrderSink sink(m.regions, m);
    auto engine = RestoreEngine::Create(*reader, sink, Demand(true));
    REQUIRE(engine.has_value());
    const uint32_t b = 1;
    REQUIRE(reader->blocks()[b].compressed());
    const uint64_t g = PageInSlot(*reader, b, slot);
    auto out = (*engine)->HandleFault(reader->PageOf(g));
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kBlocking);
    auto calls = sink.calls();
    REQUIRE(calls.size() >= 2);
    CHECK(calls[0] == std::vector<uint64_t>{g});  // the faulting page, alone, first
    // The rest in decode order: a call holds the pages of the pieces decoded since the one before.
    std::map<uint64_t, uint32_t> slot_of;
    for (const auto& mb : reader->BlockMembers(b)) slot_of.emplace(mb.page, mb.slot);
    uint32_t last_max = 0;
    for (size_t c = 1; c < calls.size(); ++c) {
      uint32_t lo = 64, hi = 0;
      for (uint64_t p : calls[c]) {
        lo = std::min(lo, slot_of[p]);
        hi = std::max(hi, slot_of[p]);
      }
      if (c > 1) CHECK(lo > last_max);
      last_max = hi;
    }
    // Every member, once, with its content; nothing else.
    for (uint64_t p = 0; p < reader->total_pages(); ++p) {
      INFO("page " << p);
      CHECK(sink.Installed(reader->PageOf(p)) == (slot_of.count(p) > 0));
    }
    CHECK(sink.double_installs() == 0);
    CHECK(sink.wrong() == 0);
    auto st = (*engine)->Stats();
    CHECK(st.blocks_read == 1);
    CHECK(st.pages_installed == slot_of.size());
    CHECK(st.wake_latency.max_ns > 0);
    CHECK(st.wake_latency.max_ns <= st.blocking_latency.max_ns);
  }
}

TEST_CASE("a streamed fault in a block of independent frames decodes its page's frame before any other",
          "[engine][stream]") {
  MemCheckpoint m = Checkpoint(4, 16);
  auto reader = OpenMem(m);
  const uint32_t b = 1;
  REQUIRE(reader->blocks()[b].framed());
  std::map<uint64_t, uint32_t> slot_of;
  for (const auto& mb : reader->BlockMembers(b)) slot_of.emplace(mb.page, mb.slot);
  for (uint32_t slot : {0u, 21u, 37u, 63u}) {
    INFO("faulting slot " << slot);
    OrderSink sink(m.regions, m);
    auto engine = RestoreEngine::Create(*reader, sink, Demand(true));
    REQUIRE(engine.has_value());
    const uint64_t g = PageInSlot(*reader, b, slot);
    REQUIRE((*engine)->HandleFault(reader->PageOf(g)).has_value());
    auto calls = sink.calls();
    REQUIRE(calls.size() >= 2);
    CHECK(calls[0] == std::vector<uint64_t>{g});
    // Every page of the faulting page's frame goes in before a page of another frame.
    const uint32_t frame = slot / 16;
    bool other_seen = false, late = false;
    size_t pages = 0;
    for (const auto& call : calls) {
      for (uint64_t p : call) {
        const bool ours = slot_of[p] / 16 == frame;
        late = late || (ours && other_seen);
        other_seen = other_seen || !ours;
        ++pages;
      }
    }
    CHECK_FALSE(late);
    CHECK(other_seen);
    CHECK(pages == slot_of.size());
    CHECK(sink.double_installs() == 0);
    CHECK(sink.wrong() == 0);
  }
}

namespace {

// Holds the Install call that carries a chosen page until told to go on (a slow decode or copy of that piece).
class HoldingSink : public RecordingSink {
 public:
  using RecordingSink::RecordingSink;
  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      bool carries = false;
      for (const PageInstall& run : batch) {
        carries = carries || (!run.zero() && hold_ >= run.first.page && hold_ < run.first.page + run.count);
      }
      if (carries) {
        held_ = hold_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return hold_ != held_; });
      }
    }
    return RecordingSink::Install(batch, priority, runs_installed);
  }
  // Holds the call carrying page `g` (UINT64_MAX: none), releasing the one held before.
  void HoldPage(uint64_t g) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = g;
    cv_.notify_all();
  }
  bool WaitHeld(uint64_t g) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return held_ == g; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t hold_ = UINT64_MAX;
  uint64_t held_ = UINT64_MAX;
};

}  // namespace

TEST_CASE("a fault on a page of a streamed block in flight waits for its own page, not for the whole block",
          "[engine][stream]") {
  MemCheckpoint m = Checkpoint(4, 16);
  auto reader = OpenMem(m);
  const uint32_t b = 1;
  REQUIRE(reader->blocks()[b].framed());
  HoldingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, Demand(true));
  REQUIRE(engine.has_value());
  const uint64_t first = PageInSlot(*reader, b, 0), held = PageInSlot(*reader, b, 8),
                 joiner = PageInSlot(*reader, b, 12), late = PageInSlot(*reader, b, 40);
  // The block's reader is held installing slots 8-11 (frame 0's third piece); the joiner's page (slot 12) comes
  // in the next piece.
  sink.HoldPage(held);
  auto a = std::async(std::launch::async, [&] { return (*engine)->HandleFault(reader->PageOf(first)); });
  REQUIRE(sink.WaitHeld(held));
  auto j = std::async(std::launch::async, [&] { return (*engine)->HandleFault(reader->PageOf(joiner)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the joiner is waiting by now
  // Let slots 8-15 in, and hold the reader again in frame 2: the joiner's page is in, the block is not.
  sink.HoldPage(late);
  REQUIRE(sink.WaitHeld(late));
  const bool joiner_back = j.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  CHECK(a.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready);
  sink.HoldPage(UINT64_MAX);
  REQUIRE(joiner_back);
  auto ja = j.get();
  auto aa = a.get();
  REQUIRE(ja.has_value());
  REQUIRE(aa.has_value());
  CHECK(ja->kind == FaultKind::kBlocking);
  CHECK(ja->joined);
  CHECK(ja->stall_ns > 0);
  CHECK(ja->stall_ns <= ja->latency_ns);
  CHECK(aa->kind == FaultKind::kBlocking);
  CHECK_FALSE(aa->joined);
  CHECK(aa->stall_ns < aa->latency_ns);  // its page went in first; it was held twice after that
  auto st = (*engine)->Stats();
  CHECK(st.faults_joined == 1);
  CHECK(st.stall_joined_ns == ja->stall_ns);
  CHECK(st.stall_blocking_ns == ja->stall_ns + aa->stall_ns);
  CHECK(st.stall_ns == st.stall_blocking_ns);
  CHECK(st.stall_latency.count == 2);
  CHECK(st.join_latency.count == 1);
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("the stall of every fault adds up in the statistics", "[engine][stream]") {
  MemCheckpoint m = Checkpoint(4, 16);
  auto reader = OpenMem(m);
  RecordingSink sink(m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, Demand(true));
  REQUIRE(engine.has_value());
  uint64_t all = 0, blocking = 0, faults = 0;
  for (uint64_t g = 0; g < reader->total_pages(); g += 7) {
    auto out = (*engine)->HandleFault(reader->PageOf(g));
    REQUIRE(out.has_value());
    CHECK(out->stall_ns <= out->latency_ns);
    all += out->stall_ns;
    if (out->kind == FaultKind::kBlocking) blocking += out->stall_ns;
    ++faults;
  }
  auto st = (*engine)->Stats();
  CHECK(st.stall_ns == all);
  CHECK(st.stall_blocking_ns == blocking);
  CHECK(st.stall_joined_ns == 0);  // one thread: nothing to join
  CHECK(st.fault_latency.count == faults);
  CHECK(st.stall_latency.count == st.faults_blocking);
}

TEST_CASE("streamed and whole-block faults install the same content, cut or uncut frames", "[engine][stream]") {
  for (auto [cut, frames] : {std::pair{0u, 0u}, {4u, 0u}, {8u, 0u}, {4u, 16u}, {0u, 8u}}) {
    MemCheckpoint m = Checkpoint(cut, frames);
    auto reader = OpenMem(m);
    for (bool stream : {false, true}) {
      INFO("cut " << cut << " frames " << frames << " stream " << stream);
      OrderSink sink(m.regions, m);
      auto engine = RestoreEngine::Create(*reader, sink, Demand(stream));
      REQUIRE(engine.has_value());
      // Fault each block at a different slot, then every page.
      for (uint32_t b = 0; b < reader->blocks().size(); ++b) {
        const auto members = reader->BlockMembers(b);
        REQUIRE((*engine)->HandleFault(reader->PageOf(members[(b * 17) % members.size()].page)).has_value());
      }
      for (uint64_t p = 0; p < reader->total_pages(); ++p) REQUIRE((*engine)->HandleFault(reader->PageOf(p)).has_value());
      for (uint64_t p = 0; p < reader->total_pages(); ++p) {
        INFO("page " << p);
        CHECK(std::memcmp(sink.Page(reader->PageOf(p)), m.content[0].data() + p * kPage, kPage) == 0);
      }
      CHECK(sink.double_installs() == 0);
      CHECK(sink.wrong() == 0);
      CHECK((*engine)->Stats().blocks_read == reader->blocks().size());
      // Whole-block faults install a block in one call.
      if (!stream) CHECK(sink.calls().size() == reader->blocks().size());
    }
  }
}

TEST_CASE("a streamed fault on a damaged block installs nothing", "[engine][stream][errors]") {
  MemCheckpoint m = Checkpoint(4);
  const uint32_t bad = 2;
  {
    auto clean = OpenMem(m);
    const BlockInfo& info = clean->blocks()[bad];
    // Damage the last piece: the checksum fails before any piece is decoded.
    m.bytes[info.offset + info.stored_length - 5] ^= 0x08;
  }
  auto reader = OpenMem(m);
  OrderSink sink(m.regions, m);
  auto engine = RestoreEngine::Create(*reader, sink, Demand(true));
  REQUIRE(engine.has_value());
  auto out = (*engine)->HandleFault(reader->PageOf(PageInSlot(*reader, bad, 0)));
  REQUIRE(!out.has_value());
  CHECK(out.error().code() == StatusCode::kCorrupt);
  CHECK_THAT(out.error().message(), Catch::Contains("block " + std::to_string(bad)));
  for (const auto& mb : reader->BlockMembers(bad)) CHECK(!sink.Installed(reader->PageOf(mb.page)));
  CHECK(sink.calls().empty());
  CHECK((*engine)->Stats().blocks_failed == 1);
}

TEST_CASE("a sink failure in the middle of a streamed block loses no page and installs none twice",
          "[engine][stream][errors]") {
  for (int failing_call : {1, 2, 3}) {
    INFO("failing Install call " << failing_call);
    MemCheckpoint m = Checkpoint(4);
    auto reader = OpenMem(m);
    OrderSink sink(m.regions, m);
    auto engine = RestoreEngine::Create(*reader, sink, Demand(true));
    REQUIRE(engine.has_value());
    const uint32_t b = 3;
    const uint64_t g = PageInSlot(*reader, b, 20);
    sink.FailCall(failing_call);
    auto out = (*engine)->HandleFault(reader->PageOf(g));
    REQUIRE(!out.has_value());
    CHECK(out.error().code() == StatusCode::kIoError);
    CHECK_THAT(out.error().message(), Catch::Contains("installing block " + std::to_string(b)));
    // The faulting page went in before the failure unless the failure was its own call.
    CHECK(sink.Installed(reader->PageOf(g)) == (failing_call > 1));
    // The next fault of the block (on any page) loads the rest.
    auto again = (*engine)->HandleFault(reader->PageOf(PageInSlot(*reader, b, 63)));
    REQUIRE(again.has_value());
    REQUIRE((*engine)->HandleFault(reader->PageOf(g)).has_value());
    for (const auto& mb : reader->BlockMembers(b)) {
      INFO("page " << mb.page);
      CHECK(sink.Installed(reader->PageOf(mb.page)));
      CHECK(std::memcmp(sink.Page(reader->PageOf(mb.page)), m.content[0].data() + mb.page * kPage, kPage) == 0);
    }
    CHECK(sink.double_installs() == 0);
    CHECK(sink.wrong() == 0);
  }
}
