#include "writer/coding_choice.h"

#include <algorithm>
#include <future>
#include <vector>

#include <fmt/format.h>

#include "halite/format_constants.h"

namespace halite::writer {
namespace {

// A dictionary is trained on up to 4096 pages (16 MiB) sampled over the memory, of up to 1 MiB (the format's limit,
// 5.7; at most 1/16 of the samples), and a quarter of it made from its best content (no second training: it cost as
// much as the first, 2026-11-28-save26). On the corpus of bench/core/README.md the larger one found 2 to 12 points
// more where content recurs across distant pages (it holds more of what recurs), the smaller one wins on smaller
// memories, where the dictionary's own size weighs more.
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
// A sample whose best coding without a dictionary keeps this share of its raw size gets none tried.
constexpr double kIncompressible = 0.98;

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

std::shared_ptr<const codec::Dictionary> MakeDictionary(std::vector<uint8_t> bytes, int level) {
  if (bytes.empty()) return nullptr;
  auto dict = codec::Dictionary::Create(std::move(bytes), level);
  return dict ? *dict : nullptr;  // training gave something zstd cannot use: none
}

Result<std::vector<uint8_t>> ReadSamples(const std::vector<uint64_t>& slots, const ReadSlotPage& read_slot) {
  std::vector<uint8_t> samples(slots.size() * format::kPageSize);
  for (size_t i = 0; i < slots.size(); ++i) {
    HLT_RETURN_IF_ERROR(read_slot(slots[i], samples.data() + i * format::kPageSize));
  }
  return samples;
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

// The frame sizes to try: the one given, or 16 and 32 pages and one frame a block when frames are automatic.
std::vector<uint32_t> FrameSizes(const CodingChoiceOptions& options, uint32_t largest) {
  if (options.frame_pages != WriterOptions::kFramePagesAuto) return {options.frame_pages};
  if (largest <= kFastFrames) return {kFastFrames};
  return {kFastFrames, kLargerFrames, 0};
}

// Compresses every trial block each way `ways` says (dictionary index into `dicts`) on `pool`; adds each way's
// sample bytes in *bytes (one entry per way). False when a trial compression failed.
bool RunTrials(std::span<const PlannedBlock> blocks, const std::vector<size_t>& trial_blocks,
               const std::vector<Candidate>& ways, const std::vector<std::shared_ptr<const codec::Dictionary>>& dicts,
               WorkerPool& pool, const TrialCompress& trial, std::vector<uint64_t>* bytes) {
  std::vector<std::future<std::vector<int64_t>>> results;
  for (size_t t : trial_blocks) {
    const PlannedBlock& b = blocks[t];
    results.push_back(pool.Submit([&trial, &b, &ways, &dicts] {
      std::vector<int64_t> sizes;
      for (const Candidate& k : ways) {
        sizes.push_back(trial(b, k.frames, k.dictionary >= 0 ? dicts[k.dictionary].get() : nullptr));
      }
      return sizes;
    }));
  }
  bytes->assign(ways.size(), 0);
  bool failed = false;
  for (auto& f : results) {
    const std::vector<int64_t> sizes = f.get();
    for (size_t i = 0; i < sizes.size(); ++i) {
      failed |= sizes[i] < 0;
      (*bytes)[i] += uint64_t(std::max<int64_t>(0, sizes[i]));
    }
  }
  return !failed;
}

// The trials, their sizes and the dictionaries they were made with, and the choice made from them.
struct Evidence {
  std::vector<Candidate> ways;
  std::vector<uint64_t> bytes;  // the sample's compressed size each way
  std::vector<std::shared_ptr<const codec::Dictionary>> dicts;
  bool skipped_dictionary = false;  // the sample does not compress: no dictionary trained
  bool capped = false;              // the frames first chosen were larger than one frame without a dictionary
};

// Runs the trials: without a dictionary first (unless one is required); then, when dictionaries are wanted and the
// sample compresses, trains one, makes the smaller one from it while the larger one's trials run, and tries both.
Status Gather(const CodingChoiceOptions& options, uint64_t slots, std::span<const PlannedBlock> blocks,
              const std::vector<size_t>& trial_blocks, uint64_t sample_raw, WorkerPool& pool,
              const ReadSlotPage& read_slot, const TrialCompress& trial, const std::vector<uint32_t>& frames,
              Evidence* e, bool* failed) {
  auto run = [&](const std::vector<Candidate>& ways) {
    if (ways.empty()) return;
    std::vector<uint64_t> bytes;
    *failed |= !RunTrials(blocks, trial_blocks, ways, e->dicts, pool, trial, &bytes);
    e->ways.insert(e->ways.end(), ways.begin(), ways.end());
    e->bytes.insert(e->bytes.end(), bytes.begin(), bytes.end());
  };
  std::vector<Candidate> plain;
  for (uint32_t f : frames) plain.push_back({f, -1});
  // A dictionary required but none could be made (training found nothing): measured without one, as before.
  auto plain_if_nothing_tried = [&] {
    if (e->ways.empty()) run(plain);
    return Status::Ok();
  };
  if (options.dictionary != DictionaryMode::kOn) {
    run(plain);
    if (*failed || options.dictionary == DictionaryMode::kOff) return Status::Ok();
    // A sample that keeps kIncompressible of its size even in one frame a block: a dictionary trained on more of
    // the same cannot save its own size and its training (random or encrypted memory).
    const uint64_t best = *std::min_element(e->bytes.begin(), e->bytes.end());
    if (double(best) >= kIncompressible * double(sample_raw)) {
      e->skipped_dictionary = true;
      return Status::Ok();
    }
  }
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> samples,
                       ReadSamples(TrainingSlots(slots, blocks, trial_blocks), read_slot));
  const size_t large = std::min(kDictionaryMaxBytes, samples.size() / 16);
  std::vector<uint8_t> trained = codec::TrainDictionary(samples, format::kPageSize, large);
  if (trained.empty()) return plain_if_nothing_tried();
  // The smaller one is made on a worker while the larger one's trials run on the others.
  std::future<std::vector<uint8_t>> smaller = pool.Submit(
      [&samples, &trained, large] { return codec::ShrinkDictionary(trained, samples, format::kPageSize, large / 4); });
  std::vector<Candidate> ways;
  if (auto d = MakeDictionary(trained, options.level)) {  // a copy: the worker reads `trained`
    e->dicts.push_back(std::move(d));
    for (uint32_t f : frames) ways.push_back({f, int(e->dicts.size()) - 1});
  }
  run(ways);
  ways.clear();
  if (auto d = MakeDictionary(smaller.get(), options.level)) {
    e->dicts.push_back(std::move(d));
    for (uint32_t f : frames) ways.push_back({f, int(e->dicts.size()) - 1});
  }
  run(ways);
  return plain_if_nothing_tried();
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
  const std::vector<uint32_t> frames = FrameSizes(options, largest);
  Evidence e;
  bool failed = false;
  HLT_RETURN_IF_ERROR(
      Gather(options, slots, blocks, trial_blocks, c.sample_raw_bytes, pool, read_slot, trial, frames, &e, &failed));
  if (failed) {  // cannot measure: the default frames, and a dictionary only when asked for one
    if (options.dictionary == DictionaryMode::kOn && !e.dicts.empty()) c.dictionary = e.dicts[0];
    c.reason = "a trial compression failed: no measured choice";
    return c;
  }
  const double scale = double(blocks.size()) / double(trial_blocks.size());
  for (size_t i = 0; i < e.ways.size(); ++i) {
    const uint32_t dict_bytes = e.ways[i].dictionary >= 0 ? uint32_t(e.dicts[e.ways[i].dictionary]->bytes().size()) : 0;
    c.trials.push_back({e.ways[i].frames, dict_bytes, e.bytes[i], uint64_t(double(e.bytes[i]) * scale) + dict_bytes});
  }
  // The file's estimated block bytes coded one way (-1 when that way was not tried).
  auto estimate = [&](uint32_t f, int d) {
    for (size_t i = 0; i < e.ways.size(); ++i) {
      if (e.ways[i].frames == f && e.ways[i].dictionary == d) return double(c.trials[i].estimate);
    }
    return -1.0;
  };
  // For each frame size, the dictionary choice that makes it smallest (a trained one only when that is
  // kDictionaryMinGain smaller than none, unless one is required); then the frames: 16 pages, or 32 when that saves
  // kLargerFramesMinGain, or one frame a block when that saves kOneFrameMinGain against the frames so chosen, each
  // compared at its own best dictionary choice.
  const int dicts = int(e.dicts.size());
  auto dictionary_for = [&](uint32_t f) {
    int best = options.dictionary == DictionaryMode::kOn && dicts > 0 ? 0 : -1;
    for (int d = best + 1; d < dicts; ++d) {
      if (estimate(f, d) < estimate(f, best)) best = d;
    }
    if (best >= 0 && options.dictionary == DictionaryMode::kAuto &&
        estimate(f, best) > (1 - kDictionaryMinGain) * estimate(f, -1)) {
      best = -1;  // not worth its own size and a trained dictionary's upkeep
    }
    return best;
  };
  auto size_with = [&](uint32_t f) { return estimate(f, dictionary_for(f)); };
  if (frames.size() > 1) {
    c.frame_pages = size_with(kLargerFrames) <= (1 - kLargerFramesMinGain) * size_with(kFastFrames) ? kLargerFrames
                                                                                                  : kFastFrames;
    if (size_with(0) <= (1 - kOneFrameMinGain) * size_with(c.frame_pages)) c.frame_pages = 0;
    // The size goal (at most zstd -3 of the whole image, issue 28) before the faults' speed: frames are kept only
    // when they cost no more than one frame a block without a dictionary, what zstd's own stream comes closest to
    // (bench/results/2026-11-28-ratio28). The fastest frames that do; one frame a block always does.
    const double cap = estimate(0, -1);
    if (cap >= 0 && size_with(c.frame_pages) > cap) {
      e.capped = true;
      for (uint32_t f : {kFastFrames, kLargerFrames, 0u}) {
        if (size_with(f) <= cap) {
          c.frame_pages = f;
          break;
        }
      }
    }
  }
  const int best = dictionary_for(c.frame_pages);
  if (best >= 0) c.dictionary = e.dicts[best];
  c.reason = Reason(c);
  if (e.skipped_dictionary) c.reason += "; the sample does not compress: no dictionary trained";
  if (e.capped) c.reason += "; the frames first chosen came larger than one frame without a dictionary";
  return c;
}

}  // namespace halite::writer
