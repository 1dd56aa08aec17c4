// How a checkpoint's blocks are coded (format-spec 5.4, 5.7, 10): how many pages each independent zstd frame holds
// and whether blocks are compressed with a dictionary, chosen from the data: a spread of sample blocks is compressed
// each way the options leave open, and the sizes decide. Frames cost compression (each starts without the ones
// before it) and buy fault latency (a fault decodes its frame, not the block); a dictionary trained on the memory
// brings back what frames lose, and the content that recurs across distant pages.
#ifndef HALITE_WRITER_CODING_CHOICE_H_
#define HALITE_WRITER_CODING_CHOICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/zstd_codec.h"
#include "common/worker_pool.h"
#include "halite/checkpoint_writer.h"
#include "writer/layout_planner.h"

namespace halite::writer {

struct CodingChoiceOptions {
  DictionaryMode dictionary = DictionaryMode::kAuto;
  uint32_t frame_pages = WriterOptions::kFramePagesAuto;  // or fixed (0: one frame a block)
  int level = 3;
};

struct CodingChoice {
  std::shared_ptr<const codec::Dictionary> dictionary;  // null: none
  uint32_t frame_pages = 16;                            // 0: one frame a block
  std::string reason;                                   // why, in a sentence (WriteSummary::coding_reason)
  uint64_t sample_blocks = 0, sample_raw_bytes = 0;
  std::vector<CodingRecord::Trial> trials;                      // the sample's size each way tried
};

// Reads the page filling `slot` into out[4096].
using ReadSlotPage = std::function<Status(uint64_t slot, uint8_t* out)>;
// The compressed size of `block` in frames of `frame_pages` pages (0: one frame), with `dict` (may be null); -1 when
// compression failed.
using TrialCompress =
    std::function<int64_t(const PlannedBlock& block, uint32_t frame_pages, const codec::Dictionary* dict)>;

// The coding of `blocks` (the blocks coded on their own; `slots` stored slots in all). Trial compressions run on
// `pool`. Automatic choices: the sample (up to 32 blocks spread over the plan) is compressed without a dictionary in
// each frame size (16, 32, one frame a block when frames are automatic); unless its best keeps 98% of its size (no
// dictionary can pay for itself then), one dictionary is trained (up to 1 MiB) and a quarter of it made from it
// (codec::ShrinkDictionary), and the sample compressed with each. For each frame size, the dictionary that makes the
// sample smallest, its own size included, when that is 1% smaller than without; then, each at that choice, frames
// of 16 pages, or of 32 when that makes the sample 3% smaller (a fault then decodes up to 32 pages instead of 16:
// bench/core/README.md), or one frame a block when that is 2% smaller than the frames so chosen. Last, the size goal
// before the faults' speed: frames whose estimate exceeds one frame a block without a dictionary give way to the
// fastest frames that do not (one frame a block at worst). Files of fewer than 8 blocks or 64 slots get no
// dictionary and 16-page frames. Errors: a sample page that cannot be read.
Result<CodingChoice> ChooseCoding(const CodingChoiceOptions& options, uint64_t slots,
                                  std::span<const PlannedBlock> blocks, WorkerPool& pool, const ReadSlotPage& read_slot,
                                  const TrialCompress& trial);

}  // namespace halite::writer

#endif  // HALITE_WRITER_CODING_CHOICE_H_
