// A lazy restore into userfaultfd memory of this process, driven by a recorded access trace: what
// `hlt-restore replay` runs to judge a checkpoint's layout against an access pattern, here so that an embedder (or
// the C API) gets the same figures and the same report as the tool.
#ifndef HALITE_TRACE_REPLAY_H_
#define HALITE_TRACE_REPLAY_H_

#include <cstdint>
#include <span>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/export.h"
#include "halite/hint_files.h"
#include "halite/lazy_memory.h"
#include "halite/restore_engine.h"
#include "halite/status.h"

namespace halite {

struct HALITE_EXPORT TraceReplayOptions {
  unsigned threads = 1;      // touching threads, each taking the next trace entry in turn
  bool wait_loader = false;  // after the trace, wait until the loader has loaded every block
  RestoreEngineOptions engine;
  LazyMemoryOptions memory;     // its on_fault_error is replaced: a failed fault holds its thread
  std::string record_trace_path;  // non-empty: write the pages touched, in first-touch order, as an access trace
  std::string timeline_path;      // non-empty: record the engine's timeline and write it as CSV here
};

// What a replay measured. Times are seconds from the start of the restore (memory mapped, engine started).
struct HALITE_EXPORT TraceReplayResult {
  size_t accesses = 0;
  uint64_t touched = 0;     // distinct pages touched
  uint64_t nonzero = 0;     // ... whose checkpoint content is not all zero
  uint64_t mismatches = 0;  // touched pages whose content differs from the checkpoint
  std::string first_mismatch;
  RestoreEngineStats engine;
  ReaderStats reader;  // before the check re-read blocks
  LazyMemoryStats memory;
  double seconds = 0, start_seconds = 0, loader_done_seconds = 0, first_access_seconds = 0;
  double open_seconds = 0;  // the caller's: how long opening the checkpoint took (reported as is)
  uint64_t prefetched = 0;  // first touches of pages installed before the touch
  uint64_t missing_touches = 0;  // touches of pages not installed yet ...
  double touch_stall_seconds = 0;  // ... and the time the touching threads spent in them
};

// Where a replay failed, for callers that map errors to exit codes.
enum class TraceReplayStage {
  kMemory,  // mapping the userfaultfd memory (kUnsupported: no userfaultfd here)
  kEngine,  // creating or starting the engine, serving faults
  kTouch,   // a fault failed: its thread is held in the kernel; the memory and the engine are left alive (leaked)
            // for it, so the process must exit without joining it (std::_Exit)
  kAfter,   // waiting for the loader, checking the touched pages, writing the recorded trace or the timeline
};

// Restores `reader` lazily, touches the pages of `trace`, then checks every touched page against the checkpoint.
// On error, *stage (when given) says where; after kTouch, `reader` must stay alive until the process exits (with
// std::_Exit, after reporting). Not thread-safe on one reader with other restores (its read_stats).
HALITE_EXPORT Result<TraceReplayResult> ReplayTrace(const CheckpointReader& reader, std::span<const TraceAccess> trace,
                                                    TraceReplayOptions options, TraceReplayStage* stage = nullptr);

// The reports of `hlt-restore replay`: the JSON document (one line and a newline; other tools parse it, so its
// keys are stable) and the text summary.
HALITE_EXPORT std::string TraceReplayJson(const std::string& checkpoint, const std::string& trace,
                                          const TraceReplayOptions& options, const TraceReplayResult& result);
HALITE_EXPORT std::string TraceReplayText(const std::string& checkpoint, const TraceReplayOptions& options,
                                          const TraceReplayResult& result);

}  // namespace halite

#endif  // HALITE_TRACE_REPLAY_H_
