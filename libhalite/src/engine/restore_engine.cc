// The fault path: one fault installs its page's whole locality block, read once however many threads need it.
#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "engine/engine_impl.h"
#include "format/byte_order.h"

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
      claimed_(reader.total_pages()),
      installed_(reader.total_pages()),
      timeline_(options_.record_timeline, options_.timeline_capacity),
      limiter_(options_.loader_rate_bytes_per_s, LoaderBurst(reader, options_.loader_rate_bytes_per_s)) {
  for (const auto& r : reader.regions()) region_first_.push_back(r.first_page);
  region_first_.push_back(reader.total_pages());
  for (size_t b = 0; b < reader.blocks().size(); ++b) block_state_[b].store(kNotLoaded, std::memory_order_relaxed);
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

Status RestoreEngine::Impl::ReadWithRetries(uint32_t b, std::span<uint8_t> out) {
  auto wait = options_.retry_backoff;
  unsigned attempts = std::max(1u, options_.max_read_attempts);
  Status s;
  for (unsigned a = 1;; ++a) {
    s = reader_.ReadBlock(b, out);
    if (s.ok() || !s.retryable() || a >= attempts) return s;
    c_.read_retries.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(wait);
    wait *= 2;
  }
}

Status RestoreEngine::Impl::InstallMembers(uint32_t b, std::span<const uint8_t> raw) {
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
  // Install in page order so that pages adjacent in guest memory go in one call (one UFFDIO_COPY, one message).
  std::sort(todo.begin(), todo.end(), [](const Todo& x, const Todo& y) { return x.g < y.g; });
  sink_.BeginBatch();
  Status s = InstallRuns(todo, raw, staging);
  Status end = sink_.EndBatch();
  return s.ok() ? end : s;
}

Status RestoreEngine::Impl::InstallRuns(std::span<const Todo> todo, std::span<const uint8_t> raw,
                                        std::vector<uint8_t>& staging) {
  for (size_t i = 0; i < todo.size();) {
    uint64_t end = RegionEnd(todo[i].g);
    size_t j = i + 1;
    bool slots_adjacent = true;
    while (j < todo.size() && todo[j].g == todo[j - 1].g + 1 && todo[j].g < end) {
      slots_adjacent = slots_adjacent && todo[j].slot == todo[j - 1].slot + 1;
      ++j;
    }
    uint64_t n = j - i;
    std::span<const uint8_t> src;
    if (slots_adjacent) {
      src = raw.subspan(todo[i].slot * kPage, n * kPage);
    } else {
      // Adjacent in memory but not in the block (or duplicates): gather them so the run still goes in one call.
      staging.resize(n * kPage);
      for (size_t k = 0; k < n; ++k)
        std::memcpy(staging.data() + k * kPage, raw.data() + todo[i + k].slot * kPage, kPage);
      src = std::span<const uint8_t>(staging.data(), n * kPage);
    }
    Status s = sink_.InstallPages(RefOf(todo[i].g), n, src);
    c_.install_calls.fetch_add(1, std::memory_order_relaxed);
    if (!s.ok()) {
      // Release the claims of everything not installed, so a later load of this block offers them again.
      for (size_t k = i; k < todo.size(); ++k) claimed_.Clear(todo[k].g);
      return s;
    }
    for (size_t k = i; k < j; ++k) installed_.Set(todo[k].g);
    c_.pages_installed.fetch_add(n, std::memory_order_relaxed);
    i = j;
  }
  return Status::Ok();
}

Status RestoreEngine::Impl::LoadBlock(uint32_t b, Cause cause) {
  const BlockInfo& info = reader_.blocks()[b];
  thread_local std::vector<uint8_t> raw;
  raw.resize(info.raw_length());
  uint64_t t_read = NowNs();
  Status s = ReadWithRetries(b, raw);
  uint64_t t_install = NowNs();
  c_.read_ns.fetch_add(t_install - t_read, std::memory_order_relaxed);
  if (!s.ok()) {
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
  if (transient_failures_.load(std::memory_order_relaxed)) {
    // An earlier transient failure of this block is history now.
    std::lock_guard<std::mutex> lock(failures_mu_);
    failures_.erase(b);
  }
  c_.blocks_read.fetch_add(1, std::memory_order_relaxed);
  c_.blocks_read_by[size_t(cause)].fetch_add(1, std::memory_order_relaxed);
  c_.bytes_read.fetch_add(info.stored_length, std::memory_order_relaxed);
  c_.bytes_decompressed.fetch_add(info.raw_length(), std::memory_order_relaxed);
  s = InstallMembers(b, raw);
  c_.install_ns.fetch_add(NowNs() - t_install, std::memory_order_relaxed);
  if (!s.ok()) {
    SetBlockState(b, kNotLoaded);
    return s.WithContext("installing block " + std::to_string(b));
  }
  c_.blocks_loaded.fetch_add(1, std::memory_order_relaxed);
  SetBlockState(b, kLoaded);
  return Status::Ok();
}

Status RestoreEngine::Impl::EnsureBlock(uint32_t b, Cause cause, bool wait, bool* read, bool* waited) {
  for (;;) {
    uint32_t st = block_state_[b].load(std::memory_order_acquire);
    if (st == kLoaded) return Status::Ok();
    if (st == kFailed) return BlockError(b);
    if (st == kLoading) {
      if (!wait) return Status::Ok();
      WaitWhileLoading(b);
      *waited = true;
      // A loader that failed transiently leaves the block not loaded: loop and try it ourselves.
      continue;
    }
    if (!block_state_[b].compare_exchange_strong(st, kLoading, std::memory_order_acq_rel)) continue;
    *read = true;
    if (cause != Cause::kDemand) return LoadBlock(b, cause);
    demand_reads_.fetch_add(1, std::memory_order_acq_rel);
    Status s = LoadBlock(b, cause);
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
  Status failed;
  sink_.BeginBatch();
  for (size_t i = 0; i < todo.size();) {
    size_t j = i + 1;
    while (j < todo.size() && todo[j] == todo[j - 1] + 1) ++j;
    Status s = failed.ok() ? sink_.InstallZeroPages(RefOf(todo[i]), j - i) : failed;
    if (failed.ok()) c_.install_calls.fetch_add(1, std::memory_order_relaxed);
    for (size_t k = i; k < j; ++k) {
      if (s.ok())
        installed_.Set(todo[k]);
      else
        claimed_.Clear(todo[k]);
    }
    if (s.ok()) c_.zero_pages_installed.fetch_add(j - i, std::memory_order_relaxed);
    if (!s.ok() && failed.ok()) failed = s;
    i = j;
  }
  Status end = sink_.EndBatch();
  if (failed.ok()) failed = end;
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
  if (installed_.Test(g)) {
    out.kind = FaultKind::kPresent;
    out.block = UINT32_MAX;
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
      error = EnsureBlock(loc.block, Cause::kDemand, true, &read, &waited);
      out.kind = (read || waited) ? FaultKind::kBlocking : FaultKind::kPresent;
      out.joined = waited && !read;
    }
  }
  out.latency_ns = NowNs() - t;
  EngineEvent ev{t, page, EngineEventKind::kFaultFailed, out.block, out.latency_ns};
  if (!error.ok()) {
    c_.faults_failed.fetch_add(1, std::memory_order_relaxed);
    timeline_.Add(ev);
    return error.WithContext(reader_.name() + ": fault on region \"" + regions[page.region].name + "\" page " +
                             std::to_string(page.page));
  }
  fault_hist_.Record(out.latency_ns);
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

// --- public shell ---

RestoreEngine::RestoreEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RestoreEngine::~RestoreEngine() = default;

Result<std::unique_ptr<RestoreEngine>> RestoreEngine::Create(const CheckpointReader& reader, PageSink& sink,
                                                             RestoreEngineOptions options) {
  for (const auto& r : reader.regions()) {
    if (r.host_page_size != kPage) {
      return Status::Unsupported(reader.name() + ": region \"" + r.name + "\" has host page size " +
                                 std::to_string(r.host_page_size) +
                                 ": lazy restore of hugepage-backed regions is not implemented (restore eagerly)");
    }
  }
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
