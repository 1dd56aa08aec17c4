// Whether a checkpoint gets a zstd dictionary (format-spec 5.7, 10): trained on pages sampled across the
// checkpoint, kept when it pays for itself (auto) or whenever training succeeds (on).
#ifndef HALITE_WRITER_DICTIONARY_CHOICE_H_
#define HALITE_WRITER_DICTIONARY_CHOICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include "codec/zstd_codec.h"
#include "common/worker_pool.h"
#include "halite/checkpoint_writer.h"
#include "writer/layout_planner.h"

namespace halite::writer {

struct DictionaryChoiceOptions {
  DictionaryMode mode = DictionaryMode::kAuto;
  int level = 3;
  uint32_t block_pages = 64;
};

// Reads the page filling `slot` into out[4096].
using ReadSlotPage = std::function<Status(uint64_t slot, uint8_t* out)>;
// Compressed sizes of `block` without and with `dict` ({0, 0} when either compression failed).
using TrialCompress = std::function<std::pair<int64_t, int64_t>(const PlannedBlock& block, const codec::Dictionary* dict)>;

// The dictionary to compress blocks with, or null for none. `slots` is the number of stored slots. Trial
// compressions run on `pool`. Errors: a sample page that cannot be read.
Result<std::shared_ptr<const codec::Dictionary>> ChooseDictionary(const DictionaryChoiceOptions& options,
                                                                  uint64_t slots, std::span<const PlannedBlock> blocks,
                                                                  WorkerPool& pool, const ReadSlotPage& read_slot,
                                                                  const TrialCompress& trial);

}  // namespace halite::writer

#endif  // HALITE_WRITER_DICTIONARY_CHOICE_H_
