// One measured lazy restore: open a checkpoint, map userfaultfd memory, start the engine, touch the pages of a
// trace (one thread, as one vCPU would), and collect what the engine counted. Also: saving the checkpoints the
// benchmark compares.
#ifndef HALITE_BENCH_ENGINE_REPLAY_RUN_H_
#define HALITE_BENCH_ENGINE_REPLAY_RUN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/hint_files.h"
#include "halite/restore_engine.h"

namespace halite::bench {

struct SaveSpec {
  uint32_t block_pages = 64;
  int level = 3;
  LayoutPolicy policy = LayoutPolicy::kHalite;
  bool hints = true;  // give the save-time access trace and VA hints
  uint32_t zstd_block_pages = WriterOptions{}.zstd_block_pages;  // 0: uncut frames (files before the cut)
  uint32_t frame_pages = WriterOptions{}.frame_pages;  // independent frames of this many pages (0: one frame)
  uint32_t host_page_size = 4096;  // region "ram"'s (2 MiB: hugetlbfs-backed memory; bench_hugepage)
  bool keep_host_pages_whole = true;  // WriterOptions::keep_host_pages_whole
};

// Incremental saves (format-spec 12; bench/chain): a child of `parent` when set.
struct ChainSpec {
  std::shared_ptr<const CheckpointReader> parent;
  bool page_hashes = false;               // WriterOptions::page_hashes
  double parent_rewrite_fraction = 0.25;  // WriterOptions::parent_rewrite_fraction
};

struct SavedCheckpoint {
  std::string path;
  uint64_t file_bytes = 0;
  uint64_t blocks = 0;
  double save_seconds = 0;
};

// Saves `image` (one region "ram") to `path`. Hint texts are in hint-file syntax. Exits the process on error
// (a benchmark has nothing sensible to do then).
SavedCheckpoint SaveCheckpoint(const std::string& image, uint64_t bytes, const std::string& path, const SaveSpec& spec,
                               const std::string& access_trace, const std::string& va_hints,
                               const ChainSpec& chain = {});

struct ReplayResult {
  double first_access_us = 0;          // restore start (open) to the first access done: includes any preload
  double total_s = 0;                  // restore start to the last access done
  RestoreEngineStats stats;            // as the engine counted them, when the last access was done
  // What the touching thread felt: the time it spent in touches of pages the engine had not installed yet
  // (userfaultfd round trips included), and how many such touches there were.
  double touch_stall_ms = 0;
  uint64_t missing_touches = 0;
  uint64_t mismatches = 0;             // touched pages that differ from `expected`
  std::vector<PageRef> first_touches;  // pages in first-touch order (a recorded trace)
  // With eo.record_timeline: how long the touching thread waited, for each access whose fault read its block
  // (fault to wake as the guest sees it, userfaultfd round trip included).
  std::vector<double> blocking_touch_us;
  std::vector<uint32_t> blocking_slots;  // the slot in its block of each of those pages
};

// `expected` is the original memory of region 0 (for the byte check). With `cold`, the page cache is dropped
// first (needs root; the result says nothing about coldness otherwise).
ReplayResult RunReplay(const std::string& ckpt, const std::vector<TraceAccess>& trace, const RestoreEngineOptions& eo,
                       bool cold, const std::vector<uint8_t>& expected);

// echo 3 > /proc/sys/vm/drop_caches; false when that is not allowed.
bool DropCaches();

}  // namespace halite::bench

#endif  // HALITE_BENCH_ENGINE_REPLAY_RUN_H_
