#include "writer/coding_choice.h"

#include <algorithm>
#include <future>
#include <vector>

#include <fmt/format.h>

#include "halite/format_constants.h"

namespace halite::writer {
namespace {

// Dictionaries are trained on up to 4096 pages (16 MiB) sampled over the memory, in two sizes: up to 1 MiB (the
// format's limit, 5.7) and a quarter of that, at most 1/16 and 1/64 of the samples. On the corpus of
// bench/core/README.md the larger one found 2 to 12 points more where content recurs across distant pages (it
// holds more of what recurs), the smaller one wins on smaller memories, where the dictionary's own size weighs more.
constexpr size_t kDictionaryMaxBytes = 1 << 20;
constexpr size_t kDictionarySamplePages = 4096;
constexpr size_t kTrialBlocks = 32;
// Frames of 16 pages let a fault decode at most 16 pages before its own is out; 32 doubles that (still within the
// 150 us a warm 64-page block fault may cost: bench/core/README.md) and is taken when it saves this much.
constexpr uint32_t kFastFrames = 16, kLargerFrames = 32;
constexpr double kLargerFramesMinGain = 0.03;
// One frame a block: a fault then waits for the block's zstd blocks up to its page (up to 64 pages instead of 16 or
// 32), and the whole block costs the same to decode. Taken when the frames chosen would cost this much more: on
// memory whose content is spread over many pages of a block, independent frames lose most (bench/core/README.md).
constexpr double kOneFrameMinGain = 0.02;
constexpr double kDictionaryMinGain = 0.01;

struct Candidate {
  uint32_t frames = 0;
  int dictionary = -1;  // index into the trained dictionaries, -1 for none
};

// Up to kTrialBlocks blocks spread over the plan.
std::vector<size_t> TrialBlocks(std::span<const PlannedBlock> blocks) {
  std::vector<size_t> out;
  const size_t n = std::min(kTrialBlocks, blocks.size());
  for (size_t i = 0; i < n; ++i) out.push_back(i * blocks.size() / n);
  return out;
}

// The slots to train dictionaries on: spread over the slots outside the trial blocks, so that the trials measure a
// dictionary on pages it was not trained on (over all of them when the rest is small).
std::vector<uint64_t> TrainingSlots(uint64_t slots, std::span<const PlannedBlock> blocks,
                                    const std::vector<size_t>& trial) {
  std::vector<bool> in_trial(slots);
  for (size_t t : trial) std::fill_n(in_trial.begin() + long(blocks[t].first_slot), blocks[t].pages, true);
  std::vector<uint64_t> free_slots;
  free_slots.reserve(slots);
  for (uint64_t s = 0; s < slots; ++s) {
    if (!in_trial[s]) free_slots.push_back(s);
  }
  if (free_slots.size() < kDictionarySamplePages / 4) {  // a small memory: train on all of it
    free_slots.resize(slots);
    for (uint64_t s = 0; s < slots; ++s) free_slots[s] = s;
  }
  const size_t n = std::min<size_t>(kDictionarySamplePages, free_slots.size());
  std::vector<uint64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = free_slots[i * free_slots.size() / n];
  return out;
}

// The dictionaries to try: the larger size, then the smaller (either may be missing when training found nothing).
Result<std::vector<std::shared_ptr<const codec::Dictionary>>> Train(const std::vector<uint64_t>& slots, int level,
                                                                    const ReadSlotPage& read_slot, WorkerPool& pool) {
  std::vector<uint8_t> samples(slots.size() * format::kPageSize);
  for (size_t i = 0; i < slots.size(); ++i) HLT_RETURN_IF_ERROR(read_slot(slots[i], samples.data() + i * format::kPageSize));
  const size_t large = std::min(kDictionaryMaxBytes, samples.size() / 16);
  std::vector<std::future<std::shared_ptr<const codec::Dictionary>>> trained;
  for (size_t size : {large, large / 4}) {
    trained.push_back(pool.Submit([&samples, size, level]() -> std::shared_ptr<const codec::Dictionary> {
      auto bytes = codec::TrainDictionary(samples, format::kPageSize, size);
      if (bytes.empty()) return nullptr;
      auto dict = codec::Dictionary::Create(std::move(bytes), level);
      return dict ? *dict : nullptr;  // training gave something zstd cannot use: none
    }));
  }
  std::vector<std::shared_ptr<const codec::Dictionary>> out;
  for (auto& f : trained) {
    if (auto d = f.get()) out.push_back(std::move(d));
  }
  return out;
}

std::string Mb(double bytes) { return fmt::format("{:.2f} MB", bytes / 1e6); }

// The sentence WriteSummary::coding_reason holds: the file's estimated block bytes each way tried (a dictionary's
// own size included), against frames of 16 pages without a dictionary.
std::string Reason(const CodingChoice& c) {
  double base = 0;
  for (const CodingRecord::Trial& t : c.trials) {
    if (t.frame_pages == kFastFrames && t.dictionary_bytes == 0) base = double(t.estimate);
  }
  std::string s = fmt::format("estimated from {} sample blocks ({:.1f} MiB):", c.sample_blocks,
                              double(c.sample_raw_bytes) / 1048576.0);
  for (size_t i = 0; i < c.trials.size(); ++i) {
    const CodingRecord::Trial& t = c.trials[i];
    s += fmt::format("{} {}{} {}", i ? "," : "",
                     t.frame_pages ? fmt::format("frames of {}", t.frame_pages) : std::string("one frame"),
                     t.dictionary_bytes ? fmt::format(" with a {} KiB dictionary", t.dictionary_bytes / 1024) : "",
                     Mb(double(t.estimate)));
    if (base > 0 && double(t.estimate) != base) s += fmt::format(" ({:+.1f}%)", 100.0 * (double(t.estimate) / base - 1));
  }
  return s;
}

// The ways to try: frame sizes left open (one frame a block among them when frames are automatic), each without a
// dictionary (unless one is required) and with each trained one.
std::vector<Candidate> Candidates(const CodingChoiceOptions& options, uint32_t largest, size_t dictionaries) {
  const bool auto_frames = options.frame_pages == WriterOptions::kFramePagesAuto;
  std::vector<uint32_t> frames;
  if (!auto_frames) frames = {options.frame_pages};
  else if (largest <= kFastFrames) frames = {kFastFrames};
  else frames = {kFastFrames, kLargerFrames};
  if (auto_frames && largest > kFastFrames) frames.push_back(0);
  std::vector<Candidate> out;
  for (int d = (options.dictionary == DictionaryMode::kOn && dictionaries > 0) ? 0 : -1; d < int(dictionaries); ++d) {
    for (uint32_t f : frames) out.push_back({f, d});
  }
  return out;
}

}  // namespace

Result<CodingChoice> ChooseCoding(const CodingChoiceOptions& options, uint64_t slots,
                                  std::span<const PlannedBlock> blocks, WorkerPool& pool, const ReadSlotPage& read_slot,
                                  const TrialCompress& trial) {
  CodingChoice c;
  const bool auto_frames = options.frame_pages == WriterOptions::kFramePagesAuto;
  c.frame_pages = auto_frames ? kFastFrames : options.frame_pages;
  uint32_t largest = 0;
  for (const PlannedBlock& b : blocks) largest = std::max(largest, b.pages);
  if (slots < 64 || blocks.size() < 8) {
    c.reason = "too few blocks to sample: no dictionary";
    return c;
  }
  const std::vector<size_t> trial_blocks = TrialBlocks(blocks);
  c.sample_blocks = trial_blocks.size();
  for (size_t t : trial_blocks) c.sample_raw_bytes += uint64_t(blocks[t].pages) * format::kPageSize;
  std::vector<std::shared_ptr<const codec::Dictionary>> dicts;
  if (options.dictionary != DictionaryMode::kOff) {
    HLT_ASSIGN_OR_RETURN(dicts, Train(TrainingSlots(slots, blocks, trial_blocks), options.level, read_slot, pool));
  }
  const std::vector<Candidate> tried = Candidates(options, largest, dicts.size());
  std::vector<std::future<std::vector<int64_t>>> results;
  for (size_t t : trial_blocks) {
    const PlannedBlock& b = blocks[t];
    results.push_back(pool.Submit([&trial, &b, &tried, &dicts] {
      std::vector<int64_t> sizes;
      for (const Candidate& k : tried) sizes.push_back(trial(b, k.frames, k.dictionary >= 0 ? dicts[k.dictionary].get() : nullptr));
      return sizes;
    }));
  }
  std::vector<uint64_t> bytes(tried.size());
  bool failed = false;
  for (auto& f : results) {
    const std::vector<int64_t> sizes = f.get();
    for (size_t i = 0; i < sizes.size(); ++i) {
      failed |= sizes[i] < 0;
      bytes[i] += uint64_t(std::max<int64_t>(0, sizes[i]));
    }
  }
  if (failed) {  // cannot measure: the default frames, and a dictionary only when asked for one
    if (options.dictionary == DictionaryMode::kOn && !dicts.empty()) c.dictionary = dicts[0];
    c.reason = "a trial compression failed: no measured choice";
    return c;
  }
  const double scale = double(blocks.size()) / double(trial_blocks.size());
  for (size_t i = 0; i < tried.size(); ++i) {
    const uint32_t dict_bytes = tried[i].dictionary >= 0 ? uint32_t(dicts[tried[i].dictionary]->bytes().size()) : 0;
    c.trials.push_back({tried[i].frames, dict_bytes, bytes[i], uint64_t(double(bytes[i]) * scale) + dict_bytes});
  }
  // The file's estimated block bytes coded one way (-1 when that way was not tried).
  auto estimate = [&](uint32_t frames, int d) {
    for (size_t i = 0; i < tried.size(); ++i) {
      if (tried[i].frames == frames && tried[i].dictionary == d) return double(c.trials[i].estimate);
    }
    return -1.0;
  };
  // For each frame size, the dictionary choice that makes it smallest (a trained one only when that is
  // kDictionaryMinGain smaller than none, unless one is required); then the frames: 16 pages, or 32 when that saves
  // kLargerFramesMinGain, or one frame a block when that saves kOneFrameMinGain against the frames so chosen, each
  // compared at its own best dictionary choice.
  auto dictionary_for = [&](uint32_t frames) {
    int best = options.dictionary == DictionaryMode::kOn && !dicts.empty() ? 0 : -1;
    for (int d = best + 1; d < int(dicts.size()); ++d) {
      if (estimate(frames, d) < estimate(frames, best)) best = d;
    }
    if (best >= 0 && options.dictionary == DictionaryMode::kAuto &&
        estimate(frames, best) > (1 - kDictionaryMinGain) * estimate(frames, -1)) {
      best = -1;  // not worth its own size and a trained dictionary's upkeep
    }
    return best;
  };
  auto size_with = [&](uint32_t frames) { return estimate(frames, dictionary_for(frames)); };
  if (auto_frames && largest > kFastFrames) {
    c.frame_pages = size_with(kLargerFrames) <= (1 - kLargerFramesMinGain) * size_with(kFastFrames) ? kLargerFrames
                                                                                                  : kFastFrames;
    if (size_with(0) <= (1 - kOneFrameMinGain) * size_with(c.frame_pages)) c.frame_pages = 0;
  }
  const int best = dictionary_for(c.frame_pages);
  if (best >= 0) c.dictionary = dicts[best];
  c.reason = Reason(c);
  return c;
}

}  // namespace halite::writer
