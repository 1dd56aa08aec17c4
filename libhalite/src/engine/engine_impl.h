// RestoreEngine::Impl: the state shared by the fault path (restore_engine.cc), the background thread and
// preload (background_loader.cc) and the statistics (engine_stats.cc).
//
// Per block, one atomic state: not loaded -> loading (exactly one thread, which won the compare-and-swap, reads
// and installs it) -> loaded, or -> failed (verification failed; sticky). A transient read failure goes back to
// not loaded so a later fault can try again. Threads that need a block another thread is loading wait on a
// striped condition variable until its state leaves "loading".
//
// Per page, two atomic bits: claimed (one thread took the job of installing it) and installed. Every page is
// claimed at most once unless its install failed (then the claim is released), which is how the engine keeps its
// promise to the sink that no page is installed twice.
//
// Regions whose host pages are larger than 4 KiB (hugetlbfs-backed memory; host_pages.cc) are installed a whole
// host page at a time: per such host page, one atomic state (free -> claimed -> installed, or back to free when
// nothing of it went in, or broken when part of it did) takes the place of the pages' claimed bits; their
// installed bits are set together once the host page is in.
#ifndef HALITE_ENGINE_ENGINE_IMPL_H_
#define HALITE_ENGINE_ENGINE_IMPL_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/rate_limiter.h"
#include "engine/event_timeline.h"
#include "halite/latency_histogram.h"
#include "engine/page_bitmap.h"
#include "halite/restore_engine.h"

namespace halite {

class HALITE_HIDDEN RestoreEngine::Impl {
 public:
  Impl(const CheckpointReader& reader, PageSink& sink, RestoreEngineOptions options);
  ~Impl();

  // restore_engine.cc
  Result<FaultOutcome> HandleFault(PageRef page);
  bool IsInstalled(PageRef page) const;

  // background_loader.cc
  Status Start();
  Status WaitForLoader();
  void Stop();

  // engine_stats.cc
  RestoreEngineStats Stats() const;
  RestoreEngineStats StatsBeforeIdleSweep() const;
  std::vector<EngineEvent> Timeline() const { return timeline_.Events(); }
  std::vector<BlockFailure> failures() const;
  const CheckpointReader& reader() const { return reader_; }

 private:
  enum BlockState : uint32_t { kNotLoaded = 0, kLoading = 1, kLoaded = 2, kFailed = 3 };
  enum class Cause { kDemand, kLoader, kPredicted, kPreload, kSweep };

  struct Counters {
    std::atomic<uint64_t> faults_zero{0}, faults_present{0}, faults_blocking{0}, faults_joined{0}, faults_failed{0};
    // What the faulting threads felt: per fault, from HandleFault's start until its page was in (stats header).
    std::atomic<uint64_t> stall_ns{0}, stall_blocking_ns{0}, stall_joined_ns{0};
    std::atomic<uint64_t> blocks_loaded{0}, blocks_read{0}, blocks_failed{0}, read_retries{0}, blocks_reread{0};
    std::array<std::atomic<uint64_t>, 5> blocks_read_by{};  // indexed by Cause
    std::atomic<uint64_t> bytes_read{0}, bytes_decompressed{0};
    std::atomic<uint64_t> pages_installed{0}, zero_pages_installed{0}, pages_skipped_present{0}, install_calls{0};
    std::atomic<uint64_t> pages_present_at_start{0}, blocks_present_at_start{0};
    std::atomic<uint64_t> host_pages_installed{0}, host_page_extra_reads{0};
    std::atomic<uint64_t> read_ns{0}, install_ns{0};
    std::atomic<uint64_t> loader_batches{0}, loader_fetched_unused{0}, preload_batches{0};
  };

  static constexpr uint64_t kNoPage = UINT64_MAX;

  // --- restore_engine.cc ---
  // Makes block `b` loaded. With `wait` false, returns at once (ok) when another thread is loading it.
  // *read: this call read the block; *waited: it waited for another thread's read. A demand fault passes its
  // global page and the NowNs() it began at (the faulting page goes in first when faults are streamed), and
  // `page_in_ns`, set to the NowNs() at which that page was installed. A demand fault that finds the block being
  // loaded by another thread waits only until its own page is in (a streamed block goes in piece by piece), not
  // for the whole block: the block may still be loading when this returns ok then.
  Status EnsureBlock(uint32_t b, Cause cause, bool wait, bool* read, bool* waited, uint64_t fault_page = kNoPage,
                     uint64_t fault_ns = 0, uint64_t* page_in_ns = nullptr);
  // Called by the thread that moved `b` to kLoading: reads, installs, and leaves the state loaded, failed or
  // not loaded.
  Status LoadBlock(uint32_t b, Cause cause, uint64_t fault_page, uint64_t fault_ns, uint64_t* page_in_ns);
  // With `progress`, the block is decoded piece by piece (CheckpointReader::BlockProgress); a read that has
  // reported progress is never retried (its pages may be in). A block of independent frames is decoded from the
  // frame holding byte `first` (CheckpointReader::ReadBlock). `first_attempt` > 1 when earlier attempts were made
  // elsewhere (a batch's fetch), so that a block is read at most max_read_attempts times in all.
  Status ReadWithRetries(uint32_t b, std::span<uint8_t> out, const CheckpointReader::BlockProgress* progress = nullptr,
                         size_t first = 0, unsigned first_attempt = 1);
  // The end of a block load once its bytes are decoded into `raw`: counts the read, installs the block's pages
  // and leaves the block loaded (or not loaded, when the sink failed).
  Status InstallLoaded(uint32_t b, Cause cause, std::span<const uint8_t> raw, uint64_t fault_page, uint64_t fault_ns,
                       uint64_t* page_in_ns = nullptr);
  // The bookkeeping of a block read that failed: records it, leaves the block not loaded (transient) or failed,
  // and returns the error naming the block.
  Status BlockReadFailed(uint32_t b, const Status& s);
  void CountBlockRead(uint32_t b, Cause cause);
  // options_.skip_present_at_start: takes the pages the sink holds already as installed, and every block made
  // only of such pages as loaded (never read).
  void SkipPresentPages();

  // --- host_pages.cc ---
  // One host page of a region whose host pages are larger than 4 KiB: global pages [first, first + count).
  struct HostPage {
    uint64_t first = 0;
    uint64_t count = 0;
    uint64_t index = 0;  // into host_page_state_
  };
  enum HostPageState : uint8_t { kHpFree = 0, kHpClaimed = 1, kHpInstalled = 2, kHpBroken = 3 };
  // Sets up the per-host-page state (the constructor calls it).
  void InitHostPages();
  bool InLargeHostPage(uint64_t g) const;
  // Precondition: InLargeHostPage(g).
  HostPage HostPageOf(uint64_t g) const;
  bool BlockHasLargeHostPages(uint32_t b) const;
  // free -> claimed; true when this call won it.
  bool ClaimHostPage(const HostPage& hp);
  void SetHostPageState(const HostPage& hp, HostPageState s);
  void WaitWhileHostPageClaimed(const HostPage& hp);
  // Installs the host pages `hps` (claimed by this thread, in page order), each whole in one Install call: runs in
  // page order covering it exactly, stored pages with their bytes and zero or absent pages as zero runs. Bytes of
  // block `have` come from `have_raw`; other blocks holding some of their pages are read here. Each host page
  // ends installed, free again (nothing of it went in) or broken (part of it did: its faults fail).
  Status InstallHostPages(std::span<const HostPage> hps, uint32_t have, std::span<const uint8_t> have_raw,
                          InstallPriority priority);
  // Its phases. Marks the host pages of `hps` the sink holds already as installed; the others go to *todo.
  void DropPresentHostPages(std::span<const HostPage> hps, std::vector<HostPage>* todo);
  // A block read whole for the host pages that have some of their stored pages in it.
  struct DecodedBlock {
    uint32_t block;
    std::vector<uint8_t> raw;
  };
  // Reads each block other than `have` that holds a stored page of `todo`, once, into *extra.
  Status ReadOtherHostPageBlocks(std::span<const HostPage> todo, uint32_t have, std::vector<DecodedBlock>* extra);
  // The runs covering each host page of `todo` in page order (bytes_of(page): its decoded bytes, null for zero);
  // (*runs_end)[h]: one past the last run of todo[h]. The runs' bytes stay valid until the thread's next call.
  void CutHostPageRuns(std::span<const HostPage> todo, const std::function<const uint8_t*(uint64_t)>& bytes_of,
                       std::vector<PageInstall>* runs, std::vector<size_t>* runs_end);
  // After the Install call that took the first `done` runs (`s` its outcome): each host page installed, free
  // again or broken.
  void SettleHostPages(std::span<const HostPage> todo, std::span<const PageInstall> runs,
                       std::span<const size_t> runs_end, size_t done, const Status& s);
  // A block's pages when some are in large host pages: the faulting host page first on its own, then the 4 KiB
  // pages, then the other host pages the block touches.
  Status InstallBlockPages(uint32_t b, std::span<const uint8_t> raw, InstallPriority priority, uint64_t fault_page);
  // HandleFault for a page of a large host page.
  Status HandleLargeFault(uint64_t g, uint64_t t, FaultOutcome* out);
  Status HostPageError(const HostPage& hp) const;
  // options_.skip_present_at_start for the large host pages: one present page makes the whole host page present.
  void SkipPresentHostPages();

  // --- streamed_fault.cc ---
  // LoadBlock for a demand fault with options_.stream_faults: decodes the block piece by piece, installs the
  // faulting page alone as soon as it is decoded (which wakes the faulting thread), then each decoded piece's
  // pages.
  Status StreamBlock(uint32_t b, uint64_t fault_page, uint64_t fault_ns, uint64_t* page_in_ns);
  // Wakes the faults waiting for pages of `b` (WaitForPageOrBlock) after some of its pages went in.
  void NotifyPagesIn(uint32_t b);
  struct Todo {
    uint64_t g;     // global page
    uint32_t slot;  // its slot in the block
  };
  Status InstallMembers(uint32_t b, std::span<const uint8_t> raw, InstallPriority priority);
  // Installs `todo` (sorted by page) as runs of adjacent pages; on failure releases the claims not installed.
  Status InstallRuns(std::span<const Todo> todo, std::span<const uint8_t> raw, std::vector<uint8_t>& staging,
                     InstallPriority priority);
  // Installs the zero/absent pages of the aligned window around global page g. Returns kZero when this call
  // installed g, kPresent when another thread had.
  Result<FaultKind> InstallZeroWindow(uint64_t g);
  void SetBlockState(uint32_t b, BlockState s);
  void WaitWhileLoading(uint32_t b);
  // As WaitWhileLoading, but gives up once Stop() was called (a fault whose read never returns must not hold a
  // stopping engine). False when it gave up.
  bool WaitWhileLoadingUnlessStopped(uint32_t b);
  // Waits until global page g is installed or block b is no longer loading, whichever comes first.
  void WaitForPageOrBlock(uint32_t b, uint64_t g);
  // Counts what a fault's thread felt (Counters::stall_ns and the histograms).
  void CountStall(const FaultOutcome& out, uint64_t stall_ns);
  Status BlockError(uint32_t b) const;
  void RecordFailure(uint32_t b, const Status& s);
  void NotePredictionFault(PageRef page);  // background_loader.cc
  uint64_t NowNs() const;
  PageRef RefOf(uint64_t g) const;
  uint64_t RegionEnd(uint64_t g) const;  // global number one past the last page of g's region

  // --- background_loader.cc ---
  void BackgroundThread();
  // With loader helpers: the restore order is shared through order_cursor_ (see RestoreEngineOptions).
  bool UsesLoaderHelpers() const;
  void LoaderHelperThread();
  void LowerThreadPriority() const;
  Status Preload(const std::vector<uint32_t>& blocks);
  void FetchSegment(uint64_t segment);
  // Waits until no demand read is in flight (or max_step_aside has passed) and the rate limiter allows `bytes`;
  // false when stopping.
  bool WaitForTurn(uint64_t bytes, std::chrono::nanoseconds max_step_aside = std::chrono::nanoseconds::max());
  // Waits until no demand read is in flight or `max_step_aside` has passed; false when stopping.
  bool StepAsideForDemand(std::chrono::nanoseconds max_step_aside);
  void LoadInBackground(uint32_t b, Cause cause);
  // Records a block the background thread could not load (WaitForLoader reports it unless a fault loads it).
  void NoteLoaderError(uint32_t b, const Status& s);

  // --- loader_batch.cc ---
  // Appends to `batch` the blocks of `order` from *cursor on that are not loaded, advancing *cursor, while the
  // batch stays within batch_bytes_ of stored payload (one block at least) and kMaxBatchBlocks blocks.
  void FillBatch(const std::vector<uint32_t>& order, size_t* cursor, std::vector<uint32_t>* batch) const;
  // A batch whose payloads a helper thread fetches while the loader decodes the batch before it.
  struct PendingBatch {
    std::vector<uint32_t> blocks;
    std::future<std::vector<FetchedBlock>> fetched;
    uint64_t start_ns = 0;
  };
  // Loads `blocks` as one batch: waits for its turn, fetches every payload at once (or takes them from `ahead`,
  // fetched already), claims the blocks no fault took meanwhile, calls `next` (which may start the following
  // batch's fetch), then checks, decodes and installs the claimed blocks one by one, a block a fault is waiting
  // for first.
  void LoadBatchInBackground(std::vector<uint32_t> blocks, Cause cause, std::optional<PendingBatch> ahead = {},
                             const std::function<void()>& next = {});
  // Starts fetching `blocks` on a helper thread.
  PendingBatch FetchAhead(std::vector<uint32_t> blocks);
  // A batch may be fetched ahead: the loader is not rate-limited (a limited one spends its bytes batch by batch).
  bool MayFetchAhead() const;
  // One claimed block of a batch: decode (or read again alone when the batch's fetch failed transiently), install.
  // Returns the error naming the block (it is left not loaded or failed, as after a read of its own).
  Status FinishBatchBlock(uint32_t b, FetchedBlock& fetched, Cause cause, uint64_t batch_start_ns);

  // --- preload_batches.cc ---
  // Preload (Start) when storage suggests batches: the order fetched in batches, several at once, decoded and
  // installed by `threads` threads meanwhile.
  struct PreloadPipeline;
  Status PreloadInBatches(const std::vector<uint32_t>& blocks, unsigned threads);
  void PreloadFetcher(PreloadPipeline& p);
  void PreloadDecoder(PreloadPipeline& p);

  const CheckpointReader& reader_;
  PageSink& sink_;
  const RestoreEngineOptions options_;
  const std::chrono::steady_clock::time_point t0_;
  std::vector<uint64_t> region_first_;  // global number of each region's first page, plus the total at the end
  std::vector<uint64_t> region_unit_;   // pages per host page of each region (1: 4 KiB host pages)
  std::vector<uint64_t> region_host_page_base_;  // index of each region's first large host page
  bool any_large_ = false;
  std::unique_ptr<std::atomic<uint8_t>[]> host_page_state_;
  std::map<uint64_t, Status> broken_host_pages_;  // under failures_mu_

  std::unique_ptr<std::atomic<uint32_t>[]> block_state_;
  // Loader batches (loader_batch.cc): stored bytes per batch, 0 for one block at a time; and per block, whether a
  // fault (or preload) is waiting while it loads, so that the loader decodes it before the rest of its batch.
  uint64_t batch_bytes_ = 0;
  engine::AtomicBitmap awaited_;
  static constexpr size_t kStripes = 64;
  struct Stripe {
    std::mutex mu;
    std::condition_variable cv;
  };
  std::array<Stripe, kStripes> stripes_;
  engine::AtomicBitmap claimed_;
  engine::AtomicBitmap installed_;

  Counters c_;
  LatencyHistogram fault_hist_;
  LatencyHistogram blocking_hist_;
  LatencyHistogram wake_hist_;  // demand faults that read their block: until their page was installed
  LatencyHistogram stall_hist_;  // kBlocking faults: until their page was installed
  LatencyHistogram join_hist_;   // kBlocking faults that joined a read in flight: until their page was installed
  engine::EventTimeline timeline_;

  mutable std::mutex failures_mu_;
  std::map<uint32_t, BlockFailure> failures_;
  std::atomic<bool> transient_failures_{false};  // failures_ may hold entries a later read clears

  // Background thread and prediction state, under loader_mu_ unless atomic.
  std::atomic<int> demand_reads_{0};  // demand block reads in flight: the loader waits for 0
  std::atomic<uint64_t> last_fault_ns_{0};  // NowNs() of the latest fault (or Start): the idle sweep's clock
  bool sweeping_ = false;                   // the idle sweep began (under loader_mu_)
  std::optional<RestoreEngineStats> before_sweep_;  // under loader_mu_
  mutable std::mutex loader_mu_;
  std::condition_variable loader_cv_;  // wakes the background thread (demand done, prediction queued, stop)
  std::condition_variable done_cv_;    // wakes WaitForLoader
  bool started_ = false;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};  // stop_, readable without loader_mu_ (under a stripe's lock)
  bool loader_done_ = false;
  bool thread_exited_ = false;
  Status loader_error_;  // a failed preload: the loader never ran
  // Every block the background thread failed to load, with the error, in the order met. WaitForLoader reports
  // the first whose block is still not loaded: a transient error is history once a fault has loaded the block.
  std::vector<std::pair<uint32_t, Status>> loader_block_errors_;
  std::thread thread_;
  // Loader helpers (RestoreEngineOptions::loader_threads): they and the background thread take the blocks of the
  // restore order from order_cursor_; the background thread says the stream is done once none is running.
  std::atomic<size_t> order_cursor_{0};
  std::vector<std::thread> helpers_;
  unsigned helpers_running_ = 0;  // under loader_mu_
  RateLimiter limiter_;
  std::vector<uint64_t> segment_base_;  // first segment number of each region, plus the total at the end
  std::unique_ptr<std::atomic<uint32_t>[]> segment_faults_;
  std::vector<uint64_t> pending_segments_;
};

}  // namespace halite

#endif  // HALITE_ENGINE_ENGINE_IMPL_H_
