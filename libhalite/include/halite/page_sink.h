// PageSink: the thing a restore puts page contents into.
//
// The restore engine (restore_engine.h) decides which pages to install and when; a sink only knows how to put
// bytes into guest memory. Implementations: the userfaultfd sink behind LazyMemory (lazy_memory.h), which copies
// pages into a mapping of this process; a VMM's postcopy sender, which writes pages to a socket and must never
// send one twice; a pager that fills a Xen domain; a test sink that records what it was given.
//
// The engine's promises to every sink (they are what makes a "send once" sink possible):
//  - every page is installed at most once over the sink's whole life, in one run of one Install() call, and
//    never after IsPresent() answered true for it;
//  - a run never crosses the end of its region, and its `data` is empty (zero pages) or exactly count * 4096 bytes;
//  - in a region whose host pages are larger than 4 KiB (Region::host_page_size), a host page goes in whole, in one
//    Install() call: consecutive runs of that call, in page order, cover it exactly (zero and absent pages as
//    zero runs: none is left out), so that a sink can place it at once (QEMU's postcopy, a hugetlbfs
//    UFFDIO_COPY). If a call fails part way through a host page's runs, the engine never offers that host page
//    again (its faults fail);
//  - calls come from several threads at once (demand faults, the background loader), never for the same page;
//  - buffers are borrowed for the duration of the call only.
// A call that fails leaves the engine free to offer the same pages again later (after its retry policy), so a
// sink that fails must not have installed part of a run silently: either it installed a page or it did not,
// and it answers IsPresent() truthfully about pages it did install.
#ifndef HALITE_PAGE_SINK_H_
#define HALITE_PAGE_SINK_H_

#include <cstdint>
#include <span>

#include "halite/export.h"
#include "halite/checkpoint_types.h"
#include "halite/status.h"

namespace halite {

// One run of a batch: `count` consecutive pages of region first.region from page first.page, with the content in
// `data` (count * 4096 bytes, page after page), or all-zero pages when `data` is empty (no data travels:
// Twinkle's free-page avoidance).
struct PageInstall {
  PageRef first;
  uint64_t count = 0;
  std::span<const uint8_t> data;
  bool zero() const { return data.empty(); }
};

// How soon a batch matters. A sink that queues (a network sender with a throttle) lets an urgent batch pass.
enum class InstallPriority {
  kUrgent,      // on a fault's path: the faulting block, its zero pages, the blocks predicted on its thread
  kBackground,  // the background loader, the idle sweep, a preload
};

class HALITE_EXPORT PageSink {
 public:
  virtual ~PageSink() = default;

  // Installs one batch (the pages of one block, or one fault's zero pages) "in one go", run after run, on the
  // calling thread. A sink may defer work to the end of the call: the userfaultfd sink wakes the faulting threads
  // once, when every page of the batch is in, so a thread does not resume and fault again on the block's next page
  // while the block is still going in; the QEMU sink sends the batch as one RAM section. A demand fault's block
  // may come in several batches (RestoreEngineOptions::stream_faults): first the faulting page alone (urgent, so
  // the faulting thread can go on), then the block's other pages a decoded piece at a time; the promises above
  // are per page and hold across them. A page the sink finds
  // already populated by someone else (the VMM wrote it, an earlier precopy phase sent it) is left as it is; that
  // is not an error.
  // Stops at the first run that fails and returns its error; *runs_installed is the number of runs before it,
  // all installed completely. Thread-safe. Errors: kIoError (the socket or mapping failed; retryable() when
  // trying again can help), kAborted (the sink was shut down), kInvalidArgument (a run is not the sink's, or its
  // data is neither empty nor count pages).
  virtual Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) = 0;

  // True when `page` already holds content the engine must not overwrite: it was populated before the restore
  // began (precopy), or its owner discarded it (a balloon, munmap). The engine asks once per page, just before it
  // would install it, and then counts it as installed. Must be cheap (called for every page) and thread-safe.
  virtual bool IsPresent(PageRef page) const = 0;
};

}  // namespace halite

#endif  // HALITE_PAGE_SINK_H_
