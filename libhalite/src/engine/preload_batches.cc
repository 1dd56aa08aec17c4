// Start()'s preload from storage that suggests batches (an object store: loader_batch_bytes, ReadHints): an eager
// restore from s3:// or rados:// read every block with a request of its own, one block per preload thread at a
// time (issue 28: a 421 MiB checkpoint of 3,775 blocks took 54 s from radosgw against 0.77 s for a plain download
// of the object). Here the restore order is cut into batches of batch_bytes_ of stored payload, fetched in that
// order by kFetchers threads (each batch one FetchBlocks: neighbouring blocks joined into large ranged reads,
// several in flight), at most kFetchedAhead batches ahead of the decoding; the preload threads decode and install
// the fetched blocks, the earliest batch first, so the network and the CPUs work at once.
//
// The engine's promises hold as for the loader's batches (loader_batch.cc): a block is claimed only once its batch
// has arrived, so a fault never waits for a fetch in flight; before each fetch the fetchers step aside for demand
// reads in flight (at most kMaxStepAside each time: on an object store requests run side by side). A block no
// batch could load (a fault had it, a fetch failed) is loaded at the end as the plain preload does, so Start still
// returns with every block in or with the first error.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "engine/engine_impl.h"

namespace halite {
namespace {

// Fetches in flight at once (each of several requests): two keep the pipe full while one batch's last request
// is slow, without more requests than radosgw serves well on a small machine (shared/notes/object-store.md:
// beyond ~8-16 in flight a 2-core host measures CPU contention).
constexpr unsigned kFetchers = 2;
// Fetched batches not yet decoded: bounds the payload memory at kFetchedAhead x batch_bytes_ (32 MiB at 8 MiB).
constexpr size_t kFetchedAhead = 4;
constexpr std::chrono::milliseconds kMaxStepAside{2};

}  // namespace

struct RestoreEngine::Impl::PreloadPipeline {
  struct Batch {
    std::vector<uint32_t> blocks;
    std::vector<FetchedBlock> fetched;
    uint64_t start_ns = 0;
    size_t next = 0;  // the next block a preload thread takes (under mu)
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<uint32_t>> order;            // the batches, in restore order
  size_t next_fetch = 0;                               // index into order of the next batch to fetch
  std::map<size_t, std::shared_ptr<Batch>> fetched;   // fetched batches by index, not yet handed out whole
  size_t fetchers_running = 0;
  size_t in_flight = 0;  // fetches under way
  bool failed = false;
  Status first_error;
};

void RestoreEngine::Impl::PreloadFetcher(PreloadPipeline& p) {
  for (;;) {
    // Demand reads first; then the next batch of the order, so that fetches start in restore order.
    if (!StepAsideForDemand(kMaxStepAside)) {
      std::lock_guard<std::mutex> lock(p.mu);
      if (!p.failed) p.first_error = Status::Aborted(reader_.name() + ": the restore was stopped during its preload");
      p.failed = true;
      p.cv.notify_all();
      break;
    }
    size_t index;
    {
      std::unique_lock<std::mutex> lock(p.mu);
      // Stay at most kFetchedAhead batches ahead of the decoding.
      p.cv.wait(lock, [&] { return p.failed || p.fetched.size() + p.in_flight < kFetchedAhead; });
      if (p.failed || p.next_fetch >= p.order.size()) break;
      index = p.next_fetch++;
      ++p.in_flight;
    }
    auto batch = std::make_shared<PreloadPipeline::Batch>();
    batch->blocks = std::move(p.order[index]);
    batch->start_ns = NowNs();
    (void)reader_.FetchBlocks(batch->blocks, &batch->fetched);  // each block has its own status
    c_.read_ns.fetch_add(NowNs() - batch->start_ns, std::memory_order_relaxed);
    c_.preload_batches.fetch_add(1, std::memory_order_relaxed);
    if (batch->fetched.size() != batch->blocks.size()) batch->fetched.resize(batch->blocks.size());
    std::lock_guard<std::mutex> lock(p.mu);
    p.fetched.emplace(index, std::move(batch));
    --p.in_flight;
    p.cv.notify_all();
  }
  std::lock_guard<std::mutex> lock(p.mu);
  --p.fetchers_running;
  p.cv.notify_all();
}

void RestoreEngine::Impl::PreloadDecoder(PreloadPipeline& p) {
  for (;;) {
    std::shared_ptr<PreloadPipeline::Batch> batch;
    size_t i = 0;
    {
      std::unique_lock<std::mutex> lock(p.mu);
      p.cv.wait(lock, [&] { return p.failed || !p.fetched.empty() || p.fetchers_running == 0; });
      if (p.failed || p.fetched.empty()) return;
      // The earliest fetched batch: the restore order, as far as the fetches' arrival allows.
      auto it = p.fetched.begin();
      batch = it->second;
      i = batch->next++;
      if (batch->next >= batch->blocks.size()) {
        p.fetched.erase(it);  // handed out whole: room for the next fetch
        p.cv.notify_all();
      }
    }
    const uint32_t b = batch->blocks[i];
    uint32_t expected = kNotLoaded;
    if (!block_state_[b].compare_exchange_strong(expected, kLoading, std::memory_order_acq_rel)) {
      c_.loader_fetched_unused.fetch_add(1, std::memory_order_relaxed);  // a fault has it; the end checks it
      continue;
    }
    Status s = FinishBatchBlock(b, batch->fetched[i], Cause::kPreload, batch->start_ns);
    std::vector<uint8_t>().swap(batch->fetched[i].payload);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(p.mu);
      if (!p.failed) p.first_error = s;
      p.failed = true;
      p.cv.notify_all();
      return;
    }
  }
}

Status RestoreEngine::Impl::PreloadInBatches(const std::vector<uint32_t>& blocks, unsigned threads) {
  PreloadPipeline p;
  for (size_t cursor = 0; cursor < blocks.size();) {
    std::vector<uint32_t> batch;
    FillBatch(blocks, &cursor, &batch);
    if (!batch.empty()) p.order.push_back(std::move(batch));
  }
  const unsigned fetchers = unsigned(std::min<size_t>(kFetchers, p.order.size()));
  p.fetchers_running = fetchers;
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < fetchers; ++i) pool.emplace_back([&] { PreloadFetcher(p); });
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back([&] { PreloadDecoder(p); });
  PreloadDecoder(p);
  for (auto& t : pool) t.join();
  if (p.failed) return p.first_error;
  // What no batch loaded: blocks a fault was loading (wait for it) or that a failed fetch left (read them now).
  for (uint32_t b : blocks) {
    bool read = false, waited = false;
    HLT_RETURN_IF_ERROR(EnsureBlock(b, Cause::kPreload, true, &read, &waited));
  }
  return Status::Ok();
}

}  // namespace halite
