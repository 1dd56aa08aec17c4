// PageSink: the thing a restore puts page contents into.
//
// The restore engine (restore_engine.h) decides which pages to install and when; a sink only knows how to put
// bytes into guest memory. Implementations: the userfaultfd sink behind LazyMemory (lazy_memory.h), which copies
// pages into a mapping of this process; a VMM's postcopy sender, which writes pages to a socket and must never
// send one twice; a pager that fills a Xen domain; a test sink that records what it was given.
//
// The engine's promises to every sink (they are what makes a "send once" sink possible):
//  - every page is installed at most once over the sink's whole life, by exactly one of InstallPages or
//    InstallZeroPages, and never after IsPresent() answered true for it;
//  - a run never crosses the end of its region, and `data` holds exactly count * 4096 bytes;
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

class HALITE_EXPORT PageSink {
 public:
  virtual ~PageSink() = default;

  // Installs `count` consecutive pages of region first.region, starting at page first.page, with the content in
  // `data` (count * 4096 bytes, page after page). A page the sink finds already populated by someone else (the
  // VMM wrote it, an earlier precopy phase sent it) is left as it is; that is not an error.
  // Thread-safe. Errors: kIoError (the socket or mapping failed; retryable() when trying again can help),
  // kAborted (the sink was shut down), kInvalidArgument (the range is not the sink's).
  virtual Status InstallPages(PageRef first, uint64_t count, std::span<const uint8_t> data) = 0;

  // Installs `count` consecutive all-zero pages (no data travels: Twinkle's free-page avoidance). Same rules and
  // errors as InstallPages.
  virtual Status InstallZeroPages(PageRef first, uint64_t count) = 0;

  // True when `page` already holds content the engine must not overwrite: it was populated before the restore
  // began (precopy), or its owner discarded it (a balloon, munmap). The engine asks once per page, just before it
  // would install it, and then counts it as installed. Must be cheap (called for every page) and thread-safe.
  virtual bool IsPresent(PageRef page) const = 0;

  // Bracket the installs of one block (or one fault's zero pages), on the calling thread: one block goes in "in
  // one go". A sink may defer work to EndBatch: the userfaultfd sink wakes the faulting threads once, when every
  // page of the block is in, so a thread does not resume and fault again on the block's next page while the block
  // is still being installed. Batches do not nest. EndBatch is called even when an install failed; its error is
  // reported like an install's. Defaults: nothing.
  virtual void BeginBatch() {}
  virtual Status EndBatch() { return Status::Ok(); }
};

}  // namespace halite

#endif  // HALITE_PAGE_SINK_H_
