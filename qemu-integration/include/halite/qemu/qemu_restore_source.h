// Acting as the migration source for a stock QEMU destination: the precopy (eager) and postcopy (lazy) restore
// drivers. They write the stream with MigrationStreamWriter over a connected channel and, for postcopy, answer
// the page requests that come back on it.
//
// The pages come from a RestorePageSource: the checkpoint reader and lazy restore engine behind the glue
// (hlt-restore), a temporary file in tests. The driver decides nothing about layout or order beyond what the
// protocol forces: the source says which run of pages answers a fault and which runs to push next.
#ifndef HALITE_QEMU_QEMU_RESTORE_SOURCE_H_
#define HALITE_QEMU_QEMU_RESTORE_SOURCE_H_

#include <cstdint>
#include <vector>

#include "halite/qemu/qemu_saved_state.h"
#include "halite/status.h"

namespace halite::qemu {

// `count` consecutive pages of one block starting at `first`.
struct PageRun {
  PageId first;
  uint32_t count = 0;
};

// Supplies page contents and policy. All calls come from the thread running the driver.
class RestorePageSource {
 public:
  virtual ~RestorePageSource() = default;
  // Reads one page: fills out[0, 4096) and sets *zero = false, or sets *zero = true (out then unused).
  // Called at most once per page. A non-ok Status aborts the restore (a corrupt block is never sent).
  virtual Status ReadPage(PageId page, uint8_t* out, bool* zero) = 0;
  // Postcopy: the run that answers a fault on `page` (the locality block around it). It must contain `page`
  // (the driver adds it otherwise); pages already sent are skipped. Default: the aligned group of
  // `default_run` pages around the page, clipped to the block.
  virtual PageRun RunForFault(PageId page, uint32_t default_run, uint64_t block_pages);
  // Postcopy: the next run to push while the guest runs, in the order the engine prefers. Return false when
  // out of hints; the driver then pushes what is left in address order.
  virtual bool NextPushRun(PageRun* run) { return false; }
  // Each page the destination asked for, in arrival order (including requests for pages already on the way).
  virtual void OnPageRequested(PageId page) {}
};

struct PostcopyRestoreOptions {
  uint32_t request_run_pages = 64;  // default fault answer size (RunForFault's default_run)
  uint32_t push_section_pages = 256;  // pages per pushed RAM section; requests wait at most one section
  bool push_in_background = true;  // false: serve requests only until the destination stops asking, then push
  uint64_t push_rate_limit_bytes_per_sec = 0;  // 0: unlimited
  // Pushed pages the destination has not read yet, at most (measured with SIOCOUTQ on the socket). An answer to a
  // request queues behind them, and a ZERO record is ~10 bytes but costs the destination an ioctl, so a byte limit
  // alone would let thousands of pages sit ahead of a fault. 0: no limit.
  uint32_t max_queued_push_pages = 512;
  std::vector<PageRun> preload;  // sent before the guest starts (working-set preload); placed, never requested
  uint64_t pagesize_summary = 0;  // POSTCOPY_ADVISE; 0: OR of the blocks' known page sizes, at least 4096
  int shut_timeout_ms = 30000;    // wait for the destination's SHUT after EOF
  int stall_timeout_ms = 30000;   // a destination that stops reading for this long is an error
  int idle_request_wait_ms = 200; // with push_in_background off: how long no request means "done faulting"
};

struct PostcopyRestoreStats {
  uint64_t connect_to_package_us = 0;  // start of the driver to PACKAGED written and flushed
  uint64_t connect_to_running_us = 0;  // start of the driver to the PONG of the PING inside the package
                                       // (devices loaded; RUN is the next command)
  uint64_t total_us = 0;               // start to SHUT
  uint64_t requests = 0;               // REQ_PAGES(_ID) messages
  uint64_t requests_already_sent = 0;  // requests for pages already sent (ignored)
  uint64_t request_pages = 0;          // pages sent in answer to requests
  uint64_t preload_pages = 0;
  uint64_t pushed_pages = 0;
  uint64_t zero_pages = 0;             // of all sent, as ZERO records
  uint64_t bytes_sent = 0;
  uint64_t request_latency_p50_us = 0; // request received -> answering section flushed
  uint64_t request_latency_p99_us = 0;
  uint64_t request_latency_max_us = 0;
  uint64_t pages_sent_before_first_request = 0;
};

// Runs the postcopy source on a connected channel `fd` (borrowed; the caller closes it): writes the postcopy
// prologue and device state, serves requests, pushes the rest, ends the stream and waits for SHUT(0).
// Errors: io-error when the destination goes away ("destination closed the connection after N of M pages"),
// aborted when it reports failure (SHUT 1), or whatever the page source returned.
Status RunPostcopyRestore(int fd, const SavedVmState& state, RestorePageSource& pages,
                          const PostcopyRestoreOptions& options, PostcopyRestoreStats* stats);

struct PrecopyRestoreOptions {
  uint32_t section_pages = 1024;
  int stall_timeout_ms = 30000;
  int close_timeout_ms = 60000;  // after the last byte: wait for the destination to close the channel
};
struct PrecopyRestoreStats {
  uint64_t pages = 0;
  uint64_t zero_pages = 0;
  uint64_t bytes_sent = 0;
  uint64_t write_us = 0;  // start to last byte written
  uint64_t total_us = 0;  // start to the destination closing the channel (its load finished or failed)
};

// Sends everything as a precopy stream (RAM in address order, then the device state, EOF, VMDESC) and waits for
// the destination to close the channel. Success here means the bytes were consumed; whether QEMU accepted them
// is its migration status (see RestoreIntoQemu).
Status RunPrecopyRestore(int fd, const SavedVmState& state, RestorePageSource& pages,
                         const PrecopyRestoreOptions& options, PrecopyRestoreStats* stats);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_RESTORE_SOURCE_H_
