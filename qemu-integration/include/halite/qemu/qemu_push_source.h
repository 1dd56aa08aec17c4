// Acting as the migration source when pages are pushed from several threads, in whatever order they become
// available (a restore engine installing locality blocks: halite/restore_engine.h), rather than pulled one at a
// time.
//
// Lazy (postcopy), the conversation is:
//   Begin()        header, configuration, OPEN_RETURN_PATH, PING, POSTCOPY_ADVISE, RAM START, one discard per
//                  block; the return-path thread starts;
//   sections       pages sent now are placed before the guest starts (a preload);
//   StartGuest()   PACKAGED (LISTEN, PING, device state, PING, RUN); request workers start calling the handler;
//                  the first PING's PONG (WaitUntilListening) says QEMU's userfaultfd covers guest RAM, from when
//                  pages of some blocks may be placed directly instead (PlaceBlocksDirectly);
//   sections       answers to requests (on the worker threads) and background pushes (any other thread);
//   Finish()       RAM END, EOF, then QEMU's SHUT. Pages never sent read as zero on the destination afterwards
//                  (POSTCOPY_ADVISE discarded all of its RAM, and ending postcopy unregisters userfaultfd), so
//                  a caller may leave zero pages unsent.
// Eager (precopy): Begin() (header, configuration, RAM START), sections, Finish() (RAM END, device state, EOF,
//   VMDESC, then wait for QEMU to close the channel). Every page should be sent, zero pages too: ROM blocks on
//   the destination start with its own contents.
//
// Pages go in RamSections (halite/qemu/qemu_ram_section.h): OpenSection() takes the stream for the calling
// thread until the section closes; other threads' sections wait. Its priority says who it is for: an urgent
// section answers a request (or is on its path); a background section opened once the guest runs first waits
// until the destination has read all but max_queued_push_pages of the pages already sent (SIOCOUTQ), so that an
// answer never queues behind more than that. Pages are never sent twice (a checked invariant).
//
// Inside, three parts share one failure (push/channel_health.h): the section writer (the stream and the sent
// bitmap), the return-path listener (a thread reading QEMU's messages), and the request workers (threads calling
// the request handler).
//
// Errors are sticky: the first failure (the destination closed the channel or reported failure, a handler
// error, a stalled write) is kept, the socket is shut down (a postcopy destination then pauses with its guest
// frozen instead of running on incomplete memory), and every later call returns it.
//
// Thread-safety: OpenSection/SendPages/IsSent/status/stats from any thread; Begin, StartGuest, Finish and Abort
// from one controlling thread.
#ifndef HALITE_QEMU_QEMU_PUSH_SOURCE_H_
#define HALITE_QEMU_QEMU_PUSH_SOURCE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "halite/page_sink.h"
#include "halite/qemu/qemu_ram_section.h"
#include "halite/qemu/qemu_saved_state.h"
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
  uint64_t resume_received_pages = 0;  // BeginResume: pages QEMU already held (its received bitmaps)
  uint64_t resume_handshake_us = 0;    // BeginResume: connected to RESUME_ACK
  // Request received -> its handler returned (the answer flushed); halite/latency_histogram.h (within ~6%,
  // max exact).
  uint64_t request_latency_p50_us = 0;
  uint64_t request_latency_p99_us = 0;
  uint64_t request_latency_max_us = 0;
  // Requests by the length they asked for, in bytes: QEMU asks for one host page at a time (4 KiB; 2 MiB for
  // hugetlbfs-backed RAM).
  std::map<uint64_t, uint64_t> request_sizes;
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
  // Postcopy recovery, instead of Begin() and StartGuest(): on a channel QEMU accepted with `migrate-recover`
  // while its restore was paused (the source died), asks for each RAMBlock's received bitmap (RECV_BITMAP),
  // takes those pages as sent (none goes twice), sends POSTCOPY_RESUME and waits for RESUME_ACK. From then on
  // the channel is a lazy restore whose guest runs: requests are served, sections answer them or push. Errors:
  // the channel's, kIoError when QEMU does not answer within timeout_ms, kAborted when it refuses to resume.
  Status BeginResume(int timeout_ms);
  // Lazy only: sends the device state and RUN; requests are served from now on.
  Status StartGuest();
  // Lazy, after StartGuest: waits until the destination has registered guest RAM with its userfaultfd (the PONG
  // of a PING placed right after LISTEN in the package). Errors: the channel's, or kIoError after timeout_ms.
  Status WaitUntilListening(int timeout_ms);
  // Pages of the blocks marked in `blocks` are placed in QEMU's memory by someone else (through QEMU's own
  // userfaultfd): from now on a section holding one fails with kInternal before writing it (a checked
  // invariant), and a request for a page `placed` says is in costs nothing. Call once, after
  // WaitUntilListening and before any page of those blocks is placed; `placed` must be thread-safe and outlive
  // the request workers.
  void PlaceBlocksDirectly(const std::vector<bool>& blocks, std::function<bool(PageId)> placed);
  // True for a block given to PlaceBlocksDirectly.
  bool IsRefused(uint32_t block) const;
  // Ends the stream and waits for the destination's verdict (see the header comment).
  Status Finish();
  // Fails the channel with `why` (if it has not failed yet) and shuts the socket down.
  void Abort(const Status& why);
  // Stops and joins the return-path thread and the request workers (the destructor does too). Call it before
  // anything the request handler uses goes away; Abort() first unless the stream finished, or a worker blocked
  // on the destination delays it up to stall_timeout_ms.
  void StopThreads();

  // Takes the stream for a section (see the header comment). kUrgent: answers a request or is on its path.
  Result<std::unique_ptr<RamSection>> OpenSection(InstallPriority priority = InstallPriority::kBackground);
  // OpenSection + AddPages + Close.
  Status SendPages(PageId first, uint64_t count, const uint8_t* data,
                   InstallPriority priority = InstallPriority::kBackground);

  // Thread-safe, lock-free.
  bool IsSent(PageId page) const;
  uint64_t pages_sent() const;
  uint64_t total_pages() const;
  bool guest_started() const;
  // The first error (ok while healthy).
  Status status() const;
  bool failed() const;
  // Waits until the channel fails or timeout_ms passes; returns failed().
  bool WaitForFailure(int timeout_ms);
  // The order in which the destination asked for pages (each request's first page, every request).
  std::vector<PageId> RequestedPages() const;
  // Requests received so far (cheap: for polling).
  uint64_t requests() const;
  // Without latency percentiles the call is cheaper (they walk the histogram's ~1,000 buckets).
  PushRestoreStats stats(bool latency_percentiles = true) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_PUSH_SOURCE_H_
