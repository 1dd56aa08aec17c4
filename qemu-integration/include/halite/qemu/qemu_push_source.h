// Acting as the migration source when pages are pushed from several threads, in whatever order they become
// available (a restore engine installing locality blocks: halite/restore_engine.h), rather than pulled one at a
// time.
//
// Lazy (postcopy), the conversation is:
//   Begin()        header, configuration, OPEN_RETURN_PATH, PING, POSTCOPY_ADVISE, RAM START, one discard per
//                  block; the return-path thread starts;
//   sections       pages sent now are placed before the guest starts (a preload);
//   StartGuest()   PACKAGED (LISTEN, device state, PING, RUN); request workers start calling the handler;
//   sections       answers to requests (on the worker threads) and background pushes (any other thread);
//   Finish()       RAM END, EOF, then QEMU's SHUT. Pages never sent read as zero on the destination afterwards
//                  (POSTCOPY_ADVISE discarded all of its RAM, and ending postcopy unregisters userfaultfd), so
//                  a caller may leave zero pages unsent.
// Eager (precopy): Begin() (header, configuration, RAM START), sections, Finish() (RAM END, device state, EOF,
//   VMDESC, then wait for QEMU to close the channel). Every page should be sent, zero pages too: ROM blocks on
//   the destination start with its own contents.
//
// A section is one RAM PART section holding pages of any blocks. BeginSection() takes the stream for the calling
// thread until EndSection(); other threads' sections wait. A section begun on a thread other than a request
// worker, once the guest runs, is a background push: it first waits until the destination has read all but
// max_queued_push_pages of the pages already sent (SIOCOUTQ), so an answer to a request never queues behind
// more than that. Pages are never sent twice: AddPages / AddZeroPages test-and-set each page's bit before a byte
// is written, and fail with an internal error (QEMU would pause on "File exists").
//
// Errors are sticky: the first failure (the destination closed the channel or reported failure, a handler
// error, a stalled write) is kept, the socket is shut down (a postcopy destination then pauses with its guest
// frozen instead of running on incomplete memory), and every later call returns it.
//
// Thread-safety: BeginSection/AddPages/AddZeroPages/EndSection/SendPages/IsSent/status/stats from any thread;
// Begin, StartGuest, Finish and Abort from one controlling thread.
#ifndef HALITE_QEMU_QEMU_PUSH_SOURCE_H_
#define HALITE_QEMU_QEMU_PUSH_SOURCE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "halite/latency_histogram.h"
#include "halite/qemu/qemu_byte_io.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/qemu/qemu_stream_writer.h"
#include "halite/status.h"

namespace halite::qemu {

struct PushRestoreOptions {
  bool lazy = true;
  uint64_t pagesize_summary = 0;         // POSTCOPY_ADVISE; 0: OR of the blocks' page sizes, at least 4096
  uint32_t max_queued_push_pages = 512;  // background sections wait while more sent pages are unread; 0: no limit
  unsigned request_workers = 2;          // threads calling the request handler
  int stall_timeout_ms = 30000;          // a destination that reads nothing for this long is an error
  int shut_timeout_ms = 30000;           // lazy: after EOF, for SHUT
  int close_timeout_ms = 60000;          // eager: after the last byte, for the destination to close the channel
};

struct PushRestoreStats {
  uint64_t connect_to_package_us = 0;  // Begin() to PACKAGED flushed
  uint64_t connect_to_running_us = 0;  // Begin() to the PONG of the package's PING (devices loaded, RUN next)
  uint64_t total_us = 0;               // Begin() to SHUT (lazy) or to the destination closing (eager)
  uint64_t requests = 0;               // REQ_PAGES(_ID) messages
  uint64_t requests_already_sent = 0;  // every page asked for was already sent (in flight): nothing to do
  uint64_t requests_after_end = 0;     // arrived after EOF (pages never sent: they read as zero)
  uint64_t request_pages = 0;          // pages sent by sections on the request workers
  uint64_t preload_pages = 0;          // pages sent before PACKAGED
  uint64_t pushed_pages = 0;           // pages sent by background sections after PACKAGED
  uint64_t zero_pages = 0;             // of all sent, as ZERO records
  uint64_t sections = 0;
  uint64_t bytes_sent = 0;
  uint64_t throttle_waits = 0;  // background sections that waited for the destination to read
  uint64_t pages_sent_before_first_request = 0;
  // Request received -> its handler returned (the answer flushed); halite/latency_histogram.h (within ~6%,
  // max exact).
  uint64_t request_latency_p50_us = 0;
  uint64_t request_latency_p99_us = 0;
  uint64_t request_latency_max_us = 0;
};

// Called on a request worker for each page the destination asks for that has not been sent. It must get the
// page sent (by sections on the calling thread, usually inside it) or return an error, which fails the restore.
using PageRequestHandler = std::function<Status(PageId page)>;

class PushRestoreChannel {
 public:
  // Borrows `fd` (a connected migration channel; the caller closes it after the channel is destroyed) and
  // `state` (must outlive the channel).
  PushRestoreChannel(int fd, const SavedVmState& state, PushRestoreOptions options, PageRequestHandler handler);
  ~PushRestoreChannel();  // stops the threads (Abort() first if the stream did not finish)
  PushRestoreChannel(const PushRestoreChannel&) = delete;
  PushRestoreChannel& operator=(const PushRestoreChannel&) = delete;

  Status Begin();
  // Lazy only: sends the device state and RUN; requests are served from now on.
  Status StartGuest();
  // Ends the stream and waits for the destination's verdict (see the header comment).
  Status Finish();
  // Fails the channel with `why` (if it has not failed yet) and shuts the socket down.
  void Abort(const Status& why);
  // Stops and joins the return-path thread and the request workers (the destructor does too). Call it before
  // anything the request handler uses goes away; Abort() first unless the stream finished, or a worker blocked
  // on the destination delays it up to stall_timeout_ms.
  void StopThreads();

  Status BeginSection();
  Status AddPages(PageId first, uint64_t count, const uint8_t* data);  // count * 4096 bytes
  Status AddZeroPages(PageId first, uint64_t count);
  Status EndSection();
  // BeginSection + AddPages + EndSection.
  Status SendPages(PageId first, uint64_t count, const uint8_t* data);

  // Thread-safe, lock-free.
  bool IsSent(PageId page) const;
  uint64_t pages_sent() const { return pages_sent_.load(std::memory_order_relaxed); }
  uint64_t total_pages() const { return total_pages_; }
  bool guest_started() const { return guest_started_.load(std::memory_order_acquire); }
  // The first error (ok while healthy).
  Status status() const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Waits until the channel fails or timeout_ms passes; returns failed().
  bool WaitForFailure(int timeout_ms);
  // The order in which the destination asked for pages (each request's first page, every request).
  std::vector<PageId> RequestedPages() const;
  // Requests received so far (cheap: for polling).
  uint64_t requests() const { return request_count_.load(std::memory_order_relaxed); }
  // Without latency percentiles the call is cheaper (they walk the histogram's ~1,000 buckets).
  PushRestoreStats stats(bool latency_percentiles = true) const;

 private:
  struct Request {
    uint32_t block;
    uint64_t first, count;
    std::chrono::steady_clock::time_point received;
  };
  void Fail(const Status& s);
  Status Sticky() const;
  Status WriteFailed(const Status& s);
  void ReturnPathLoop();
  void WorkerLoop();
  uint64_t QueuedPages();
  void Throttle();
  Status OpenIfNeeded();
  Status MarkSent(PageId first, uint64_t count);
  Status WaitForShut();
  Status WaitForPeerClose();

  int fd_;
  const SavedVmState& state_;
  const PushRestoreOptions options_;
  PageRequestHandler handler_;
  const std::chrono::steady_clock::time_point created_;
  std::chrono::steady_clock::time_point t0_;
  uint64_t total_pages_ = 0;

  // The stream: one writer, one section at a time.
  mutable std::mutex stream_mu_;
  std::atomic<std::thread::id> owner_{};
  FdSink sink_;
  MigrationStreamWriter writer_;
  bool section_open_ = false;  // the section's header is written (the first page came)
  uint64_t section_pages_ = 0;
  // Who the open section is for: pages placed before the guest starts, an answer on a request worker, or a
  // background push (throttled behind what the destination has not read yet).
  enum class SectionKind { kPreload, kRequestAnswer, kBackgroundPush };
  SectionKind section_kind_ = SectionKind::kPreload;
  bool ended_ = false;                                          // RAM END written: no more sections
  std::vector<std::unique_ptr<std::atomic<uint64_t>[]>> sent_;  // per block, one bit a page
  std::atomic<uint64_t> pages_sent_{0};
  std::atomic<uint64_t> request_count_{0};

  // Sections written but not yet read by the destination, for the throttle.
  mutable std::mutex inflight_mu_;
  std::deque<std::pair<uint64_t, uint64_t>> inflight_;  // (stream bytes at the section's end, pages)
  uint64_t inflight_pages_ = 0;
  std::atomic<uint64_t> bytes_flushed_{0};

  // Shared with the return-path thread and the workers.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> requests_;
  std::vector<PageId> requested_;
  std::optional<uint32_t> shut_;
  std::optional<std::chrono::steady_clock::time_point> package_pong_;
  bool rp_ended_ = false;
  bool workers_go_ = false;
  Status error_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> guest_started_{false};
  LatencyHistogram request_latency_;  // request received -> answered (wait-free Record)
  PushRestoreStats stats_;  // under mu_, except the fields written under stream_mu_ (merged in stats())
  uint64_t request_pages_ = 0, preload_pages_ = 0, pushed_pages_ = 0, zero_pages_ = 0, sections_ = 0;  // stream_mu_
  uint64_t throttle_waits_ = 0;                                                                        // inflight_mu_

  std::thread rp_thread_;
  std::vector<std::thread> workers_;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_PUSH_SOURCE_H_
