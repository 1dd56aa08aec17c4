// Fault injection for tests: wrappers around a RandomAccessFile and an AppendSink that make chosen operations fail
// the way real storage does (EIO, short transfers, a failed sync, a torn write, a flipped bit), on a schedule.
//
// A FaultInjector holds the plan and counts what happened; the test keeps a shared_ptr to it while the wrapper is
// owned by the reader or writer under test. Typical use:
//
//   FaultPlan plan;
//   plan.fault = Fault::kEio;
//   plan.on_call = 3;                       // the third read fails
//   auto injector = std::make_shared<FaultInjector>(plan);
//   auto reader = CheckpointReader::Open(NewFaultInjectingFile(NewMemoryFile(...), injector));
//   ... injector->faults_injected() ...
//
// Thread-safety: FaultInjector and the file wrapper are thread-safe (the reader's loader and fault handlers read
// concurrently). The sink wrapper, like every AppendSink, is used by one thread.
#ifndef HALITE_FAULT_INJECTION_H_
#define HALITE_FAULT_INJECTION_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <random>

#include "halite/storage.h"

namespace halite {

enum class Fault {
  // The operation fails with EIO (kIoError); nothing is transferred. Read or Append.
  kEio,
  // Part of the data is transferred, then the operation fails (kIoError): a read fills a prefix of the buffer
  // and reports a short read; an append passes a prefix to the wrapped sink and reports a short write.
  kShortTransfer,
  // Commit fails with EIO, as when fsync reports a lost write; the wrapped sink is aborted, so (like any failed
  // Commit) nothing is left behind. Appends are not affected. Sinks only.
  kFailedSync,
  // The device acknowledges but keeps only a prefix: the triggering append passes a prefix to the wrapped sink
  // and returns ok, and every later append is dropped silently; Commit then commits the torn content. Models a
  // lying disk or a crash before writeback: a reader must reject the result. Sinks only.
  kTornWrite,
  // A read succeeds but one bit of the returned data is flipped (a bad cable, a bad disk cache). A reader must
  // report corruption, never return the bytes. Files only.
  kBitFlip,
};
const char* FaultName(Fault fault);

inline constexpr uint64_t kNoTrigger = std::numeric_limits<uint64_t>::max();

// When and how faults fire. An operation is one ReadAt (each request of a ReadBatch counts as one), one Append,
// or one Commit. A fault fires on an operation when any enabled trigger matches it; kFailedSync ignores the
// triggers and fires on every Commit.
struct FaultPlan {
  Fault fault = Fault::kEio;
  // Transient (false): only the triggering operation fails; errors are marked retryable and a retry can
  // succeed. Permanent (true): once a fault has fired, every later operation fails with EIO too (a dead
  // device); errors are not retryable.
  bool permanent = false;

  // Trigger: the operation that would take the running byte count (bytes read, or bytes appended) past this
  // many bytes. Short transfers and torn writes then pass exactly up to this byte.
  uint64_t after_bytes = kNoTrigger;
  // Trigger: the Kth operation (1-based); 0 disables.
  uint64_t on_call = 0;
  // Trigger: each operation independently with this probability, drawn from a generator seeded with `seed`
  // (the same seed and the same sequence of operations give the same faults).
  double probability = 0;
  uint64_t seed = 1;
  // Trigger (files only): a read that overlaps the byte range [offset_begin, offset_end); empty disables.
  uint64_t offset_begin = 0, offset_end = 0;

  // At most this many faults fire (kNoTrigger: unlimited); afterwards the wrapper passes everything through.
  uint64_t max_faults = kNoTrigger;
};

// The shared schedule and counters of one or more wrappers.
class FaultInjector {
 public:
  explicit FaultInjector(FaultPlan plan) : plan_(plan), rng_(plan.seed) {}

  const FaultPlan& plan() const { return plan_; }
  // While disabled, wrappers pass every operation through untouched and nothing is counted.
  void set_enabled(bool enabled);
  bool enabled() const;

  uint64_t operations() const;       // operations seen while enabled
  uint64_t faults_injected() const;  // faults fired (not counting the failures of a permanent fault's aftermath)
  bool failed_permanently() const;   // a permanent fault has fired

  // For the wrappers: decides the fate of one operation of `length` bytes at file offset `offset` (reads) or at
  // sink position `offset` (appends). `*keep` receives how many bytes pass before a short transfer or torn
  // write, or which byte a bit flip hits.
  enum class Operation { kRead, kAppend, kCommit };
  enum class Decision { kPass, kFault, kDeadDevice };
  Decision Decide(Operation op, uint64_t offset, uint64_t length, uint64_t* keep);

 private:
  mutable std::mutex mu_;
  FaultPlan plan_;
  std::mt19937_64 rng_;
  bool enabled_ = true;
  bool dead_ = false;
  bool after_bytes_fired_ = false;
  uint64_t operations_ = 0;
  uint64_t faults_ = 0;
  uint64_t bytes_ = 0;
};

// Wraps `base`; faults follow `injector`'s plan. Errors: kIoError naming the file, the offset and the injected
// fault (retryable when the plan is transient); everything else comes from `base`. kTornWrite and kFailedSync
// do not apply to files (pass through).
std::unique_ptr<RandomAccessFile> NewFaultInjectingFile(std::unique_ptr<RandomAccessFile> base,
                                                        std::shared_ptr<FaultInjector> injector);

// Wraps `base`; faults follow `injector`'s plan. Errors as above. kBitFlip does not apply to sinks (passes
// through). Abort and the destructor pass to `base`, so a wrapped atomic file sink still leaves nothing behind.
std::unique_ptr<AppendSink> NewFaultInjectingSink(std::unique_ptr<AppendSink> base,
                                                  std::shared_ptr<FaultInjector> injector);

}  // namespace halite

#endif  // HALITE_FAULT_INJECTION_H_
