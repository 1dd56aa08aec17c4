#include "push/request_workers.h"

#include <algorithm>

#include <fmt/format.h>

namespace halite::qemu::push {

RequestWorkers::RequestWorkers(ChannelHealth& health, const SectionWriter& stream, const SavedVmState& state,
                               std::function<Status(PageId)> handler)
    : health_(health), stream_(stream), state_(state), handler_(std::move(handler)) {}

void RequestWorkers::Start(unsigned count) {
  for (unsigned i = 0; i < std::max(1u, count); ++i) threads_.emplace_back([this] { Loop(); });
}

void RequestWorkers::Go() {
  auto lock = health_.Lock();
  go_ = true;
  health_.NotifyAll();
}

void RequestWorkers::EnqueueLocked(const PageRequest& request) {
  queue_.push_back(request);
  health_.NotifyAll();
}

void RequestWorkers::SetPlacedElsewhere(std::vector<bool> blocks, std::function<bool(PageId)> placed) {
  placed_blocks_ = std::move(blocks);
  placed_ = std::move(placed);
  placed_set_.store(true, std::memory_order_release);
}

void RequestWorkers::Stop() {
  {
    auto lock = health_.Lock();
    stop_ = true;
    health_.NotifyAll();
  }
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  // Requests still queued were never served: the stream ended (or the channel failed) before a worker took them.
  // Each is still counted, so requests == answered + already sent + after end holds when the stream ended.
  auto lock = health_.Lock();
  for (const PageRequest& r : queue_) {
    bool all_sent = true;
    for (uint64_t p = r.first; all_sent && p < r.first + r.count; ++p) all_sent = IsIn(PageId{r.block, p});
    if (all_sent) {
      ++already_sent_;
    } else if (stream_.ended()) {
      ++after_end_;
    }
  }
  queue_.clear();
}

bool RequestWorkers::IsIn(const PageId& id) const {
  const bool direct =
      placed_set_.load(std::memory_order_acquire) && id.block < placed_blocks_.size() && placed_blocks_[id.block];
  return stream_.IsSent(id) || (direct && placed_(id));
}

void RequestWorkers::Loop() {
  for (;;) {
    PageRequest r;
    {
      auto lock = health_.Lock();
      health_.Wait(lock, [&] { return stop_.load() || (go_ && !queue_.empty()); });
      if (stop_ || health_.failed()) return;
      r = queue_.front();
      queue_.pop_front();
    }
    if (!Serve(r)) return;
  }
}

bool RequestWorkers::Serve(const PageRequest& r) {
  bool any = false;
  // Asked again for every page: a request that came before the placement was decided (QEMU's first faults race
  // LISTEN's PONG) is answered directly once it is, and then the rest of its host page is in.
  auto in = [&](const PageId& id) { return IsIn(id); };
  for (uint64_t p = r.first; p < r.first + r.count; ++p) {
    const PageId id{r.block, p};
    if (in(id)) continue;
    any = true;
    Status s = handler_(id);
    if (s.ok() || in(id)) continue;
    if (stream_.ended()) {
      // The stream ended meanwhile: a page never sent reads as zero on the destination; nothing to answer.
      auto lock = health_.Lock();
      ++after_end_;
      return true;
    }
    health_.Fail(s.WithContext(fmt::format("answering QEMU's request for page {:#x} of {}", p * kTargetPageSize,
                                           state_.ram_blocks[r.block].name)));
    return false;
  }
  if (!any) {
    auto lock = health_.Lock();
    ++already_sent_;
  } else {
    latency_.Record(uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - r.received).count()));
  }
  return true;
}

}  // namespace halite::qemu::push
