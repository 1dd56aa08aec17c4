// The threads that answer QEMU's page requests in a lazy restore. The return-path listener queues each request;
// a worker asks the handler for every page of it not sent yet (the handler sends them, usually as one section
// on the worker's own thread) and times the answer.
#ifndef HALITE_QEMU_PUSH_REQUEST_WORKERS_H_
#define HALITE_QEMU_PUSH_REQUEST_WORKERS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "halite/latency_histogram.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/status.h"
#include "push/channel_health.h"
#include "push/section_writer.h"

namespace halite::qemu::push {

struct PageRequest {
  uint32_t block = 0;
  uint64_t first = 0;  // page
  uint64_t count = 0;  // pages
  std::chrono::steady_clock::time_point received;
};

class RequestWorkers {
 public:
  // Borrows everything; `handler` must get the page sent or return an error (which fails the channel).
  RequestWorkers(ChannelHealth& health, const SectionWriter& stream, const SavedVmState& state,
                 std::function<Status(PageId)> handler);
  ~RequestWorkers() { Stop(); }

  // Starts `count` threads (at least one). They wait for Go().
  void Start(unsigned count);
  // Requests are served from now on (the guest runs), those queued before included.
  void Go();
  // Queues a request. With health.Lock() held.
  void EnqueueLocked(const PageRequest& request);
  // Pages of `blocks` that `placed` says are in QEMU's memory (placed directly, not through the stream) count as
  // sent: a request for them costs nothing. Call once; thread-safe against the workers.
  void SetPlacedElsewhere(std::vector<bool> blocks, std::function<bool(PageId)> placed);
  // Stops and joins the threads. A worker inside the handler finishes that call first. Requests left in the queue
  // are counted as already sent or after the end, as they were.
  void Stop();

  // With health.Lock() held.
  uint64_t already_sent_locked() const { return already_sent_; }
  uint64_t after_end_locked() const { return after_end_; }
  LatencySummary latency() const { return latency_.Summary(); }

 private:
  void Loop();
  // The page is in QEMU's memory: sent through the stream or placed directly.
  bool IsIn(const PageId& id) const;
  // Serves one request; false when it failed the channel.
  bool Serve(const PageRequest& r);

  ChannelHealth& health_;
  const SectionWriter& stream_;
  const SavedVmState& state_;
  std::function<Status(PageId)> handler_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  // Set once by SetPlacedElsewhere, then published by placed_set_.
  std::vector<bool> placed_blocks_;
  std::function<bool(PageId)> placed_;
  std::atomic<bool> placed_set_{false};
  // With health.Lock():
  std::deque<PageRequest> queue_;
  bool go_ = false;
  uint64_t already_sent_ = 0;  // every page asked for was sent already (in flight): nothing to do
  uint64_t after_end_ = 0;     // arrived after the stream ended (pages never sent read as zero)
  LatencyHistogram latency_;   // received -> answered (wait-free Record)
};

}  // namespace halite::qemu::push

#endif  // HALITE_QEMU_PUSH_REQUEST_WORKERS_H_
