// RestoreOrderWarmup (halite/restore_order_warmup.h).
#include "halite/restore_order_warmup.h"

#include <vector>

namespace halite {

bool WarmupUseful(const CheckpointReader& reader, bool has_block_cache) {
  return !reader.sealed() && (!reader.read_hints().remote || has_block_cache);
}

void RestoreOrderWarmup::Start(const CheckpointReader& reader, uint64_t budget_bytes, bool decode,
                               uint64_t batch_bytes) {
  Stop();
  stop_ = false;
  stats_ = WarmupStats{};
  if (budget_bytes == 0) return;
  thread_ = std::thread([this, r = &reader, budget_bytes, decode, batch_bytes] {
    Run(r, budget_bytes, decode, batch_bytes);
  });
}

WarmupStats RestoreOrderWarmup::Wait() {
  if (thread_.joinable()) thread_.join();
  return stats_;
}

WarmupStats RestoreOrderWarmup::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  return stats_;
}

void RestoreOrderWarmup::Run(const CheckpointReader* reader, uint64_t budget_bytes, bool decode,
                             uint64_t batch_bytes) {
  const std::vector<uint32_t>& order = reader->restore_order();
  const auto& blocks = reader->blocks();
  std::vector<uint8_t> raw;
  size_t next = 0;
  while (next < order.size() && stats_.stored_bytes < budget_bytes) {
    if (stop_.load()) {
      stats_.stopped_early = true;
      return;
    }
    // The next batch: whole blocks up to batch_bytes (at least one), never past the budget by more than a block.
    std::vector<uint32_t> batch;
    uint64_t batch_stored = 0;
    while (next < order.size() && (batch.empty() || batch_stored + blocks[order[next]].stored_length <= batch_bytes) &&
           stats_.stored_bytes + batch_stored < budget_bytes) {
      batch_stored += blocks[order[next]].stored_length;
      batch.push_back(order[next++]);
    }
    std::vector<FetchedBlock> fetched;
    if (Status s = reader->FetchBlocks(batch, &fetched); !s.ok()) {
      stats_.status = s;
      return;
    }
    for (FetchedBlock& f : fetched) {
      stats_.stored_bytes += f.payload.size();
      if (f.from_cache) ++stats_.from_cache;
      // A payload from storage enters the block cache only once DecodeBlock verified it.
      if (decode && !f.from_cache) {
        raw.resize(blocks[f.block].raw_length());
        if (Status s = reader->DecodeBlock(f, raw, nullptr); !s.ok()) {
          stats_.status = s;
          return;
        }
      }
      ++stats_.blocks;
    }
  }
}

}  // namespace halite
