// RestoreEngine: lazy restore of a checkpoint into a PageSink, one locality block per fault.
//
// A VMM starts the guest at once and reports each fault on a missing page to HandleFault(). The engine installs
// the page's whole locality block: it reads, verifies and decompresses the block once, then installs every page
// of it that is not installed yet (duplicates included, so a deduplicated page arrives with the block that stores
// it). Zero and absent pages are installed as zero without any I/O. Several threads may fault at once: faults on
// different blocks are served concurrently, faults on the same block wait for the one read of it (a fault waits
// for its own page of it: with streamed faults the block goes in piece by piece, and the fault returns as soon
// as its piece is in).
//
// In the background a loader streams the remaining blocks in the checkpoint's restore order (working set first),
// rate-limited, and always yields to demand faults: before each block it waits until no demand read is in flight,
// and a fault never queues behind it (it only joins a read of its own block that is already running or arrived
// with a batch). From an object store it fetches batches of blocks (loader_batch_bytes), stepping aside for
// demand reads in flight for at most 2 ms: requests there run side by side, and a guest that faults without
// pause would otherwise starve the stream.
// Options add Twinkle's eager preload of the working set and Twinkle's demand prediction (segments of N pages;
// after P blocking faults in a segment, the rest of the segment is fetched in the background).
//
// Regions whose host pages are larger than 4 KiB (Region::host_page_size; hugetlbfs-backed guest memory): a
// destination may only place such a host page whole (QEMU's postcopy collects all of its 4 KiB pages and places
// them at once), so the engine installs it whole: a fault on any of its pages installs the entire host page in one
// Install call, as runs in page order that cover it exactly (stored pages with their bytes, zero and absent pages
// as zero runs, none left out), and never installs a page of it again. Stored pages of a host page that lie in
// other blocks than the one being loaded (a checkpoint whose writer split host pages) are read for it; libhalite's
// writer keeps each such host page in one block.
//
// Errors: a block whose payload fails verification is read once more (CheckpointReader::ReadBlock: a bit flipped
// in transit is not damage on storage; Stats().blocks_reread counts these). One that fails again is never
// installed; the fault that needed it returns the error (naming the region, page, block and file offset), and so
// does every later fault on that block. The caller decides what to do (stop the VM, retry, fill with zeros).
// Transient I/O errors are retried a bounded number of times first.
//
// Ownership and lifetime: the engine borrows the reader and the sink; both must outlive it. It owns its loader
// thread, which the destructor (or Stop()) stops and joins.
// Thread-safety: HandleFault, Stats, IsInstalled, Timeline and failures may be called from any thread at any
// time, concurrently. Start, Stop and WaitForLoader are for one controlling thread.
#ifndef HALITE_RESTORE_ENGINE_H_
#define HALITE_RESTORE_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "halite/export.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_types.h"
#include "halite/latency_histogram.h"
#include "halite/page_sink.h"
#include "halite/status.h"

namespace halite {

// RestoreEngineOptions::loader_batch_bytes: as the checkpoint's storage suggests.
inline constexpr uint64_t kLoaderBatchAuto = UINT64_MAX;

struct HALITE_EXPORT RestoreEngineOptions {
  // Stream the blocks not yet loaded, in restore order, on a background thread after Start().
  bool background_loader = true;
  // Loader off: once no fault has come for this long after Start(), stream the blocks not loaded yet in restore
  // order after all (the restore has to end some time; what the guest asked for until then is demand paging
  // alone). WaitForLoader() then waits for that sweep. 0: never (blocks the guest never touches stay unloaded).
  uint32_t idle_sweep_ms = 0;
  // Bytes of stored (compressed) block payload per second the loader may read; 0 = unlimited. Demand faults
  // are never throttled.
  uint64_t loader_rate_bytes_per_s = 0;
  // Stored bytes the loader (and the idle sweep, and demand prediction) asks storage for at once: the next blocks
  // of the restore order not loaded yet, fetched as one batch (CheckpointReader::FetchBlocks: an object store
  // sends them as a few joined requests, several in flight), then each checked, decoded and installed in turn - a
  // block a fault waits for first. Blocks are claimed only once their batch has arrived: a fault meanwhile reads
  // its own block as usual (never waiting for a batch in flight), and the batch's copy is dropped.
  // kLoaderBatchAuto: CheckpointReader::read_hints().batch_bytes (8 MiB for s3:// and rados://; 0 for a local
  // file, whose reads cost too little for batching to pay). 0: one block at a time. With a rate limit, a batch
  // holds at most the limiter's burst (a tenth of a second's worth, at least one block).
  uint64_t loader_batch_bytes = kLoaderBatchAuto;
  // Threads that stream the restore order: the background thread and loader_threads - 1 helpers beside it, each
  // reading, decoding and installing a block at a time, each stepping aside while a demand read is in flight. More
  // than one only where the loader reads one block at a time without a rate limit and without prediction (a local
  // file: loader_batch_bytes 0); otherwise the background thread alone. A restore whose guest needs most of its
  // memory soon is bounded by this CPU work (decode, then the sink's copy) when the storage is fast.
  unsigned loader_threads = 1;
  // Nice value added to the background thread (Linux, best effort): once a block is being decompressed, the
  // scheduler still prefers the threads serving faults and the guest's own.
  int loader_nice = 10;
  // Start() loads the working-set blocks (the first working_set_blocks() of the restore order) before it returns
  // (Twinkle's working-set preload: the guest then starts with them present).
  bool preload_working_set = false;
  // Start() loads every block before it returns: an eager restore, the baseline lazy restore is measured against.
  bool preload_all = false;
  // Threads used by a preload; 0 = one per CPU (at most 8). Where storage suggests batches (loader_batch_bytes:
  // an object store), the preload fetches the order in batches of that size, a few at once and ahead of these
  // threads, which decode and install the fetched blocks (as the loader's batches: a fault never waits for one).
  unsigned preload_threads = 0;
  // Twinkle's demand prediction: memory is cut into segments of `predict_segment_pages` pages of a region; once
  // `predict_threshold` faults that read a block (or joined one) fell in a segment, the rest of the segment is
  // fetched in the background ahead of the restore-order stream, the segment with most faults first.
  // 0 pages = off. Works with the loader off too (a background thread then serves predictions only).
  uint32_t predict_segment_pages = 0;
  uint32_t predict_threshold = 0;
  // A fault on a zero or absent page installs the zero and absent pages of the aligned window of this many pages
  // around it (a power of two, 1..512): free memory comes in long ranges, and one zero install of a run costs
  // less than a fault per page. 1 installs only the faulting page.
  uint32_t zero_window_pages = 16;
  // A demand fault decodes its block piece by piece (zstd blocks; format-spec 5.4) and installs the faulting page
  // alone as soon as it is decoded, waking the faulting thread, then the pages of each further piece as they
  // come, in their own Install calls (each page still in one run of one call). Off: the whole block is decoded,
  // then installed in one call. Blocks written without cuts (WriterOptions::zstd_block_pages = 0) come in two
  // 128 KiB pieces.
  bool stream_faults = true;
  // Start() first asks the sink about every page (PageSink::IsPresent) and takes those present as installed; a
  // block whose pages are all present is never read. For a restore that takes over one interrupted part way (a
  // QEMU postcopy resumed after its source died): the sink then knows what the destination already holds.
  bool skip_present_at_start = false;
  // Attempts per block read when the error is transient (Status::retryable()); the wait doubles each time.
  unsigned max_read_attempts = 4;
  std::chrono::microseconds retry_backoff{1000};
  // Record every fault and background block load in a timeline (see Timeline()). At most `timeline_capacity`
  // events are kept; later ones are counted as dropped.
  bool record_timeline = false;
  size_t timeline_capacity = 1 << 22;
};

// How a fault was served.
enum class FaultKind : uint8_t {
  kZero = 0,      // a zero or absent page: installed as zero, no I/O
  kPresent = 1,   // already installed (prefetched by the loader or a prediction, or by another fault's block)
  kBlocking = 2,  // waited for its block to be read: read it itself, or joined a read already in flight
};
HALITE_EXPORT const char* FaultKindName(FaultKind kind);

struct HALITE_EXPORT FaultOutcome {
  FaultKind kind = FaultKind::kZero;
  bool joined = false;      // kBlocking: another thread's read of the block served it
  uint32_t block = 0;       // the block holding the page (stored pages only)
  uint64_t latency_ns = 0;  // time spent in HandleFault
  // Time from HandleFault's start until the faulting page was installed: what the faulting thread waited (the
  // sink wakes it when its page goes in, which with streamed faults may be well before HandleFault returns).
  // latency_ns when the engine did not see that moment (zero and present faults, large host pages).
  uint64_t stall_ns = 0;
};

// Everything counted by the engine itself. A snapshot; counters only grow.
struct HALITE_EXPORT RestoreEngineStats {
  uint64_t faults_zero = 0;
  uint64_t faults_present = 0;
  uint64_t faults_blocking = 0;
  uint64_t faults_joined = 0;  // of faults_blocking: served by a read another thread started
  uint64_t faults_failed = 0;  // HandleFault returned an error

  uint64_t blocks_total = 0;
  uint64_t blocks_loaded = 0;          // blocks fully installed, by whoever
  uint64_t blocks_read = 0;            // successful block reads (each block once unless a sink install failed)
  uint64_t blocks_read_demand = 0;     // ... by a fault
  uint64_t blocks_read_loader = 0;     // ... by the restore-order stream
  uint64_t blocks_read_predicted = 0;  // ... by demand prediction
  uint64_t blocks_read_preload = 0;    // ... by Start()'s preload
  uint64_t blocks_read_sweep = 0;      // ... by the idle sweep (loader off, idle_sweep_ms)
  uint64_t blocks_failed = 0;          // blocks that failed verification (never installed)
  uint64_t read_retries = 0;           // transient I/O errors retried
  uint64_t blocks_reread = 0;          // payloads that failed verification, then verified when read again
  uint64_t loader_batches = 0;         // batches fetched by the background thread (loader_batch_bytes)
  uint64_t loader_fetched_unused = 0;  // blocks a batch fetched that a fault had loaded meanwhile (fetched twice)
  uint64_t preload_batches = 0;        // batches Start()'s preload fetched (storage suggesting batches; else 0)
  uint64_t bytes_read = 0;             // stored payload bytes read from the checkpoint
  uint64_t bytes_decompressed = 0;     // raw bytes produced by those reads

  uint64_t pages_installed = 0;        // pages installed with data
  uint64_t zero_pages_installed = 0;   // pages installed as zero pages (no data)
  uint64_t pages_skipped_present = 0;  // pages the sink reported present (never installed by the engine)
  uint64_t pages_present_at_start = 0;   // skip_present_at_start: pages the sink already held at Start()
  uint64_t blocks_present_at_start = 0;  // ... and the blocks never read because all their pages were
  uint64_t install_calls = 0;          // runs of adjacent pages given to the sink (a batch holds one or more)
  uint64_t host_pages_installed = 0;   // host pages larger than 4 KiB installed whole (their pages are counted
                                       // in pages_installed and zero_pages_installed too)
  uint64_t host_page_extra_reads = 0;  // blocks read only to complete such a host page whose stored pages lie in
                                       // several blocks (0 for checkpoints of libhalite's writer)

  uint64_t read_ns = 0;     // total time in block reads (read + verify + decompress), all threads
  uint64_t install_ns = 0;  // total time in sink calls, all threads

  LatencySummary fault_latency;     // every successful fault
  LatencySummary blocking_latency;  // kBlocking faults only
  // kBlocking faults that read their block: from the fault until its page was installed (the sink woke the
  // faulting thread). Without stream_faults that is when the whole block was in.
  LatencySummary wake_latency;

  // What the guest felt: the sum over faults of FaultOutcome::stall_ns (from the fault's arrival at the engine
  // until its page was installed; the kernel's delivery of the fault to a handler is not included), over every
  // fault, over kBlocking faults, and over the kBlocking faults that joined a read in flight (a streamed block's
  // later pages: they wait for their own page, not the block).
  uint64_t stall_ns = 0;
  uint64_t stall_blocking_ns = 0;
  uint64_t stall_joined_ns = 0;
  LatencySummary stall_latency;  // kBlocking faults: stall_ns each
  LatencySummary join_latency;   // kBlocking faults that joined: stall_ns each

  bool loader_done = false;  // the restore-order stream (or the idle sweep) reached its end
  bool idle_sweep_started = false;
  uint64_t timeline_dropped = 0;
};

// One entry of the timeline.
enum class EngineEventKind : uint8_t {
  kFaultZero = 0,
  kFaultPresent = 1,
  kFaultBlocking = 2,
  kFaultFailed = 3,
  kLoaderBlock = 4,     // the background stream loaded a block
  kPredictedBlock = 5,  // demand prediction loaded a block
  kPreloadBlock = 6,    // Start() loaded a block
};
HALITE_EXPORT const char* EngineEventKindName(EngineEventKind kind);

struct HALITE_EXPORT EngineEvent {
  uint64_t time_ns = 0;  // since the engine was created
  PageRef page;          // the faulting page; for block loads, the block's first member
  EngineEventKind kind = EngineEventKind::kFaultZero;
  uint32_t block = UINT32_MAX;  // UINT32_MAX when no block was involved
  uint64_t latency_ns = 0;      // fault service time, or block load time
};

// A block that failed verification (or kept failing to read), as reported to the faults that needed it.
struct HALITE_EXPORT BlockFailure {
  uint32_t block = 0;
  uint64_t offset = 0;  // file offset of its payload
  Status status;
};

class HALITE_EXPORT RestoreEngine {
 public:
  // Borrows `reader` and `sink` (both must outlive the engine). Nothing is read or installed yet.
  // Errors: kInvalidArgument for inconsistent options.
  static Result<std::unique_ptr<RestoreEngine>> Create(const CheckpointReader& reader, PageSink& sink,
                                                       RestoreEngineOptions options = {});
  ~RestoreEngine();  // stops and joins the background thread
  RestoreEngine(const RestoreEngine&) = delete;
  RestoreEngine& operator=(const RestoreEngine&) = delete;

  // Runs the preload the options ask for, then starts the background thread. Call once. Faults may be handled
  // before, during and after Start. Errors: the first preload failure (the loader is not started then).
  Status Start();

  // Serves a fault on `page`: when this returns ok, the page is installed in the sink. Thread-safe.
  // Errors: kInvalidArgument (no such region or page), kCorrupt (the page's block failed verification; the
  // message names region, page, block and offset), kIoError (reading failed after the retries), or what the sink
  // returned. Nothing of a block that failed is installed.
  Result<FaultOutcome> HandleFault(PageRef page);

  // True when the engine has installed `page` (or the sink reported it present). Thread-safe.
  bool IsInstalled(PageRef page) const;

  // Blocks until the background stream has gone through every block (or Stop was called). Returns ok, or the
  // first error the loader met on a block that is still not loaded when this returns (it skips failed blocks and
  // goes on; their faults report the error). A transient error on a block that a fault loaded later is not
  // reported. When Start failed in its preload the loader never runs: returns that failure at once.
  Status WaitForLoader();
  // Stops the background thread (a block load in progress completes first). Idempotent.
  void Stop();

  RestoreEngineStats Stats() const;
  // The statistics as they were when the idle sweep began: what demand paging alone did. Stats() when no
  // sweep began.
  RestoreEngineStats StatsBeforeIdleSweep() const;
  std::vector<EngineEvent> Timeline() const;
  // The timeline as CSV: header `time_us,region,page,kind,block,latency_us`, one event a line, in time order.
  std::string TimelineCsv() const;
  // Writes TimelineCsv() to `path`. Errors: kIoError naming the path.
  Status WriteTimelineCsv(const std::string& path) const;
  std::vector<BlockFailure> failures() const;

  class Impl;

 private:
  explicit RestoreEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite

#endif  // HALITE_RESTORE_ENGINE_H_
