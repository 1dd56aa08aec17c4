// objstore-loader-order URI IMAGE: how a restore from an object store reads it (issue 28 item 7), on the real
// store (objstore_test.sh runs it on the single-node Ceph after saving IMAGE to URI):
//   1. An eager restore (preload_all) fetches the restore order in batches, in that order, more than one batch in
//      flight at once, each batch a ranged read of many blocks, not a request per block.
//   2. A demand fault is served while the preload's batch fetches are held back (a gate in front of storage
//      stops every read of more than one block): a fault never waits behind the preload.
//   3. The lazy loader streams the order in batches too, in restore order, each sent as several requests, and a
//      fault is served while its batch is held.
// Every page restored is compared with IMAGE. Exit 0 when all hold, 1 (saying what failed) otherwise.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "halite/checkpoint_location.h"
#include "halite/checkpoint_reader.h"
#include "halite/page_sink.h"
#include "halite/restore_engine.h"
#include "halite/storage.h"
#include "memory_sink.h"

namespace {

using namespace halite;
using Clock = std::chrono::steady_clock;
using halite::testing::MemorySink;

int failures = 0;
void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  }
}

// One ReadBatch call as storage saw it.
struct BatchCall {
  uint64_t entry = 0;  // the order calls reached storage's door (before the gate)
  std::vector<uint64_t> offsets;
  Clock::time_point start, end;
};

// Records every ReadBatch of more than one request and, while the gate is closed, holds those calls before they
// reach storage. Reads of one range (a fault's block) always pass.
class GatedFile final : public RandomAccessFile {
 public:
  explicit GatedFile(std::unique_ptr<RandomAccessFile> base) : base_(std::move(base)) {}
  const std::string& name() const override { return base_->name(); }
  uint64_t size() const override { return base_->size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override { return base_->ReadAt(offset, buffer); }
  Status ReadBatch(std::span<ReadRequest> requests) override {
    if (requests.size() <= 1) return base_->ReadBatch(requests);
    BatchCall call;
    call.entry = entries_.fetch_add(1);
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++held_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      --held_;
    }
    for (const ReadRequest& r : requests) call.offsets.push_back(r.offset);
    call.start = Clock::now();
    Status s = base_->ReadBatch(requests);
    call.end = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
    return s;
  }
  ReadHints hints() const override { return base_->hints(); }
  ReadCounters counters() const override { return base_->counters(); }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits until a batch is held at the gate (or the timeout passed); true when one is.
  bool WaitForHeld(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_ > 0; });
  }
  std::vector<BatchCall> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int held_ = 0;
  std::vector<BatchCall> calls_;
  std::atomic<uint64_t> entries_{0};
};

struct Opened {
  GatedFile* file = nullptr;  // owned by the reader
  std::unique_ptr<CheckpointReader> reader;
};

Opened OpenGated(const std::string& uri) {
  auto f = OpenCheckpointFile(uri);
  if (!f) {
    std::printf("FAIL: opening %s: %s\n", uri.c_str(), f.error().ToString().c_str());
    std::exit(1);
  }
  auto gated = std::make_unique<GatedFile>(std::move(*f));
  Opened o;
  o.file = gated.get();
  auto r = CheckpointReader::Open(std::move(gated));
  if (!r) {
    std::printf("FAIL: reading %s: %s\n", uri.c_str(), r.error().ToString().c_str());
    std::exit(1);
  }
  o.reader = std::move(*r);
  return o;
}

// Checks that the batches storage saw came in restore order: inside a batch the blocks ascend in the order, and
// in the order the calls reached storage a batch never comes before one that is three places further in the
// order: fetches are handed out in order, and two fetchers may pass each other on the way to storage.
void CheckOrder(const CheckpointReader& reader, const std::vector<BatchCall>& calls, const std::string& what) {
  std::vector<size_t> position(reader.blocks().size(), SIZE_MAX);
  for (size_t i = 0; i < reader.restore_order().size(); ++i) position[reader.restore_order()[i]] = i;
  std::vector<std::pair<uint64_t, uint32_t>> by_offset;
  for (uint32_t b = 0; b < reader.blocks().size(); ++b) by_offset.emplace_back(reader.blocks()[b].offset, b);
  std::sort(by_offset.begin(), by_offset.end());
  auto block_at = [&](uint64_t off) -> size_t {
    auto it = std::lower_bound(by_offset.begin(), by_offset.end(), std::make_pair(off, uint32_t(0)));
    return it != by_offset.end() && it->first == off ? position[it->second] : SIZE_MAX;
  };
  std::vector<BatchCall> sorted = calls;
  std::sort(sorted.begin(), sorted.end(), [](const BatchCall& a, const BatchCall& b) { return a.entry < b.entry; });
  std::vector<size_t> firsts;
  for (size_t k = 0; k < sorted.size(); ++k) {
    size_t prev = 0;
    for (size_t j = 0; j < sorted[k].offsets.size(); ++j) {
      size_t pos = block_at(sorted[k].offsets[j]);
      Check(pos != SIZE_MAX, what + ": batch " + std::to_string(k) + " reads something that is no block");
      if (pos == SIZE_MAX) return;
      Check(j == 0 || pos > prev, what + ": batch " + std::to_string(k) + " is not in restore order");
      prev = pos;
    }
    firsts.push_back(block_at(sorted[k].offsets[0]));
  }
  for (size_t k = 3; k < firsts.size(); ++k) {
    Check(firsts[k] > firsts[k - 3], what + ": batch " + std::to_string(k) + " (from position " +
                                         std::to_string(firsts[k]) + ") reached storage after batch " +
                                         std::to_string(k - 3) + " (from " + std::to_string(firsts[k - 3]) + ")");
  }
}

size_t MaxInFlight(const std::vector<BatchCall>& calls) {
  std::vector<std::pair<Clock::time_point, int>> edges;
  for (const BatchCall& c : calls) {
    edges.emplace_back(c.start, 1);
    edges.emplace_back(c.end, -1);
  }
  std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;  // an end before a start at a tie
  });
  int now = 0, most = 0;
  for (const auto& e : edges) most = std::max(most, now += e.second);
  return size_t(most);
}

void EagerCase(const std::string& uri, const std::vector<uint8_t>& image) {
  Opened o = OpenGated(uri);
  const CheckpointReader& reader = *o.reader;
  MemorySink sink(reader.regions());
  RestoreEngineOptions eo;
  eo.preload_all = true;
  eo.background_loader = false;
  eo.preload_threads = 2;
  auto engine = RestoreEngine::Create(reader, sink, eo);
  if (!engine) {
    std::printf("FAIL: engine: %s\n", engine.error().ToString().c_str());
    std::exit(1);
  }
  const uint64_t requests_at_open = o.file->counters().requests;
  o.file->Close();
  Status started;
  std::thread start([&] { started = (*engine)->Start(); });
  const bool held = o.file->WaitForHeld(std::chrono::seconds(30));
  Check(held, "eager: no batch of several blocks reached storage within 30 s (a request per block?)");
  // A fault on a block late in the restore order, while the preload's fetches are held: served at once.
  const auto& order = reader.restore_order();
  const uint32_t late = order[order.size() * 3 / 4];
  const auto members = reader.BlockMembers(late);
  Result<FaultOutcome> fault = Status::Internal("no member");
  if (!members.empty()) fault = (*engine)->HandleFault(reader.PageOf(members[0].page));
  Check(fault.has_value(), "eager: a fault while the preload's fetches were held failed: " +
                               (fault ? std::string() : fault.error().ToString()));
  if (fault) Check(fault->kind == FaultKind::kBlocking && !fault->joined, "eager: the fault did not read its block");
  Check((*engine)->Stats().blocks_read_demand == 1, "eager: the fault's block was not read by the fault");
  o.file->Open();
  start.join();
  Check(started.ok(), "eager: Start failed: " + started.ToString());
  const RestoreEngineStats st = (*engine)->Stats();
  const std::vector<BatchCall> calls = o.file->calls();
  const uint64_t requests = o.file->counters().requests - requests_at_open;
  std::printf("eager from %s: %zu blocks in %llu batches (%zu reads of several blocks), %llu requests to storage, "
              "at most %zu batches in flight\n",
              uri.c_str(), reader.blocks().size(), (unsigned long long)st.preload_batches, calls.size(),
              (unsigned long long)requests, MaxInFlight(calls));
  Check(st.blocks_loaded == reader.blocks().size(), "eager: not every block was loaded");
  Check(st.preload_batches >= 2, "eager: fewer than two preload batches");
  // Pieces of at most 1 MiB (s3) or 512 KiB (rados) of ~110 KiB blocks: 3 a request at least (one each was the bug).
  Check(requests * 3 <= reader.blocks().size(), "eager: fewer than 3 blocks per storage request");
  Check(MaxInFlight(calls) >= 2, "eager: never two batch fetches in flight at once");
  CheckOrder(reader, calls, "eager");
  Check(sink.twice() == 0, "eager: pages installed twice");
  Check(sink.Mismatches(image) == 0, "eager: restored pages differ from the image");
}

void LoaderCase(const std::string& uri, const std::vector<uint8_t>& image) {
  Opened o = OpenGated(uri);
  const CheckpointReader& reader = *o.reader;
  MemorySink sink(reader.regions());
  RestoreEngineOptions eo;  // lazy: the loader streams the order
  auto engine = RestoreEngine::Create(reader, sink, eo);
  if (!engine) std::exit(1);
  const uint64_t requests_at_open = o.file->counters().requests;
  o.file->Close();
  Status s = (*engine)->Start();
  Check(s.ok(), "loader: Start: " + s.ToString());
  Check(o.file->WaitForHeld(std::chrono::seconds(30)), "loader: no batch of several blocks within 30 s");
  // While the loader's batch is held: a fault on the last block of the order is served at once.
  const uint32_t last = reader.restore_order().back();
  const auto members = reader.BlockMembers(last);
  Result<FaultOutcome> fault = Status::Internal("no member");
  if (!members.empty()) fault = (*engine)->HandleFault(reader.PageOf(members[0].page));
  Check(fault.has_value() && fault->kind == FaultKind::kBlocking && !fault->joined,
        "loader: a fault while the loader's batch was held was not served by its own read");
  o.file->Open();
  s = (*engine)->WaitForLoader();
  Check(s.ok(), "loader: " + s.ToString());
  const RestoreEngineStats st = (*engine)->Stats();
  const std::vector<BatchCall> calls = o.file->calls();
  const uint64_t requests = o.file->counters().requests - requests_at_open;
  std::printf("loader from %s: %llu batches, %llu requests to storage, at most %zu batches in flight\n", uri.c_str(),
              (unsigned long long)st.loader_batches, (unsigned long long)requests, MaxInFlight(calls));
  Check(st.loader_batches >= 2, "loader: fewer than two batches");
  // Each batch of several MiB goes out as several ranged reads at once (the backend's requests in flight).
  Check(requests >= 2 * calls.size(), "loader: batches were not split into several requests");
  Check(requests * 3 <= reader.blocks().size(), "loader: fewer than 3 blocks per storage request");
  CheckOrder(reader, calls, "loader");
  Check(sink.twice() == 0, "loader: pages installed twice");
  Check(sink.Mismatches(image) == 0, "loader: restored pages differ from the image");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: objstore-loader-order URI IMAGE\n");
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.empty() || image.size() % 4096 != 0) {
    std::printf("FAIL: %s: not a memory image\n", argv[2]);
    return 1;
  }
  EagerCase(argv[1], image);
  LoaderCase(argv[1], image);
  std::printf("%s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
