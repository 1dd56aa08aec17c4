// The background thread's batches (RestoreEngineOptions::loader_batch_bytes): from an object store, where each
// request costs a round trip (~2-4 ms from radosgw, bench/results/2026-11-25-1620-objstore.md), the loader asks
// for the next few MiB of the restore order at once - joined into a few large requests, several in flight, by the
// storage backend - instead of one block per request.
//
// The engine's promises hold as for single blocks: a block is claimed (not loaded -> loading) only once its batch
// has arrived, so a fault never waits for a batch in flight (it reads its own block, and the batch's copy is
// dropped); once claimed, the blocks of a batch are decoded and installed one by one, a block some fault is
// waiting for first, so that fault waits for one decode, not for the batch. Every block is verified as it is
// decoded (a payload that fails is read again, alone, once), a batch's transient read failure is retried block by
// block within max_read_attempts, and the rate limiter is charged for the whole batch before it is fetched.
//
// Before a batch the loader steps aside for demand reads in flight as it does before a single block, but for at
// most kMaxStepAside. Without a rate limit, the next two batches are fetched (on helper threads) while this one is
// decoded and installed, so that the network and the CPU work at once.
#include <algorithm>

#include "engine/engine_impl.h"

namespace halite {

namespace {

// Keeps the per-batch bookkeeping small however small the blocks are.
constexpr size_t kMaxBatchBlocks = 256;

// How long a batch waits for demand reads in flight to end. On an object store a fault's request never queues
// behind the loader's (each has its own connection), while a guest that faults without pause always has one in
// flight: waiting for none starved the stream (bench/results/2026-11-26-objstore.md: a 350 ms gap with no batch,
// 396 blocking faults instead of ~200).
constexpr std::chrono::milliseconds kMaxStepAside{2};

}  // namespace

void RestoreEngine::Impl::FillBatch(const std::vector<uint32_t>& order, size_t* cursor,
                                    std::vector<uint32_t>* batch) const {
  uint64_t bytes = 0;
  for (; *cursor < order.size() && batch->size() < kMaxBatchBlocks; ++*cursor) {
    const uint32_t b = order[*cursor];
    if (block_state_[b].load(std::memory_order_acquire) != kNotLoaded) continue;
    const uint64_t len = reader_.blocks()[b].stored_length;
    if (!batch->empty() && bytes + len > batch_bytes_) break;  // at most batch_bytes_, at least one block
    batch->push_back(b);
    bytes += len;
  }
}

bool RestoreEngine::Impl::MayFetchAhead() const { return limiter_.unlimited(); }

RestoreEngine::Impl::PendingBatch RestoreEngine::Impl::FetchAhead(std::vector<uint32_t> blocks) {
  PendingBatch p;
  p.start_ns = NowNs();
  p.fetched = std::async(std::launch::async, [this, blocks] {
    std::vector<FetchedBlock> fetched;
    (void)reader_.FetchBlocks(blocks, &fetched);
    return fetched;
  });
  p.blocks = std::move(blocks);
  return p;
}

void RestoreEngine::Impl::LoadBatchInBackground(std::vector<uint32_t> blocks, Cause cause,
                                                std::optional<PendingBatch> ahead, const std::function<void()>& next) {
  auto not_loaded = [&](uint32_t b) { return block_state_[b].load(std::memory_order_acquire) == kNotLoaded; };
  uint64_t t = 0;
  std::vector<FetchedBlock> fetched;
  if (ahead) {
    // Fetched while the loader decoded the batch before: its turn was taken when the fetch began.
    blocks = std::move(ahead->blocks);
    t = ahead->start_ns;
    fetched = ahead->fetched.get();
    c_.read_ns.fetch_add(NowNs() - t, std::memory_order_relaxed);
  } else {
    std::erase_if(blocks, [&](uint32_t b) { return !not_loaded(b); });
    uint64_t bytes = 0;
    for (uint32_t b : blocks) bytes += reader_.blocks()[b].stored_length;
    if (blocks.empty() || !WaitForTurn(bytes, kMaxStepAside)) return;
    // Faults may have loaded some while the loader waited for its turn.
    std::erase_if(blocks, [&](uint32_t b) { return !not_loaded(b); });
    if (blocks.empty()) return;
    t = NowNs();
    (void)reader_.FetchBlocks(blocks, &fetched);  // each block has its own status, handled as it is decoded
    c_.read_ns.fetch_add(NowNs() - t, std::memory_order_relaxed);
  }
  c_.loader_batches.fetch_add(1, std::memory_order_relaxed);
  if (fetched.size() != blocks.size()) return;  // refused before reading (no such block): cannot happen

  std::vector<size_t> claimed;
  for (size_t i = 0; i < blocks.size(); ++i) {
    uint32_t expected = kNotLoaded;
    if (block_state_[blocks[i]].compare_exchange_strong(expected, kLoading, std::memory_order_acq_rel)) {
      claimed.push_back(i);
    } else {
      c_.loader_fetched_unused.fetch_add(1, std::memory_order_relaxed);  // a fault read it meanwhile
    }
  }
  // The network fetches the next batches while this one is decoded and installed.
  if (next) next();
  // Every claimed block is finished, even when stopping: a block left "loading" would hold its faults forever.
  while (!claimed.empty()) {
    auto pick = std::find_if(claimed.begin(), claimed.end(), [&](size_t i) { return awaited_.Test(blocks[i]); });
    if (pick == claimed.end()) pick = claimed.begin();
    const size_t i = *pick;
    claimed.erase(pick);
    if (Status s = FinishBatchBlock(blocks[i], fetched[i], cause, t); !s.ok()) NoteLoaderError(blocks[i], s);
    std::vector<uint8_t>().swap(fetched[i].payload);  // its memory goes back as the batch drains
  }
}

Status RestoreEngine::Impl::FinishBatchBlock(uint32_t b, FetchedBlock& fetched, Cause cause, uint64_t batch_start_ns) {
  const BlockInfo& info = reader_.blocks()[b];
  thread_local std::vector<uint8_t> raw;
  raw.resize(info.raw_length());
  const uint64_t t_read = NowNs();
  bool reread = false;
  Status s = reader_.DecodeBlock(fetched, raw, &reread);
  if (reread) c_.blocks_reread.fetch_add(1, std::memory_order_relaxed);
  if (!s.ok() && s.retryable() && options_.max_read_attempts > 1) {
    // The batch's fetch was the first attempt; the rest go as for a block read alone.
    c_.read_retries.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(options_.retry_backoff);
    s = ReadWithRetries(b, raw, nullptr, 0, 2);
  }
  c_.read_ns.fetch_add(NowNs() - t_read, std::memory_order_relaxed);
  if (!s.ok()) return BlockReadFailed(b, s);
  HLT_RETURN_IF_ERROR(InstallLoaded(b, cause, raw, kNoPage, 0, nullptr));
  if (timeline_.enabled()) {
    auto members = reader_.BlockMembers(b);
    PageRef p = members.empty() ? PageRef{} : RefOf(members[0].page);
    const EngineEventKind kind = cause == Cause::kPredicted ? EngineEventKind::kPredictedBlock
                                 : cause == Cause::kPreload ? EngineEventKind::kPreloadBlock
                                                            : EngineEventKind::kLoaderBlock;
    timeline_.Add({batch_start_ns, p, kind, b, NowNs() - batch_start_ns});
  }
  return Status::Ok();
}

}  // namespace halite
