// Everything the engine loads without a fault asking: the preload in Start(), the restore-order stream and
// Twinkle's demand prediction, all on one background thread that steps aside whenever a demand read is running.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "engine/engine_impl.h"

namespace halite {
namespace {

// Loader batches fetched ahead of the one being decoded (object stores; see BackgroundThread).
constexpr size_t kLoaderFetchesAhead = 2;

}  // namespace

RestoreEngine::Impl::~Impl() { Stop(); }

Status RestoreEngine::Impl::Preload(const std::vector<uint32_t>& blocks) {
  unsigned n = options_.preload_threads;
  if (n == 0) n = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  n = std::max(1u, std::min<unsigned>(n, unsigned(blocks.size())));
  // From an object store a request per block costs a round trip each (preload_batches.cc).
  if (batch_bytes_ > 0 && blocks.size() > 1) return PreloadInBatches(blocks, n);
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < blocks.size();) {
      uint64_t t = NowNs();
      bool read = false, waited = false;
      Status s = EnsureBlock(blocks[i], Cause::kPreload, true, &read, &waited);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        next = blocks.size();  // stop the others too
        return;
      }
      if (read && timeline_.enabled()) {
        auto members = reader_.BlockMembers(blocks[i]);
        PageRef p = members.empty() ? PageRef{} : RefOf(members[0].page);
        timeline_.Add({t, p, EngineEventKind::kPreloadBlock, blocks[i], NowNs() - t});
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n; ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return first;
}

Status RestoreEngine::Impl::Start() {
  {
    std::lock_guard<std::mutex> lock(loader_mu_);
    if (started_) return Status::InvalidArgument("RestoreEngine::Start called twice");
    started_ = true;
  }
  if (options_.skip_present_at_start) SkipPresentPages();
  const auto& order = reader_.restore_order();
  if (options_.preload_all || options_.preload_working_set) {
    size_t n = options_.preload_all ? order.size() : std::min<size_t>(reader_.working_set_blocks(), order.size());
    Status s = Preload(std::vector<uint32_t>(order.begin(), order.begin() + ptrdiff_t(n)));
    if (!s.ok()) {
      // No loader thread will run, so none will ever mark the stream done: say so now, or WaitForLoader would
      // wait forever for a thread that does not exist.
      std::lock_guard<std::mutex> lock(loader_mu_);
      thread_exited_ = true;
      loader_error_ = s;
      done_cv_.notify_all();
      return s;
    }
  }
  last_fault_ns_.store(NowNs(), std::memory_order_relaxed);  // idleness counts from the start
  if (options_.background_loader || options_.predict_segment_pages > 0 || options_.idle_sweep_ms > 0) {
    if (UsesLoaderHelpers()) {
      std::lock_guard<std::mutex> lock(loader_mu_);
      helpers_running_ = options_.loader_threads - 1;
    }
    thread_ = std::thread([this] { BackgroundThread(); });
    for (unsigned i = 1; UsesLoaderHelpers() && i < options_.loader_threads; ++i) {
      helpers_.emplace_back([this] { LoaderHelperThread(); });
    }
  } else {
    std::lock_guard<std::mutex> lock(loader_mu_);
    thread_exited_ = true;
  }
  return Status::Ok();
}

void RestoreEngine::Impl::SkipPresentPages() {
  if (any_large_) SkipPresentHostPages();
  // Pages no fault or block load has claimed yet: Start runs before the loader, faults may already come.
  for (uint32_t r = 0; r < reader_.regions().size(); ++r) {
    if (region_unit_[r] > 1) continue;  // SkipPresentHostPages
    for (uint64_t g = region_first_[r]; g < region_first_[r + 1]; ++g) {
      if (installed_.Test(g) || !sink_.IsPresent(RefOf(g)) || !claimed_.TrySet(g)) continue;
      installed_.Set(g);
      c_.pages_present_at_start.fetch_add(1, std::memory_order_relaxed);
    }
  }
  for (uint32_t b = 0; b < reader_.blocks().size(); ++b) {
    bool all = true;
    for (const BlockMember& m : reader_.BlockMembers(b)) all = all && installed_.Test(m.page);
    uint32_t expected = kNotLoaded;
    if (!all || !block_state_[b].compare_exchange_strong(expected, kLoading)) continue;
    c_.blocks_present_at_start.fetch_add(1, std::memory_order_relaxed);
    c_.blocks_loaded.fetch_add(1, std::memory_order_relaxed);
    SetBlockState(b, kLoaded);
  }
}

void RestoreEngine::Impl::Stop() {
  {
    std::lock_guard<std::mutex> lock(loader_mu_);
    stop_ = true;
    stopping_.store(true, std::memory_order_release);
  }
  loader_cv_.notify_all();
  done_cv_.notify_all();
  // WaitForLoader may wait on a stripe for a block a fault still installs.
  for (Stripe& st : stripes_) {
    { std::lock_guard<std::mutex> lock(st.mu); }
    st.cv.notify_all();
  }
  for (std::thread& helper : helpers_) {
    if (helper.joinable()) helper.join();
  }
  if (thread_.joinable()) thread_.join();
}

Status RestoreEngine::Impl::WaitForLoader() {
  std::unique_lock<std::mutex> lock(loader_mu_);
  if (!options_.background_loader && options_.idle_sweep_ms == 0) return Status::Ok();
  done_cv_.wait(lock, [&] { return loader_done_ || stop_ || thread_exited_ || !started_; });
  if (!loader_error_.ok()) return loader_error_;
  if (loader_done_ && !stop_) {
    // The loader passes over a block a fault has claimed (kLoading) without waiting for it, so it can be done while
    // that fault still installs its block: wait for those too, or "every block is in" would not hold yet (a restore
    // of a guest with few stored pages, whose first faults outlast the whole loader, failed its final check).
    // Without loader_mu_: a finishing fault takes it to wake the loader.
    lock.unlock();
    for (uint32_t b = 0; b < reader_.blocks().size(); ++b) {
      if (!WaitWhileLoadingUnlessStopped(b)) break;
    }
    lock.lock();
  }
  for (const auto& [block, error] : loader_block_errors_) {
    if (block_state_[block].load(std::memory_order_acquire) != kLoaded) return error;
  }
  return Status::Ok();
}

bool RestoreEngine::Impl::StepAsideForDemand(std::chrono::nanoseconds max_step_aside) {
  std::unique_lock<std::mutex> lock(loader_mu_);
  loader_cv_.wait_for(lock, max_step_aside,
                      [&] { return stop_ || demand_reads_.load(std::memory_order_acquire) == 0; });
  return !stop_;
}

bool RestoreEngine::Impl::WaitForTurn(uint64_t bytes, std::chrono::nanoseconds max_step_aside) {
  std::unique_lock<std::mutex> lock(loader_mu_);
  const bool bounded = max_step_aside != std::chrono::nanoseconds::max();
  const auto give_up = std::chrono::steady_clock::now() + (bounded ? max_step_aside : std::chrono::nanoseconds(0));
  for (;;) {
    // A fault never waits behind the loader: step aside while any demand read is in flight (for at most
    // max_step_aside, when the loader's requests cannot delay the fault's).
    const auto drained = [&] { return stop_ || demand_reads_.load(std::memory_order_acquire) == 0; };
    if (bounded) {
      loader_cv_.wait_until(lock, give_up, drained);
    } else {
      loader_cv_.wait(lock, drained);
    }
    if (stop_) return false;
    auto wait = limiter_.WaitTime(bytes);
    if (wait.count() == 0) break;
    loader_cv_.wait_for(lock, wait, [&] { return stop_; });
  }
  // Only this thread spends from the limiter, so what WaitTime promised is still there.
  limiter_.Acquire(bytes);
  return true;
}

void RestoreEngine::Impl::LoadInBackground(uint32_t b, Cause cause) {
  if (block_state_[b].load(std::memory_order_acquire) != kNotLoaded) return;
  if (!WaitForTurn(reader_.blocks()[b].stored_length)) return;
  uint64_t t = NowNs();
  bool read = false, waited = false;
  Status s = EnsureBlock(b, cause, false, &read, &waited);
  if (!s.ok()) {
    NoteLoaderError(b, s);
    return;
  }
  if (read && timeline_.enabled()) {
    auto members = reader_.BlockMembers(b);
    PageRef p = members.empty() ? PageRef{} : RefOf(members[0].page);
    timeline_.Add({t, p, cause == Cause::kPredicted ? EngineEventKind::kPredictedBlock : EngineEventKind::kLoaderBlock,
                   b, NowNs() - t});
  }
}

void RestoreEngine::Impl::NoteLoaderError(uint32_t b, const Status& s) {
  // The block's faults will report it; the stream goes on with the others.
  std::lock_guard<std::mutex> lock(loader_mu_);
  loader_block_errors_.emplace_back(b, s);
}

void RestoreEngine::Impl::NotePredictionFault(PageRef page) {
  if (options_.predict_segment_pages == 0) return;
  uint64_t seg = segment_base_[page.region] + page.page / options_.predict_segment_pages;
  uint32_t faults = segment_faults_[seg].fetch_add(1, std::memory_order_relaxed) + 1;
  if (faults != options_.predict_threshold) return;  // exactly once per segment
  {
    std::lock_guard<std::mutex> lock(loader_mu_);
    pending_segments_.push_back(seg);
  }
  loader_cv_.notify_all();
}

void RestoreEngine::Impl::FetchSegment(uint64_t seg) {
  auto it = std::upper_bound(segment_base_.begin(), segment_base_.end() - 1, seg);
  uint32_t region = uint32_t(it - segment_base_.begin() - 1);
  uint64_t n = options_.predict_segment_pages;
  uint64_t first = (seg - segment_base_[region]) * n;
  uint64_t last = std::min(first + n, reader_.regions()[region].page_count());
  std::vector<uint32_t> blocks;
  for (uint64_t p = first; p < last; ++p) {
    uint64_t g = region_first_[region] + p;
    if (installed_.Test(g)) continue;
    PageLocation loc = reader_.Locate(g);
    // Zero pages of the segment are left to their faults: installing them costs no I/O either way.
    if (loc.kind == PageKind::kStored) blocks.push_back(loc.block);
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  if (batch_bytes_ > 0) {
    for (size_t cursor = 0; cursor < blocks.size();) {
      std::vector<uint32_t> batch;
      FillBatch(blocks, &cursor, &batch);
      LoadBatchInBackground(std::move(batch), Cause::kPredicted);
      std::lock_guard<std::mutex> lock(loader_mu_);
      if (stop_) return;
    }
    return;
  }
  for (uint32_t b : blocks) {
    LoadInBackground(b, Cause::kPredicted);
    std::lock_guard<std::mutex> lock(loader_mu_);
    if (stop_) return;
  }
}

void RestoreEngine::Impl::LowerThreadPriority() const {
  if (options_.loader_nice != 0) {
    // Per-thread on Linux; failing (no permission to lower it, say) only costs the guest a little CPU.
    (void)setpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)), options_.loader_nice);
  }
}

bool RestoreEngine::Impl::UsesLoaderHelpers() const {
  return options_.loader_threads > 1 && options_.background_loader && batch_bytes_ == 0 && limiter_.unlimited() &&
         options_.predict_segment_pages == 0;
}

void RestoreEngine::Impl::LoaderHelperThread() {
  LowerThreadPriority();
  const auto& order = reader_.restore_order();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(loader_mu_);
      if (stop_) break;
    }
    const size_t i = order_cursor_.fetch_add(1, std::memory_order_relaxed);
    if (i >= order.size()) break;
    LoadInBackground(order[i], Cause::kLoader);
  }
  std::lock_guard<std::mutex> lock(loader_mu_);
  --helpers_running_;
  loader_cv_.notify_all();  // the background thread may be waiting for the last helper to finish its block
}

void RestoreEngine::Impl::BackgroundThread() {
  LowerThreadPriority();
  const bool shared_order = UsesLoaderHelpers();
  const auto& order = reader_.restore_order();
  size_t cursor = options_.background_loader ? 0 : order.size();
  bool snapshot_before_sweep = false;
  // The next batches of the order, fetched while the last one is decoded: two in flight, so that the network is
  // never idle while one batch's last request is slow (one at a time kept a lazy restore from radosgw at ~1.6x a
  // plain download of the object: bench/results/2026-11-27-objstore-restore-all.md).
  std::deque<PendingBatch> ahead;
  const auto fetch_next = [&] {
    if (!MayFetchAhead()) return;
    while (ahead.size() < kLoaderFetchesAhead) {
      std::vector<uint32_t> next;
      FillBatch(order, &cursor, &next);
      if (next.empty()) return;
      ahead.push_back(FetchAhead(std::move(next)));
    }
  };
  for (;;) {
    uint64_t segment = UINT64_MAX;
    uint32_t block = UINT32_MAX;
    std::vector<uint32_t> batch;  // with batch_bytes_: `block` and the blocks after it
    {
      std::unique_lock<std::mutex> lock(loader_mu_);
      for (;;) {
        if (stop_) break;
        if (!pending_segments_.empty()) {
          // Twinkle: the segment with the most faults first.
          auto best = std::max_element(pending_segments_.begin(), pending_segments_.end(), [&](uint64_t a, uint64_t b) {
            return segment_faults_[a].load(std::memory_order_relaxed) <
                   segment_faults_[b].load(std::memory_order_relaxed);
          });
          segment = *best;
          pending_segments_.erase(best);
          break;
        }
        if (!ahead.empty()) {
          block = ahead.front().blocks.front();  // a batch fetched ahead: it comes next
          break;
        }
        if (shared_order) {
          const size_t i = order_cursor_.fetch_add(1, std::memory_order_relaxed);
          if (i < order.size()) {
            block = order[i];
            break;
          }
          if (helpers_running_ > 0) {
            // The order is handed out; the stream is done once the helpers' last blocks are in.
            loader_cv_.wait(lock, [&] { return stop_ || helpers_running_ == 0; });
            continue;
          }
        } else if (cursor < order.size()) {
          if (batch_bytes_ > 0) {
            FillBatch(order, &cursor, &batch);
            if (batch.empty()) continue;  // the rest of the order was loaded already
            block = batch.front();
          } else {
            block = order[cursor++];
          }
          break;
        }
        if ((options_.background_loader || sweeping_) && !loader_done_) {
          loader_done_ = true;
          done_cv_.notify_all();
        }
        if (!options_.background_loader && options_.idle_sweep_ms > 0 && !sweeping_) {
          // Loader off: wait for the guest to go quiet, then stream what is left.
          const uint64_t idle_until =
              last_fault_ns_.load(std::memory_order_relaxed) + uint64_t(options_.idle_sweep_ms) * 1000000;
          const uint64_t now = NowNs();
          if (now >= idle_until) {
            sweeping_ = true;
            cursor = 0;
            // Stats() takes loader_mu_: snapshot once the lock is released, before the first sweep load.
            snapshot_before_sweep = true;
            continue;
          }
          loader_cv_.wait_for(lock, std::chrono::nanoseconds(idle_until - now),
                              [&] { return stop_ || !pending_segments_.empty(); });
          continue;
        }
        if (options_.predict_segment_pages == 0) break;
        loader_cv_.wait(lock, [&] { return stop_ || !pending_segments_.empty(); });
      }
      if (stop_ || (segment == UINT64_MAX && block == UINT32_MAX)) {
        thread_exited_ = true;
        done_cv_.notify_all();
        return;
      }
    }
    if (snapshot_before_sweep) {
      snapshot_before_sweep = false;
      RestoreEngineStats before = Stats();
      std::lock_guard<std::mutex> lock(loader_mu_);
      before_sweep_ = before;
    }
    const Cause cause = options_.background_loader ? Cause::kLoader : Cause::kSweep;
    if (segment != UINT64_MAX) {
      FetchSegment(segment);
    } else if (!ahead.empty()) {
      std::optional<PendingBatch> mine = std::move(ahead.front());
      ahead.pop_front();
      LoadBatchInBackground({}, cause, std::move(mine), fetch_next);
    } else if (!batch.empty()) {
      LoadBatchInBackground(std::move(batch), cause, {}, fetch_next);
    } else {
      LoadInBackground(block, cause);
    }
  }
}

}  // namespace halite
