// The fault path: one fault installs its page's whole locality block, read once however many threads need it.
#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "engine/engine_impl.h"
#include "halite/bytes.h"

namespace halite {
namespace {

constexpr uint64_t kPage = 4096;

// The loader may run ahead of its rate by one tenth of a second or one block, whichever is more: no more, since
// a burst right after the guest starts competes with exactly the faults that matter most.
uint64_t LoaderBurst(const CheckpointReader& reader, uint64_t rate) {
  uint64_t largest = 1;
  for (const auto& b : reader.blocks()) largest = std::max<uint64_t>(largest, b.stored_length);
  return std::max(rate / 10, largest);
}

}  // namespace

RestoreEngine::Impl::Impl(const CheckpointReader& reader, PageSink& sink, RestoreEngineOptions options)
    : reader_(reader),
      sink_(sink),
      options_(std::move(options)),
      t0_(std::chrono::steady_clock::now()),
      block_state_(new std::atomic<uint32_t>[reader.blocks().size()]),
      awaited_(reader.blocks().size()),
      claimed_(reader.total_pages()),
      installed_(reader.total_pages()),
      timeline_(options_.record_timeline, options_.timeline_capacity),
      limiter_(options_.loader_rate_bytes_per_s, LoaderBurst(reader, options_.loader_rate_bytes_per_s)) {
  for (const auto& r : reader.regions()) region_first_.push_back(r.first_page);
  region_first_.push_back(reader.total_pages());
  InitHostPages();
  for (size_t b = 0; b < reader.blocks().size(); ++b) block_state_[b].store(kNotLoaded, std::memory_order_relaxed);
  batch_bytes_ = options_.loader_batch_bytes == kLoaderBatchAuto ? reader.read_hints().batch_bytes
                                                                  : options_.loader_batch_bytes;
  if (options_.loader_rate_bytes_per_s > 0) {
    // A batch is spent from the limiter at once: keep it within the burst, so a rate-limited loader stays smooth.
    batch_bytes_ = std::min(batch_bytes_, LoaderBurst(reader, options_.loader_rate_bytes_per_s));
  }
  if (options_.predict_segment_pages > 0) {
    uint64_t n = options_.predict_segment_pages;
    segment_base_.push_back(0);
    for (const auto& r : reader.regions()) segment_base_.push_back(segment_base_.back() + (r.page_count() + n - 1) / n);
    segment_faults_.reset(new std::atomic<uint32_t>[segment_base_.back()]);
    for (uint64_t s = 0; s < segment_base_.back(); ++s) segment_faults_[s].store(0, std::memory_order_relaxed);
  }
}

uint64_t RestoreEngine::Impl::NowNs() const {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
}

PageRef RestoreEngine::Impl::RefOf(uint64_t g) const {
  auto it = std::upper_bound(region_first_.begin(), region_first_.end() - 1, g);
  uint32_t r = uint32_t(it - region_first_.begin() - 1);
  return PageRef{r, g - region_first_[r]};
}

uint64_t RestoreEngine::Impl::RegionEnd(uint64_t g) const {
  return *std::upper_bound(region_first_.begin(), region_first_.end() - 1, g);
}

bool RestoreEngine::Impl::IsInstalled(PageRef page) const {
  if (page.region >= reader_.regions().size() || page.page >= reader_.regions()[page.region].page_count()) return false;
  return installed_.Test(region_first_[page.region] + page.page);
}

void RestoreEngine::Impl::SetBlockState(uint32_t b, BlockState s) {
  // Under the stripe lock, so a waiter that checked the state and is about to sleep cannot miss the change.
  Stripe& st = stripes_[b % kStripes];
  {
    std::lock_guard<std::mutex> lock(st.mu);
    block_state_[b].store(s, std::memory_order_release);
  }
  st.cv.notify_all();
}

void RestoreEngine::Impl::WaitWhileLoading(uint32_t b) {
  Stripe& st = stripes_[b % kStripes];
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] { return block_state_[b].load(std::memory_order_acquire) != kLoading; });
}

bool RestoreEngine::Impl::WaitWhileLoadingUnlessStopped(uint32_t b) {
  Stripe& st = stripes_[b % kStripes];
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] {
    return stopping_.load(std::memory_order_acquire) || block_state_[b].load(std::memory_order_acquire) != kLoading;
  });
  return !stopping_.load(std::memory_order_acquire);
}

void RestoreEngine::Impl::WaitForPageOrBlock(uint32_t b, uint64_t g) {
  Stripe& st = stripes_[b % kStripes];
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] { return installed_.Test(g) || block_state_[b].load(std::memory_order_acquire) != kLoading; });
}

void RestoreEngine::Impl::NotifyPagesIn(uint32_t b) {
  // Only blocks some fault waits on (awaited_ is set before the waiter looks at its page, under the stripe lock
  // below): the others cost nothing. A waiter missed here still wakes when the block's state changes.
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the pages' installed bits before awaited_ is read
  if (!awaited_.Test(b)) return;
  Stripe& st = stripes_[b % kStripes];
  { std::lock_guard<std::mutex> lock(st.mu); }
  st.cv.notify_all();
}

Status RestoreEngine::Impl::BlockError(uint32_t b) const {
  std::lock_guard<std::mutex> lock(failures_mu_);
  auto it = failures_.find(b);
  if (it == failures_.end()) return Status::Internal("block " + std::to_string(b) + " failed without a recorded error");
  return it->second.status;
}

void RestoreEngine::Impl::RecordFailure(uint32_t b, const Status& s) {
  std::lock_guard<std::mutex> lock(failures_mu_);
  failures_[b] = BlockFailure{b, reader_.blocks()[b].offset, s};
}

Status RestoreEngine::Impl::ReadWithRetries(uint32_t b, std::span<uint8_t> out,
                                            const CheckpointReader::BlockProgress* progress, size_t first,
                                            unsigned first_attempt) {
  auto wait = options_.retry_backoff;
  unsigned attempts = std::max(1u, options_.max_read_attempts);
  bool progressed = false;
  CheckpointReader::BlockProgress watched;
  if (progress) {
    watched = [&](size_t begin, size_t end) {
      progressed = true;
      return (*progress)(begin, end);
    };
  }
  Status s;
  for (unsigned a = first_attempt;; ++a) {
    bool reread = false;
    s = progress ? reader_.ReadBlock(b, out, &reread, watched, first) : reader_.ReadBlock(b, out, &reread);
    if (reread) c_.blocks_reread.fetch_add(1, std::memory_order_relaxed);
    if (s.ok() || !s.retryable() || a >= attempts || progressed) return s;
    c_.read_retries.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(wait);
    wait *= 2;
  }
}

Status RestoreEngine::Impl::BlockReadFailed(uint32_t b, const Status& s) {
  const BlockInfo& info = reader_.blocks()[b];
  Status named = s.WithContext("block " + std::to_string(b) + " at offset " + fmt::format("{:#x}", info.offset) + " (" +
                               std::to_string(info.stored_length) + " bytes)");
  RecordFailure(b, named);
  if (s.retryable()) {
    // Still transient after the retries: a later fault may try again.
    transient_failures_.store(true, std::memory_order_relaxed);
    SetBlockState(b, kNotLoaded);
  } else {
    c_.blocks_failed.fetch_add(1, std::memory_order_relaxed);
    SetBlockState(b, kFailed);
  }
  return named;
}

void RestoreEngine::Impl::CountBlockRead(uint32_t b, Cause cause) {
  const BlockInfo& info = reader_.blocks()[b];
  if (transient_failures_.load(std::memory_order_relaxed)) {
    // An earlier transient failure of this block is history now.
    std::lock_guard<std::mutex> lock(failures_mu_);
    failures_.erase(b);
  }
  c_.blocks_read.fetch_add(1, std::memory_order_relaxed);
  c_.blocks_read_by[size_t(cause)].fetch_add(1, std::memory_order_relaxed);
  c_.bytes_read.fetch_add(info.stored_length, std::memory_order_relaxed);
  c_.bytes_decompressed.fetch_add(info.raw_length(), std::memory_order_relaxed);
}

Status RestoreEngine::Impl::InstallMembers(uint32_t b, std::span<const uint8_t> raw, InstallPriority priority) {
  thread_local std::vector<Todo> todo;
  thread_local std::vector<uint8_t> staging;
  todo.clear();
  for (const BlockMember& m : reader_.BlockMembers(b)) {
    if (!claimed_.TrySet(m.page)) continue;  // installed or being installed through another path
    if (sink_.IsPresent(RefOf(m.page))) {
      installed_.Set(m.page);
      c_.pages_skipped_present.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    todo.push_back({m.page, m.slot});
  }
  // Install in page order so that pages adjacent in guest memory go in one run (one UFFDIO_COPY, one message).
  std::sort(todo.begin(), todo.end(), [](const Todo& x, const Todo& y) { return x.g < y.g; });
  return InstallRuns(todo, raw, staging, priority);
}

Status RestoreEngine::Impl::InstallRuns(std::span<const Todo> todo, std::span<const uint8_t> raw,
                                        std::vector<uint8_t>& staging, InstallPriority priority) {
  // Cut `todo` into runs of pages adjacent in guest memory. A run whose pages are not adjacent in the block (or
  // are duplicates) is gathered into `staging` so that it still goes in one piece; staging is sized before any
  // span into it is taken.
  struct Cut {
    size_t begin, end;     // [begin, end) of todo
    size_t staging_pages;  // offset into staging, or SIZE_MAX when the run is contiguous in `raw`
  };
  thread_local std::vector<Cut> cuts;
  thread_local std::vector<PageInstall> runs;
  cuts.clear();
  size_t gathered = 0;
  for (size_t i = 0; i < todo.size();) {
    const uint64_t end = RegionEnd(todo[i].g);
    size_t j = i + 1;
    bool slots_adjacent = true;
    while (j < todo.size() && todo[j].g == todo[j - 1].g + 1 && todo[j].g < end) {
      slots_adjacent = slots_adjacent && todo[j].slot == todo[j - 1].slot + 1;
      ++j;
    }
    cuts.push_back({i, j, slots_adjacent ? SIZE_MAX : gathered});
    if (!slots_adjacent) gathered += j - i;
    i = j;
  }
  staging.resize(gathered * kPage);
  runs.clear();
  for (const Cut& c : cuts) {
    const uint64_t n = c.end - c.begin;
    std::span<const uint8_t> src;
    if (c.staging_pages == SIZE_MAX) {
      src = raw.subspan(todo[c.begin].slot * kPage, n * kPage);
    } else {
      uint8_t* dst = staging.data() + c.staging_pages * kPage;
      for (size_t k = 0; k < n; ++k) std::memcpy(dst + k * kPage, raw.data() + todo[c.begin + k].slot * kPage, kPage);
      src = std::span<const uint8_t>(dst, n * kPage);
    }
    runs.push_back(PageInstall{RefOf(todo[c.begin].g), n, src});
  }
  size_t done = 0;
  Status s = runs.empty() ? Status::Ok() : sink_.Install(runs, priority, &done);
  done = s.ok() ? cuts.size() : std::min(done, cuts.size());
  c_.install_calls.fetch_add(s.ok() ? cuts.size() : done + 1, std::memory_order_relaxed);
  uint64_t pages = 0;
  for (size_t r = 0; r < done; ++r) {
    for (size_t k = cuts[r].begin; k < cuts[r].end; ++k) installed_.Set(todo[k].g);
    pages += cuts[r].end - cuts[r].begin;
  }
  c_.pages_installed.fetch_add(pages, std::memory_order_relaxed);
  if (!s.ok()) {
    // Release the claims of everything not installed, so a later load of this block offers them again.
    const size_t first_not_installed = done < cuts.size() ? cuts[done].begin : todo.size();
    for (size_t k = first_not_installed; k < todo.size(); ++k) claimed_.Clear(todo[k].g);
    return s;
  }
  return Status::Ok();
}

Status RestoreEngine::Impl::LoadBlock(uint32_t b, Cause cause, uint64_t fault_page, uint64_t fault_ns,
                                      uint64_t* page_in_ns) {
  // A large host page goes in only once every page of it is decoded: nothing to gain from streaming its block.
  const bool large = BlockHasLargeHostPages(b);
  if (cause == Cause::kDemand && fault_page != kNoPage && options_.stream_faults && !large) {
    return StreamBlock(b, fault_page, fault_ns, page_in_ns);
  }
  const BlockInfo& info = reader_.blocks()[b];
  thread_local std::vector<uint8_t> raw;
  raw.resize(info.raw_length());
  uint64_t t_read = NowNs();
  Status s = ReadWithRetries(b, raw);
  c_.read_ns.fetch_add(NowNs() - t_read, std::memory_order_relaxed);
  if (!s.ok()) return BlockReadFailed(b, s);
  return InstallLoaded(b, cause, raw, fault_page, fault_ns, page_in_ns);
}

Status RestoreEngine::Impl::InstallLoaded(uint32_t b, Cause cause, std::span<const uint8_t> raw, uint64_t fault_page,
                                          uint64_t fault_ns, uint64_t* page_in_ns) {
  const uint64_t t_install = NowNs();
  CountBlockRead(b, cause);
  // The faulting thread waits for its block and for the blocks predicted on its path; the rest can queue.
  const bool on_fault_path = cause == Cause::kDemand || cause == Cause::kPredicted;
  const InstallPriority priority = on_fault_path ? InstallPriority::kUrgent : InstallPriority::kBackground;
  // A block holding pages of large host pages installs each host page whole (host_pages.cc).
  Status s = BlockHasLargeHostPages(b) ? InstallBlockPages(b, raw, priority, fault_page) : InstallMembers(b, raw, priority);
  const uint64_t t_done = NowNs();
  c_.install_ns.fetch_add(t_done - t_install, std::memory_order_relaxed);
  if (!s.ok()) {
    SetBlockState(b, kNotLoaded);
    return s.WithContext("installing block " + std::to_string(b));
  }
  // The sink wakes the faulting thread when the whole batch is in.
  if (fault_page != kNoPage) wake_hist_.Record(t_done - fault_ns);
  if (page_in_ns) *page_in_ns = t_done;
  c_.blocks_loaded.fetch_add(1, std::memory_order_relaxed);
  SetBlockState(b, kLoaded);
  return Status::Ok();
}

Status RestoreEngine::Impl::EnsureBlock(uint32_t b, Cause cause, bool wait, bool* read, bool* waited,
                                        uint64_t fault_page, uint64_t fault_ns, uint64_t* page_in_ns) {
  for (;;) {
    uint32_t st = block_state_[b].load(std::memory_order_acquire);
    if (st == kLoaded) return Status::Ok();
    if (st == kFailed) return BlockError(b);
    if (st == kLoading) {
      if (!wait) return Status::Ok();
      awaited_.Set(b);  // a loader batch holding it decodes it next; a streamed fault's pieces wake us
      std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with NotifyPagesIn's
      if (fault_page == kNoPage) {
        WaitWhileLoading(b);
      } else {
        // A fault needs its page, not the block: a streamed block's pieces go in one by one, and waiting for
        // the last would hold this handler (and count as stall) long after the page was in.
        WaitForPageOrBlock(b, fault_page);
        if (installed_.Test(fault_page)) {
          *waited = true;
          if (page_in_ns) *page_in_ns = NowNs();
          return Status::Ok();
        }
      }
      *waited = true;
      // A loader that failed transiently leaves the block not loaded: loop and try it ourselves.
      continue;
    }
    if (!block_state_[b].compare_exchange_strong(st, kLoading, std::memory_order_acq_rel)) continue;
    *read = true;
    if (cause != Cause::kDemand) return LoadBlock(b, cause, kNoPage, 0, nullptr);
    demand_reads_.fetch_add(1, std::memory_order_acq_rel);
    Status s = LoadBlock(b, cause, fault_page, fault_ns, page_in_ns);
    if (demand_reads_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The background thread waits for demand reads to drain; tell it (under its lock, so it cannot miss it).
      std::lock_guard<std::mutex> lock(loader_mu_);
      loader_cv_.notify_all();
    }
    return s;
  }
}

Result<FaultKind> RestoreEngine::Impl::InstallZeroWindow(uint64_t g) {
  uint64_t w = options_.zero_window_pages;
  uint64_t lo = g & ~(w - 1), hi = std::min(lo + w, RegionEnd(g));
  lo = std::max(lo, region_first_[RefOf(g).region]);
  FaultKind result = FaultKind::kPresent;
  // Claim the faulting page first: whoever wins it is the one whose fault counts as a zero fault.
  bool own = false;
  while (!own) {
    if (installed_.Test(g)) return FaultKind::kPresent;
    own = claimed_.TrySet(g);
    // Lost the claim: another thread is installing it right now (one ioctl); wait for it or for its failure.
    if (!own) std::this_thread::yield();
  }
  std::vector<uint64_t> pages;
  for (uint64_t p = lo; p < hi; ++p) {
    if (p == g) {
      pages.push_back(p);
      continue;
    }
    if (installed_.Test(p) || reader_.Locate(p).kind == PageKind::kStored) continue;
    if (claimed_.TrySet(p)) pages.push_back(p);
  }
  // Skip what the sink already has, then install the rest as runs of adjacent pages.
  std::vector<uint64_t> todo;
  for (uint64_t p : pages) {
    if (sink_.IsPresent(RefOf(p))) {
      installed_.Set(p);
      c_.pages_skipped_present.fetch_add(1, std::memory_order_relaxed);
    } else {
      todo.push_back(p);
    }
  }
  bool g_present = std::find(todo.begin(), todo.end(), g) == todo.end();
  uint64_t t = NowNs();
  std::vector<PageInstall> runs;
  std::vector<size_t> run_begin;  // index into todo of each run's first page
  for (size_t i = 0; i < todo.size();) {
    size_t j = i + 1;
    while (j < todo.size() && todo[j] == todo[j - 1] + 1) ++j;
    runs.push_back(PageInstall{RefOf(todo[i]), j - i, {}});
    run_begin.push_back(i);
    i = j;
  }
  size_t done = 0;
  Status failed = runs.empty() ? Status::Ok() : sink_.Install(runs, InstallPriority::kUrgent, &done);
  done = failed.ok() ? runs.size() : std::min(done, runs.size());
  c_.install_calls.fetch_add(failed.ok() ? runs.size() : done + 1, std::memory_order_relaxed);
  const size_t installed_end = done < runs.size() ? run_begin[done] : todo.size();
  for (size_t k = 0; k < todo.size(); ++k) {
    if (k < installed_end)
      installed_.Set(todo[k]);
    else
      claimed_.Clear(todo[k]);
  }
  c_.zero_pages_installed.fetch_add(installed_end, std::memory_order_relaxed);
  c_.install_ns.fetch_add(NowNs() - t, std::memory_order_relaxed);
  if (!failed.ok()) return failed;
  if (!g_present) result = FaultKind::kZero;
  return result;
}

Result<FaultOutcome> RestoreEngine::Impl::HandleFault(PageRef page) {
  uint64_t t = NowNs();
  last_fault_ns_.store(t, std::memory_order_relaxed);
  const auto& regions = reader_.regions();
  if (page.region >= regions.size() || page.page >= regions[page.region].page_count()) {
    return Status::InvalidArgument(reader_.name() + ": fault on page " + std::to_string(page.page) + " of region " +
                                   std::to_string(page.region) + ", which the checkpoint does not have");
  }
  uint64_t g = region_first_[page.region] + page.page;
  FaultOutcome out;
  Status error;
  uint64_t page_in_ns = 0;  // when the faulting page went in, as the block load or the wait for it saw it
  if (installed_.Test(g)) {
    out.kind = FaultKind::kPresent;
    out.block = UINT32_MAX;
  } else if (InLargeHostPage(g)) {
    error = HandleLargeFault(g, t, &out);
  } else {
    PageLocation loc = reader_.Locate(g);
    if (loc.kind != PageKind::kStored) {
      out.block = UINT32_MAX;
      auto k = InstallZeroWindow(g);
      if (k)
        out.kind = *k;
      else
        error = k.error();
    } else {
      out.block = loc.block;
      bool read = false, waited = false;
      error = EnsureBlock(loc.block, Cause::kDemand, true, &read, &waited, g, t, &page_in_ns);
      out.kind = (read || waited) ? FaultKind::kBlocking : FaultKind::kPresent;
      out.joined = waited && !read;
    }
  }
  out.latency_ns = NowNs() - t;
  // The faulting thread runs again once its page is in (the sink woke it), which may be well before its block
  // is: that is its stall. Faults that did not learn the moment stalled for their whole service time.
  out.stall_ns = page_in_ns >= t ? page_in_ns - t : out.latency_ns;
  EngineEvent ev{t, page, EngineEventKind::kFaultFailed, out.block, out.latency_ns};
  if (!error.ok()) {
    c_.faults_failed.fetch_add(1, std::memory_order_relaxed);
    timeline_.Add(ev);
    return error.WithContext(reader_.name() + ": fault on region \"" + regions[page.region].name + "\" page " +
                             std::to_string(page.page));
  }
  fault_hist_.Record(out.latency_ns);
  CountStall(out, out.stall_ns);
  switch (out.kind) {
    case FaultKind::kZero:
      c_.faults_zero.fetch_add(1, std::memory_order_relaxed);
      ev.kind = EngineEventKind::kFaultZero;
      break;
    case FaultKind::kPresent:
      c_.faults_present.fetch_add(1, std::memory_order_relaxed);
      ev.kind = EngineEventKind::kFaultPresent;
      break;
    case FaultKind::kBlocking:
      c_.faults_blocking.fetch_add(1, std::memory_order_relaxed);
      if (out.joined) c_.faults_joined.fetch_add(1, std::memory_order_relaxed);
      blocking_hist_.Record(out.latency_ns);
      ev.kind = EngineEventKind::kFaultBlocking;
      NotePredictionFault(page);
      break;
  }
  timeline_.Add(ev);
  return out;
}

void RestoreEngine::Impl::CountStall(const FaultOutcome& out, uint64_t stall_ns) {
  c_.stall_ns.fetch_add(stall_ns, std::memory_order_relaxed);
  if (out.kind != FaultKind::kBlocking) return;
  c_.stall_blocking_ns.fetch_add(stall_ns, std::memory_order_relaxed);
  stall_hist_.Record(stall_ns);
  if (out.joined) {
    c_.stall_joined_ns.fetch_add(stall_ns, std::memory_order_relaxed);
    join_hist_.Record(stall_ns);
  }
}

// --- public shell ---

RestoreEngine::RestoreEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RestoreEngine::~RestoreEngine() = default;

Result<std::unique_ptr<RestoreEngine>> RestoreEngine::Create(const CheckpointReader& reader, PageSink& sink,
                                                             RestoreEngineOptions options) {
  if (options.predict_segment_pages > 0 &&
      (options.predict_threshold == 0 || options.predict_threshold > options.predict_segment_pages)) {
    return Status::InvalidArgument("demand prediction: the threshold must be 1..segment pages (got " +
                                   std::to_string(options.predict_threshold) + " of " +
                                   std::to_string(options.predict_segment_pages) + ")");
  }
  if (options.zero_window_pages == 0 || options.zero_window_pages > 512 ||
      !std::has_single_bit(options.zero_window_pages)) {
    return Status::InvalidArgument("zero_window_pages must be a power of two in 1..512 (got " +
                                   std::to_string(options.zero_window_pages) + ")");
  }
  if (options.preload_all) options.preload_working_set = false;
  return std::unique_ptr<RestoreEngine>(new RestoreEngine(std::make_unique<Impl>(reader, sink, std::move(options))));
}

Status RestoreEngine::Start() { return impl_->Start(); }
Result<FaultOutcome> RestoreEngine::HandleFault(PageRef page) { return impl_->HandleFault(page); }
bool RestoreEngine::IsInstalled(PageRef page) const { return impl_->IsInstalled(page); }
Status RestoreEngine::WaitForLoader() { return impl_->WaitForLoader(); }
void RestoreEngine::Stop() { impl_->Stop(); }
RestoreEngineStats RestoreEngine::Stats() const { return impl_->Stats(); }
RestoreEngineStats RestoreEngine::StatsBeforeIdleSweep() const { return impl_->StatsBeforeIdleSweep(); }
std::vector<EngineEvent> RestoreEngine::Timeline() const { return impl_->Timeline(); }
std::vector<BlockFailure> RestoreEngine::failures() const { return impl_->failures(); }

}  // namespace halite
