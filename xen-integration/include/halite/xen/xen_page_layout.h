// Which pfns a save stream sends, in which PAGE_DATA batches, with which types, but not the page data.
//
// Import records the layout so export can rebuild the same batches (same bytes, when nothing changed); the
// data itself streams through a PageBatchSink into the checkpoint and back through a PageBatchSource. Entries are kept as
// runs of consecutive pfns of one type, so a saver's dense batches cost a few bytes each; memory grows with the
// number of runs, not with guest memory. Not thread-safe.
#ifndef HALITE_XEN_XEN_PAGE_LAYOUT_H_
#define HALITE_XEN_XEN_PAGE_LAYOUT_H_

#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "halite/xen/xen_format.h"
#include "halite/xen/xen_stream_visitor.h"

namespace halite::xen {

struct PageRun {
  uint64_t first_pfn = 0;
  uint32_t count = 0;
  PageType type = PageType::kNormal;
  bool operator==(const PageRun&) const = default;
};

class PageLayout {
 public:
  // Appends one batch (may be empty: batches emptied by DropSupersededEntries keep their index).
  void AddBatch(std::span<const PageEntry> entries);
  // Appends one batch given as runs (used when decoding a stored layout).
  void AddBatchRuns(std::span<const PageRun> runs);
  // Appends one entry to a layout being built in Xen's order; starts a new batch every 1024 entries.
  void AppendEntry(uint64_t pfn, PageType type);

  size_t batch_count() const { return batch_end_.size(); }
  std::span<const PageRun> batch(size_t i) const;
  uint64_t entry_count() const;

  // Keeps only the last occurrence of each pfn (live streams resend pages; the last copy wins). Batches that
  // lose all entries stay, empty, so record positions counted in batches still line up.
  void DropSupersededEntries();

  // Same batches of the same entries (how the layout was built does not matter).
  bool operator==(const PageLayout& o) const { return runs_ == o.runs_ && batch_end_ == o.batch_end_; }

 private:
  void AppendToLastBatch(uint64_t pfn, PageType type);
  std::vector<PageRun> runs_;
  std::vector<size_t> batch_end_;  // index into runs_ one past each batch's last run
  uint32_t open_batch_entries_ = 0;  // AppendEntry's fill level of the last batch
};

// A set of pfns: a bitmap per 512-pfn chunk, so dense guests cost about a bit per page.
class PfnSet {
 public:
  // Adds pfn; returns true if it was already present.
  bool Insert(uint64_t pfn);
  bool Contains(uint64_t pfn) const;

 private:
  std::unordered_map<uint64_t, std::array<uint64_t, 8>> chunks_;
};

}  // namespace halite::xen

#endif  // HALITE_XEN_XEN_PAGE_LAYOUT_H_
