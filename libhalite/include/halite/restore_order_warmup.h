// Reading the head of a checkpoint's restore order while something else is slow (a VMM starting), so that the
// guest's first faults find their blocks near: a local file's in the page cache, a remote one's (s3://, rados://)
// in the host block cache (ReaderOptions::block_cache), verified as every payload put there is.
#ifndef HALITE_RESTORE_ORDER_WARMUP_H_
#define HALITE_RESTORE_ORDER_WARMUP_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "halite/checkpoint_reader.h"

namespace halite {

struct WarmupStats {
  uint32_t blocks = 0;         // blocks of the restore order read (and for a remote file, decoded into the cache)
  uint64_t stored_bytes = 0;   // their stored payload bytes
  uint32_t from_cache = 0;     // of them already in the block cache
  bool stopped_early = false;  // Stop() came before the budget was read
  Status status;               // the first read error (the warmup stops there; a restore reads the block itself)
};

// Whether warming `reader` brings anything: a local file (page cache) or a remote one with a block cache. A
// remote file without a cache would fetch every block twice.
bool WarmupUseful(const CheckpointReader& reader, bool has_block_cache);

// Reads the restore order's blocks from its start (the working set first) until `budget_bytes` of stored payload
// are read or Stop() is called, a batch of about `batch_bytes` at a time (FetchBlocks: joined requests on an object
// store), in a thread of its own. The reader must outlive the warmup; it is used concurrently with other reads
// (CheckpointReader's reads are thread-safe).
class RestoreOrderWarmup {
 public:
  RestoreOrderWarmup() = default;
  RestoreOrderWarmup(const RestoreOrderWarmup&) = delete;
  RestoreOrderWarmup& operator=(const RestoreOrderWarmup&) = delete;
  ~RestoreOrderWarmup() { Stop(); }

  // Starts the thread; `decode`: verify and decode each remote payload, which is what puts it in the block cache.
  void Start(const CheckpointReader& reader, uint64_t budget_bytes, bool decode, uint64_t batch_bytes = 4 << 20);
  // Asks the thread to stop after its current batch, without waiting (the caller goes on; at most that batch is
  // still read meanwhile).
  void RequestStop() { stop_ = true; }
  // RequestStop() and waits for the thread. Idempotent.
  WarmupStats Stop();
  // Waits until the thread has read its budget (or the whole order, or failed) by itself.
  WarmupStats Wait();

 private:
  void Run(const CheckpointReader* reader, uint64_t budget_bytes, bool decode, uint64_t batch_bytes);

  std::thread thread_;
  std::atomic<bool> stop_{false};
  WarmupStats stats_;
};

}  // namespace halite

#endif  // HALITE_RESTORE_ORDER_WARMUP_H_
