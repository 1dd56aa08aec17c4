// The push-style migration source: sections from any thread, a return-path thread, request workers.
#include "halite/qemu/qemu_push_source.h"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "halite/qemu/qemu_return_path.h"

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t MicrosBetween(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(b - a).count());
}

constexpr uint32_t kEarlyPing = 1;
constexpr uint32_t kPackagePing = 0x52554e00;  // "RUN\0": answered right before POSTCOPY_RUN is processed

// Set on the request workers: their sections answer a request (never throttled, counted as request pages).
thread_local bool t_request_worker = false;

}  // namespace

PushRestoreChannel::PushRestoreChannel(int fd, const SavedVmState& state, PushRestoreOptions options,
                                       PageRequestHandler handler)
    : fd_(fd),
      state_(state),
      options_(options),
      handler_(std::move(handler)),
      created_(Clock::now()),
      t0_(created_),
      sink_(fd, "restore stream", 256 * 1024, options.stall_timeout_ms),
      writer_(&sink_, &state, MigrationStreamWriterOptions{options.lazy, 4096}) {
  for (const auto& b : state_.ram_blocks) {
    const uint64_t words = (b.page_count() + 63) / 64;
    sent_.emplace_back(new std::atomic<uint64_t>[words]);
    for (uint64_t i = 0; i < words; ++i) sent_.back()[i].store(0, std::memory_order_relaxed);
    total_pages_ += b.page_count();
  }
}

PushRestoreChannel::~PushRestoreChannel() { StopThreads(); }

void PushRestoreChannel::StopThreads() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  if (rp_thread_.joinable()) rp_thread_.join();  // its reads poll the stop flag
}

Status PushRestoreChannel::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

Status PushRestoreChannel::Sticky() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::Ok();
  return status();
}

void PushRestoreChannel::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = s.ok() ? Status::Internal("restore channel failed without a reason") : s;
    failed_.store(true, std::memory_order_release);
    cv_.notify_all();
  }
  // Unblocks a destination waiting for pages and our own threads. A postcopy destination pauses ("Detected IO
  // failure for postcopy"): its guest stays frozen rather than run on memory that is not all there.
  shutdown(fd_, SHUT_RDWR);
}

void PushRestoreChannel::Abort(const Status& why) { Fail(why); }

bool PushRestoreChannel::WaitForFailure(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return failed_.load(); });
  return failed_.load();
}

// A write error usually means QEMU went away or gave up; the return path says which.
Status PushRestoreChannel::WriteFailed(const Status& s) {
  if (s.code() == StatusCode::kIoError) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return rp_ended_ || failed_.load(); });
    if (failed_.load()) return error_;
    std::string why = "destination stopped reading after " + std::to_string(pages_sent()) + " of " +
                      std::to_string(total_pages_) + " pages (did QEMU exit or reject the stream?): " + s.message();
    if (shut_ && *shut_ != 0) {
      why = "destination reported a failed load (SHUT " + std::to_string(*shut_) + ") after " +
            std::to_string(pages_sent()) + " pages";
    }
    lock.unlock();
    Fail(s.code() == StatusCode::kIoError ? Status::IoError(why, s.sys_errno()) : Status::Aborted(why));
  } else {
    Fail(s);
  }
  return status();
}

Status PushRestoreChannel::Begin() {
  t0_ = Clock::now();
  if (options_.lazy) {
    for (const auto& b : state_.ram_blocks) {
      if (b.page_size != 0 && b.page_size != 4096) {
        return Status::Unsupported("RAMBlock " + b.name + " uses " + fmt::format("{:#x}", b.page_size) +
                                   "-byte pages: lazy restore of huge-page-backed memory is not supported");
      }
    }
  }
  uint64_t summary = options_.pagesize_summary;
  if (summary == 0) {
    summary = 4096;
    for (const auto& b : state_.ram_blocks) summary |= b.page_size;
  }
  Status s;
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    s = writer_.WriteHeader();
    if (s.ok()) s = writer_.WriteConfiguration();
    if (options_.lazy) {
      if (s.ok()) s = writer_.WriteOpenReturnPath();
      if (s.ok()) s = writer_.WritePing(kEarlyPing);
      if (s.ok()) s = writer_.WritePostcopyAdvise(summary);
      if (s.ok()) s = writer_.WriteRamStart();
      // Required by QEMU 7.2 between ADVISE and LISTEN; pages sent after it are kept.
      if (s.ok()) s = writer_.WriteDiscardAll();
    } else if (s.ok()) {
      s = writer_.WriteRamStart();
    }
    if (s.ok()) s = writer_.Flush();
    bytes_flushed_ = sink_.bytes_written();
  }
  if (options_.lazy) {
    rp_thread_ = std::thread([this] { ReturnPathLoop(); });
    for (unsigned i = 0; i < std::max(1u, options_.request_workers); ++i) {
      workers_.emplace_back([this] { WorkerLoop(); });
    }
  }
  if (!s.ok()) return WriteFailed(s);
  return Status::Ok();
}

Status PushRestoreChannel::StartGuest() {
  if (!options_.lazy) return Status::Internal("StartGuest is for a lazy (postcopy) restore");
  HLT_RETURN_IF_ERROR(Sticky());
  Status s;
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    s = writer_.WritePackaged(true, kPackagePing);
    if (s.ok()) s = writer_.Flush();
    bytes_flushed_ = sink_.bytes_written();
    if (s.ok()) guest_started_.store(true, std::memory_order_release);
  }
  if (!s.ok()) return s.code() == StatusCode::kInvalidArgument ? s : WriteFailed(s);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.connect_to_package_us = MicrosBetween(t0_, Clock::now());
  workers_go_ = true;
  cv_.notify_all();
  return Status::Ok();
}

void PushRestoreChannel::ReturnPathLoop() {
  FdSource src(fd_, 0, &stop_);
  ReturnPathReader reader(&src);
  for (;;) {
    auto msg = reader.Next();
    if (!msg.has_value() || !msg->has_value()) {
      Status why;
      {
        std::lock_guard<std::mutex> lock(mu_);
        rp_ended_ = true;
        cv_.notify_all();
        if (stop_ || (shut_ && *shut_ == 0)) return;
        if (shut_) {
          why = Status::Aborted("destination reported a failed load (SHUT " + std::to_string(*shut_) + ") after " +
                                std::to_string(pages_sent()) + " of " + std::to_string(total_pages_) + " pages");
        } else {
          std::string m = "destination closed the connection after " + std::to_string(pages_sent()) + " of " +
                          std::to_string(total_pages_) + " pages (did QEMU exit?)";
          if (!msg.has_value()) {
            m += ": " + msg.error().message();
            if (msg.error().sys_errno() != 0) m += std::string(" (") + strerror(msg.error().sys_errno()) + ")";
          }
          why = Status::IoError(m);
        }
      }
      Fail(why);
      return;
    }
    ReturnPathMessage& m = **msg;
    Status bad;
    {
      std::lock_guard<std::mutex> lock(mu_);
      switch (m.type) {
        case ReturnPathType::kReqPages:
        case ReturnPathType::kReqPagesId: {
          const int block = state_.FindBlock(m.block_name);
          const uint64_t pages = block < 0 ? 0 : state_.ram_blocks[block].page_count();
          const uint64_t first = m.offset / kTargetPageSize;
          const uint64_t count = std::max<uint64_t>(1, (m.length + kTargetPageSize - 1) / kTargetPageSize);
          if (block < 0) {
            bad = Status::Corrupt("return path: page request for unknown RAMBlock '" + m.block_name + "'");
          } else if (m.offset % kTargetPageSize != 0 || first + count > pages) {
            bad =
                Status::Corrupt("return path: page request " + fmt::format("{:#x}", m.offset) + "+" + fmt::format("{:#x}", m.length) +
                                " outside RAMBlock " + m.block_name + " (" + fmt::format("{:#x}", pages * kTargetPageSize) + " bytes)");
          } else {
            if (stats_.requests++ == 0) stats_.pages_sent_before_first_request = pages_sent();
            request_count_.fetch_add(1, std::memory_order_relaxed);
            requested_.push_back(PageId{static_cast<uint32_t>(block), first});
            requests_.push_back(Request{static_cast<uint32_t>(block), first, count, Clock::now()});
          }
          break;
        }
        case ReturnPathType::kPong:
          if (m.value == kPackagePing) package_pong_ = Clock::now();
          break;
        case ReturnPathType::kShut:
          shut_ = m.value;
          break;
        default:
          bad = Status::Unsupported("return path: unexpected " +
                                    std::string(ReturnPathTypeName(static_cast<uint16_t>(m.type))) +
                                    " message (postcopy recovery is not supported)");
      }
      cv_.notify_all();
    }
    if (!bad.ok()) {
      Fail(bad);
      return;
    }
  }
}

void PushRestoreChannel::WorkerLoop() {
  t_request_worker = true;
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_.load() || failed_.load() || (workers_go_ && !requests_.empty()); });
      if (stop_ || failed_) return;
      r = requests_.front();
      requests_.pop_front();
    }
    bool any = false, after_end = false;
    Status s;
    for (uint64_t p = r.first; p < r.first + r.count && s.ok(); ++p) {
      const PageId id{r.block, p};
      if (IsSent(id)) continue;
      any = true;
      s = handler_(id);
      if (!s.ok() && !IsSent(id)) {
        // The stream may have ended meanwhile (a request for a page never sent: it reads as zero).
        bool ended;
        {
          std::lock_guard<std::mutex> lock(stream_mu_);
          ended = ended_;
        }
        if (ended) {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.requests_after_end;
          after_end = true;
          s = Status::Ok();
          break;
        }
      } else {
        s = Status::Ok();
      }
      if (!s.ok()) {
        Fail(s.WithContext("answering QEMU's request for page " + fmt::format("{:#x}", p * kTargetPageSize) + " of " +
                           state_.ram_blocks[r.block].name));
        return;
      }
    }
    if (after_end) continue;  // counted above
    std::lock_guard<std::mutex> lock(mu_);
    if (!any) {
      ++stats_.requests_already_sent;
    } else {
      request_latency_.Record(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                Clock::now() - r.received).count()));
    }
  }
}

uint64_t PushRestoreChannel::QueuedPages() {
  int outq = 0;
  if (ioctl(fd_, SIOCOUTQ, &outq) != 0) return 0;  // not a socket: no way to tell, do not throttle
  const uint64_t flushed = bytes_flushed_.load(std::memory_order_acquire);
  const uint64_t consumed = flushed - std::min<uint64_t>(flushed, static_cast<uint64_t>(outq));
  std::lock_guard<std::mutex> lock(inflight_mu_);
  while (!inflight_.empty() && inflight_.front().first <= consumed) {
    inflight_pages_ -= inflight_.front().second;
    inflight_.pop_front();
  }
  return inflight_pages_;
}

void PushRestoreChannel::Throttle() {
  if (options_.max_queued_push_pages == 0) return;
  bool waited = false;
  while (!failed_.load(std::memory_order_acquire) && !stop_.load(std::memory_order_relaxed) &&
         QueuedPages() > options_.max_queued_push_pages) {
    waited = true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (waited) {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    ++throttle_waits_;
  }
}

Status PushRestoreChannel::BeginSection() {
  if (owner_.load() == std::this_thread::get_id()) return Status::Internal("restore channel: nested section");
  HLT_RETURN_IF_ERROR(Sticky());
  const bool started = guest_started_.load(std::memory_order_acquire);
  SectionKind kind = SectionKind::kBackgroundPush;  // eager: everything is a push
  if (options_.lazy) {
    kind = t_request_worker ? SectionKind::kRequestAnswer
                            : started ? SectionKind::kBackgroundPush : SectionKind::kPreload;
  }
  if (options_.lazy && kind == SectionKind::kBackgroundPush) Throttle();
  stream_mu_.lock();
  Status s = Sticky();
  if (s.ok() && ended_) s = Status::Aborted("restore channel: the stream has already ended");
  if (!s.ok()) {
    stream_mu_.unlock();
    return s;
  }
  owner_.store(std::this_thread::get_id());
  section_open_ = false;
  section_pages_ = 0;
  section_kind_ = kind;
  return Status::Ok();
}

Status PushRestoreChannel::OpenIfNeeded() {
  if (owner_.load() != std::this_thread::get_id()) {
    return Status::Internal("restore channel: pages added outside a section of this thread");
  }
  if (section_open_) return Status::Ok();
  section_open_ = true;
  return writer_.BeginRamPart();
}

Status PushRestoreChannel::MarkSent(PageId first, uint64_t count) {
  // Never a page twice: QEMU would pause the migration on "File exists". Checked before any byte is written.
  for (uint64_t p = first.page; p < first.page + count; ++p) {
    const uint64_t bit = uint64_t{1} << (p % 64);
    if (sent_[first.block][p / 64].fetch_or(bit, std::memory_order_acq_rel) & bit) {
      return Status::Internal("restore channel: page " + std::to_string(p) + " of RAMBlock " +
                              state_.ram_blocks[first.block].name + " sent twice");
    }
  }
  pages_sent_.fetch_add(count, std::memory_order_relaxed);
  section_pages_ += count;
  return Status::Ok();
}

Status PushRestoreChannel::AddPages(PageId first, uint64_t count, const uint8_t* data) {
  if (first.block >= state_.ram_blocks.size() || first.page + count > state_.ram_blocks[first.block].page_count()) {
    return Status::Internal("restore channel: pages " + std::to_string(first.page) + "+" + std::to_string(count) +
                            " outside block " + std::to_string(first.block));
  }
  HLT_RETURN_IF_ERROR(MarkSent(first, count));
  Status s = OpenIfNeeded();
  for (uint64_t i = 0; i < count && s.ok(); ++i) {
    s = writer_.WritePage(PageId{first.block, first.page + i}, data + i * kTargetPageSize);
  }
  if (!s.ok()) return WriteFailed(s);
  return Status::Ok();
}

Status PushRestoreChannel::AddZeroPages(PageId first, uint64_t count) {
  if (first.block >= state_.ram_blocks.size() || first.page + count > state_.ram_blocks[first.block].page_count()) {
    return Status::Internal("restore channel: zero pages " + std::to_string(first.page) + "+" + std::to_string(count) +
                            " outside block " + std::to_string(first.block));
  }
  HLT_RETURN_IF_ERROR(MarkSent(first, count));
  Status s = OpenIfNeeded();
  for (uint64_t i = 0; i < count && s.ok(); ++i) s = writer_.WriteZeroPage(PageId{first.block, first.page + i});
  if (!s.ok()) return WriteFailed(s);
  zero_pages_ += count;
  return Status::Ok();
}

Status PushRestoreChannel::EndSection() {
  if (owner_.load() != std::this_thread::get_id()) {
    return Status::Internal("restore channel: EndSection without BeginSection on this thread");
  }
  Status s;
  if (section_open_) {
    s = writer_.EndRamSection();
    if (s.ok()) s = writer_.Flush();
    const uint64_t bytes = sink_.bytes_written();
    bytes_flushed_.store(bytes, std::memory_order_release);
    if (s.ok()) {
      ++sections_;
      switch (section_kind_) {
        case SectionKind::kPreload:
          preload_pages_ += section_pages_;
          break;
        case SectionKind::kRequestAnswer:
          request_pages_ += section_pages_;
          break;
        case SectionKind::kBackgroundPush:
          pushed_pages_ += section_pages_;
          break;
      }
      std::lock_guard<std::mutex> lock(inflight_mu_);
      inflight_.emplace_back(bytes, section_pages_);
      inflight_pages_ += section_pages_;
    }
  }
  section_open_ = false;
  owner_.store(std::thread::id());
  stream_mu_.unlock();
  if (!s.ok()) return WriteFailed(s);
  return Status::Ok();
}

Status PushRestoreChannel::SendPages(PageId first, uint64_t count, const uint8_t* data) {
  HLT_RETURN_IF_ERROR(BeginSection());
  Status s = AddPages(first, count, data);
  Status e = EndSection();
  return s.ok() ? e : s;
}

bool PushRestoreChannel::IsSent(PageId page) const {
  if (page.block >= sent_.size() || page.page >= state_.ram_blocks[page.block].page_count()) return false;
  return (sent_[page.block][page.page / 64].load(std::memory_order_acquire) >> (page.page % 64)) & 1;
}

std::vector<PageId> PushRestoreChannel::RequestedPages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requested_;
}

Status PushRestoreChannel::Finish() {
  HLT_RETURN_IF_ERROR(Sticky());
  Status s;
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    ended_ = true;
    s = writer_.WriteRamEnd();
    if (!options_.lazy && s.ok()) s = writer_.WriteDeviceState();
    if (s.ok()) s = writer_.WriteEof();
    if (!options_.lazy && s.ok()) s = writer_.WriteVmdesc();
    if (s.ok()) s = writer_.Flush();
    bytes_flushed_ = sink_.bytes_written();
  }
  if (!s.ok()) return WriteFailed(s);
  s = options_.lazy ? WaitForShut() : WaitForPeerClose();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.total_us = MicrosBetween(t0_, Clock::now());
  }
  return s;
}

Status PushRestoreChannel::WaitForShut() {
  std::unique_lock<std::mutex> lock(mu_);
  const bool done = cv_.wait_for(lock, std::chrono::milliseconds(options_.shut_timeout_ms),
                                 [&] { return shut_.has_value() || rp_ended_ || failed_.load(); });
  if (failed_.load()) return error_;
  if (!done) {
    lock.unlock();
    Fail(Status::IoError("destination sent no SHUT within " + std::to_string(options_.shut_timeout_ms) +
                         " ms after the end of the stream"));
    return status();
  }
  if (!shut_) {
    lock.unlock();
    Fail(Status::IoError("destination closed the connection after the end of the stream without SHUT"));
    return status();
  }
  if (*shut_ != 0) {
    const uint32_t v = *shut_;
    lock.unlock();
    Fail(Status::Aborted("destination reported a failed load (SHUT " + std::to_string(v) + ")"));
    return status();
  }
  return Status::Ok();
}

Status PushRestoreChannel::WaitForPeerClose() {
  // QEMU's precopy loader reads one byte after EOF looking for VMDESC; half-closing ends that wait either way.
  shutdown(fd_, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.close_timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      Fail(Status::IoError("destination kept the channel open " + std::to_string(options_.close_timeout_ms) +
                           " ms after the end of the stream"));
      return status();
    }
    pollfd pfd{fd_, POLLIN, 0};
    const int pr = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return Status::IoError("poll", errno);
    if (pr == 0) continue;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return Status::Ok();
  }
}

PushRestoreStats PushRestoreChannel::stats(bool latency_percentiles) const {
  PushRestoreStats out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = stats_;
    if (package_pong_) out.connect_to_running_us = MicrosBetween(t0_, *package_pong_);
  }
  if (latency_percentiles) {
    const LatencySummary lat = request_latency_.Summary();
    out.request_latency_p50_us = lat.p50_ns / 1000;
    out.request_latency_p99_us = lat.p99_ns / 1000;
    out.request_latency_max_us = lat.max_ns / 1000;
  }
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    out.request_pages = request_pages_;
    out.preload_pages = preload_pages_;
    out.pushed_pages = pushed_pages_;
    out.zero_pages = zero_pages_;
    out.sections = sections_;
    out.bytes_sent = sink_.bytes_written();
  }
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    out.throttle_waits = throttle_waits_;
  }
  return out;
}

}  // namespace halite::qemu
