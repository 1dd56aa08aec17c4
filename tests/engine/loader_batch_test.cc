// The background loader's batches (RestoreEngineOptions::loader_batch_bytes, engine/loader_batch.cc): from storage
// that asks for them (an object store), the loader fetches several blocks of the restore order at once, and every
// promise of the single-block loader still holds - each block read once and installed once with the saved bytes,
// the restore order, a fault never waiting for a batch in flight, a payload that fails verification read again
// once, transient errors retried within max_read_attempts, the rate limit, WaitForLoader's errors.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>

#include "engine_test_util.h"
#include "halite/fault_injection.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

namespace {

// A file over another that says it is remote (hints) and records its batches; it can hold every batch of more
// than one read until released, as a slow object store would.
class BatchRecordingFile : public RandomAccessFile {
 public:
  BatchRecordingFile(std::unique_ptr<RandomAccessFile> base, uint64_t batch_hint)
      : base_(std::move(base)), batch_hint_(batch_hint) {}
  const std::string& name() const override { return base_->name(); }
  uint64_t size() const override { return base_->size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    single_reads_.fetch_add(1);
    return base_->ReadAt(offset, buffer);
  }
  Status ReadBatch(std::span<ReadRequest> requests) override {
    uint64_t bytes = 0;
    for (const auto& r : requests) bytes += r.buffer.size();
    {
      std::unique_lock<std::mutex> lock(mu_);
      batch_sizes_.push_back(requests.size());
      max_batch_bytes_ = std::max(max_batch_bytes_, bytes);
      if (hold_ && requests.size() > 1) {
        ++held_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !hold_; });
      }
    }
    Status first;
    for (auto& r : requests) {
      r.status = base_->ReadAt(r.offset, r.buffer);
      if (!r.status.ok() && first.ok()) first = r.status;
    }
    return first;
  }
  ReadHints hints() const override { return ReadHints{batch_hint_, batch_hint_ > 0}; }

  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    cv_.notify_all();
  }
  bool WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return held_ > 0; });
  }
  std::vector<size_t> batch_sizes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return batch_sizes_;
  }
  uint64_t max_batch_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_batch_bytes_;
  }
  uint64_t single_reads() const { return single_reads_.load(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  uint64_t batch_hint_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  int held_ = 0;
  std::vector<size_t> batch_sizes_;
  uint64_t max_batch_bytes_ = 0;
  std::atomic<uint64_t> single_reads_{0};
};

MemCheckpoint Checkpoint() {
  WriterOptions wo;
  wo.block_pages = 16;
  wo.dictionary = DictionaryMode::kOff;
  return BuildCheckpoint({{"ram", 1024}, {"vga", 64}}, {SyntheticBytes(1024 * 4096, 31), SyntheticBytes(64 * 4096, 32)},
                         wo);
}

struct Opened {
  BatchRecordingFile* file = nullptr;
  std::unique_ptr<CheckpointReader> reader;
};

Opened Open(const MemCheckpoint& m, uint64_t batch_hint) {
  Opened o;
  auto f = std::make_unique<BatchRecordingFile>(NewMemoryFile("mem.hlt", m.bytes), batch_hint);
  o.file = f.get();
  auto r = CheckpointReader::Open(std::move(f));
  REQUIRE(r.has_value());
  o.reader = std::move(*r);
  return o;
}

uint64_t TotalStored(const CheckpointReader& r) {
  uint64_t n = 0;
  for (const auto& b : r.blocks()) n += b.stored_length;
  return n;
}

}  // namespace

TEST_CASE("a batching loader restores everything in restore order with each block read and installed once",
          "[engine][loader][batch]") {
  MemCheckpoint m = Checkpoint();
  // The storage's hint decides (kLoaderBatchAuto): about a quarter of the checkpoint per batch.
  Opened o = Open(m, 0);
  const uint64_t quarter = TotalStored(*o.reader) / 4;
  o = Open(m, quarter);
  RecordingSink sink(m.regions);
  RestoreEngineOptions opts;
  opts.record_timeline = true;
  auto engine = RestoreEngine::Create(*o.reader, sink, opts);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE((*engine)->WaitForLoader().ok());
  auto st = (*engine)->Stats();
  const size_t blocks = o.reader->blocks().size();
  CHECK(st.blocks_read == blocks);
  CHECK(st.blocks_read_loader == blocks);
  CHECK(st.blocks_loaded == blocks);
  CHECK(st.bytes_read == TotalStored(*o.reader));
  CHECK(st.loader_batches >= 4);
  CHECK(st.loader_batches <= 6);
  CHECK(st.loader_fetched_unused == 0);
  CHECK(o.file->max_batch_bytes() <= quarter);
  for (size_t n : o.file->batch_sizes()) CHECK(n > 1);
  CheckEveryStoredPage(sink, m, *o.reader);
  std::vector<uint32_t> loaded;
  for (const auto& e : (*engine)->Timeline()) {
    if (e.kind == EngineEventKind::kLoaderBlock) loaded.push_back(e.block);
  }
  CHECK(loaded == o.reader->restore_order());
}

TEST_CASE("a local file (no hint) and loader_batch_bytes 0 load one block at a time", "[engine][loader][batch]") {
  MemCheckpoint m = Checkpoint();
  for (bool forced_off : {false, true}) {
    Opened o = Open(m, forced_off ? (1u << 20) : 0);
    const uint64_t reads_at_open = o.file->single_reads();  // footer, header, index
    RecordingSink sink(m.regions);
    RestoreEngineOptions opts;
    if (forced_off) opts.loader_batch_bytes = 0;
    auto engine = RestoreEngine::Create(*o.reader, sink, opts);
    REQUIRE(engine.has_value());
    REQUIRE((*engine)->Start().ok());
    REQUIRE((*engine)->WaitForLoader().ok());
    INFO("forced off: " << forced_off);
    CHECK((*engine)->Stats().loader_batches == 0);
    CHECK(o.file->batch_sizes().empty());
    CHECK(o.file->single_reads() - reads_at_open == o.reader->blocks().size());
    CheckEveryStoredPage(sink, m, *o.reader);
  }
}

TEST_CASE("a fault never waits for a loader batch in flight: it reads its own block and the batch's copy is dropped",
          "[engine][loader][batch]") {
  MemCheckpoint m = Checkpoint();
  Opened o = Open(m, 0);
  RecordingSink sink(m.regions);
  RestoreEngineOptions opts;
  opts.loader_batch_bytes = TotalStored(*o.reader);  // the whole checkpoint in one batch
  o.file->Hold();
  auto engine = RestoreEngine::Create(*o.reader, sink, opts);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE(o.file->WaitUntilHeld());
  // The batch is in flight (held by storage); a fault on its last block must be served now.
  const uint32_t last = o.reader->restore_order().back();
  PageRef page = o.reader->PageOf(o.reader->BlockMembers(last)[0].page);
  auto fault = std::async(std::launch::async, [&] { return (*engine)->HandleFault(page); });
  const bool served_while_held = fault.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  o.file->Release();
  REQUIRE(served_while_held);
  auto out = fault.get();
  REQUIRE(out.has_value());
  CHECK(out->kind == FaultKind::kBlocking);
  CHECK_FALSE(out->joined);
  REQUIRE((*engine)->WaitForLoader().ok());
  auto st = (*engine)->Stats();
  CHECK(st.blocks_read == o.reader->blocks().size());
  CHECK(st.blocks_read_demand == 1);
  CHECK(st.loader_fetched_unused == 1);
  CheckEveryStoredPage(sink, m, *o.reader);
}

TEST_CASE("in a batch a payload flipped once is read again and restored but one flipped on every read fails alone",
          "[engine][loader][batch][errors]") {
  MemCheckpoint m = Checkpoint();
  for (bool permanent : {false, true}) {
    auto probe = OpenMem(m);
    const uint32_t victim = probe->restore_order()[probe->restore_order().size() / 2];
    const BlockInfo& info = probe->blocks()[victim];
    FaultPlan plan;
    plan.fault = Fault::kBitFlip;
    plan.offset_begin = info.offset + info.stored_length / 2;
    plan.offset_end = info.offset + info.stored_length;
    plan.max_faults = permanent ? kNoTrigger : 1;
    auto injector = std::make_shared<FaultInjector>(plan);
    injector->set_enabled(false);
    auto r = CheckpointReader::Open(NewFaultInjectingFile(NewMemoryFile("mem.hlt", m.bytes), injector));
    REQUIRE(r.has_value());
    injector->set_enabled(true);
    RecordingSink sink(m.regions);
    RestoreEngineOptions opts;
    opts.loader_batch_bytes = TotalStored(**r) / 3;
    auto engine = RestoreEngine::Create(**r, sink, opts);
    REQUIRE(engine.has_value());
    REQUIRE((*engine)->Start().ok());
    Status done = (*engine)->WaitForLoader();
    auto st = (*engine)->Stats();
    INFO("permanent: " << permanent << "; " << done.ToString());
    CHECK(st.loader_batches >= 3);
    if (!permanent) {
      CHECK(done.ok());
      CHECK(st.blocks_reread == 1);
      CHECK(st.blocks_failed == 0);
      CHECK(st.blocks_read == (*r)->blocks().size());
      CheckEveryStoredPage(sink, m, **r);
    } else {
      CHECK(done.code() == StatusCode::kCorrupt);
      CHECK_THAT(done.message(), Catch::Contains("block " + std::to_string(victim)));
      CHECK_THAT(done.message(), Catch::Contains("also when read again"));
      CHECK(st.blocks_failed == 1);
      CHECK(st.blocks_reread == 0);
      CHECK(st.read_retries == 0);  // corruption is never retried
      CHECK(st.blocks_read == (*r)->blocks().size() - 1);
      for (const auto& mb : (*r)->BlockMembers(victim)) CHECK_FALSE(sink.Installed((*r)->PageOf(mb.page)));
      CHECK(sink.double_installs() == 0);
    }
  }
}

TEST_CASE("a batch's transient read error is retried block by block within max_read_attempts",
          "[engine][loader][batch][errors]") {
  MemCheckpoint m = Checkpoint();
  for (uint64_t failures : {2u, 10u}) {
    auto probe = OpenMem(m);
    const uint32_t victim = probe->restore_order()[2];
    const BlockInfo& info = probe->blocks()[victim];
    FaultPlan plan;
    plan.fault = Fault::kEio;
    plan.offset_begin = info.offset;
    plan.offset_end = info.offset + info.stored_length;
    plan.max_faults = failures;
    auto injector = std::make_shared<FaultInjector>(plan);
    injector->set_enabled(false);
    auto r = CheckpointReader::Open(NewFaultInjectingFile(NewMemoryFile("mem.hlt", m.bytes), injector));
    REQUIRE(r.has_value());
    injector->set_enabled(true);
    RecordingSink sink(m.regions);
    RestoreEngineOptions opts;
    opts.loader_batch_bytes = TotalStored(**r) / 4;
    opts.max_read_attempts = 3;
    opts.retry_backoff = std::chrono::microseconds(50);
    auto engine = RestoreEngine::Create(**r, sink, opts);
    REQUIRE(engine.has_value());
    REQUIRE((*engine)->Start().ok());
    Status done = (*engine)->WaitForLoader();
    auto st = (*engine)->Stats();
    INFO("failures injected: " << failures << "; " << done.ToString());
    if (failures < 3) {
      CHECK(done.ok());
      CHECK(st.read_retries == failures);
      CHECK(injector->faults_injected() == failures);
      CheckEveryStoredPage(sink, m, **r);
    } else {
      // Three attempts in all (the batch's and two alone), then the loader goes on; a later fault may try again.
      CHECK(done.code() == StatusCode::kIoError);
      CHECK_THAT(done.message(), Catch::Contains("block " + std::to_string(victim)));
      CHECK(injector->faults_injected() == 3);
      CHECK(st.read_retries == 2);
      CHECK(st.blocks_read == (*r)->blocks().size() - 1);
      PageRef page = (*r)->PageOf((*r)->BlockMembers(victim)[0].page);
      auto out = (*engine)->HandleFault(page);  // faults 4-6 of 10: still failing
      CHECK_FALSE(out.has_value());
      injector->set_enabled(false);
      out = (*engine)->HandleFault(page);
      REQUIRE(out.has_value());
      CheckEveryStoredPage(sink, m, **r);
    }
  }
}

TEST_CASE("a rate-limited batching loader keeps each batch within the limiter's burst", "[engine][loader][batch]") {
  MemCheckpoint m = Checkpoint();
  Opened o = Open(m, 0);
  uint64_t largest = 0;
  for (const auto& b : o.reader->blocks()) largest = std::max<uint64_t>(largest, b.stored_length);
  RecordingSink sink(m.regions);
  RestoreEngineOptions opts;
  opts.loader_batch_bytes = TotalStored(*o.reader);
  // A burst of ten of the largest blocks (a tenth of the rate): batches of at most that, never the whole
  // checkpoint.
  opts.loader_rate_bytes_per_s = largest * 100;
  auto engine = RestoreEngine::Create(*o.reader, sink, opts);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  REQUIRE((*engine)->WaitForLoader().ok());
  CHECK(o.file->max_batch_bytes() <= largest * 10);
  CHECK((*engine)->Stats().loader_batches >= TotalStored(*o.reader) / (largest * 10));
  CHECK((*engine)->Stats().loader_batches >= 2);
  CheckEveryStoredPage(sink, m, *o.reader);
}

TEST_CASE("an eager preload from storage that suggests batches fetches the restore order in batches, several at once, "
          "and a fault is served while they are held",
          "[engine][preload][batch]") {
  MemCheckpoint m = Checkpoint();
  Opened o = Open(m, 0);
  const uint64_t eighth = TotalStored(*o.reader) / 8;
  o = Open(m, eighth);  // the storage's hint: about an eighth of the checkpoint per batch
  const uint64_t reads_at_open = o.file->single_reads();
  RecordingSink sink(m.regions);
  RestoreEngineOptions opts;
  opts.preload_all = true;
  opts.background_loader = false;
  opts.preload_threads = 2;
  opts.record_timeline = true;
  auto engine = RestoreEngine::Create(*o.reader, sink, opts);
  REQUIRE(engine.has_value());
  o.file->Hold();
  auto start = std::async(std::launch::async, [&] { return (*engine)->Start(); });
  REQUIRE(o.file->WaitUntilHeld());
  // Every fetch of the preload is held by storage: a fault on the last block of the order is served now.
  const uint32_t last = o.reader->restore_order().back();
  PageRef page = o.reader->PageOf(o.reader->BlockMembers(last)[0].page);
  auto fault = std::async(std::launch::async, [&] { return (*engine)->HandleFault(page); });
  const bool served_while_held = fault.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  o.file->Release();
  REQUIRE(served_while_held);
  auto out = fault.get();
  REQUIRE(out.has_value());
  CHECK(out->kind == FaultKind::kBlocking);
  REQUIRE(start.get().ok());
  auto st = (*engine)->Stats();
  const size_t blocks = o.reader->blocks().size();
  CHECK(st.blocks_loaded == blocks);
  CHECK(st.blocks_read == blocks);  // each block once: the fault's block was not installed again
  CHECK(st.blocks_read_demand == 1);
  CHECK(st.blocks_read_preload == blocks - 1);
  CHECK(st.preload_batches >= 8);
  CHECK(st.preload_batches <= 10);
  CHECK(o.file->max_batch_bytes() <= eighth);
  CHECK(o.file->single_reads() - reads_at_open <= 1);  // the fault's block: no block of the preload read alone
  CHECK(sink.double_installs() == 0);
  CheckEveryStoredPage(sink, m, *o.reader);
  size_t preloaded = 0;
  for (const auto& e : (*engine)->Timeline()) preloaded += e.kind == EngineEventKind::kPreloadBlock;
  CHECK(preloaded == blocks - 1);
}

TEST_CASE("an eager preload from a local file (no hint) reads one block at a time", "[engine][preload][batch]") {
  MemCheckpoint m = Checkpoint();
  Opened o = Open(m, 0);
  const uint64_t reads_at_open = o.file->single_reads();
  RecordingSink sink(m.regions);
  RestoreEngineOptions opts;
  opts.preload_all = true;
  opts.background_loader = false;
  auto engine = RestoreEngine::Create(*o.reader, sink, opts);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  CHECK((*engine)->Stats().preload_batches == 0);
  CHECK(o.file->batch_sizes().empty());
  CHECK(o.file->single_reads() - reads_at_open == o.reader->blocks().size());
  CheckEveryStoredPage(sink, m, *o.reader);
}
