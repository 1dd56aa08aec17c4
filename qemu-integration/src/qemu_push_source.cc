// The push-style migration source, composed of its three parts (push/): the section writer, the return-path
// listener and the request workers, sharing one failure.
#include "halite/qemu/qemu_push_source.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "push/channel_health.h"
#include "push/request_workers.h"
#include "push/return_path_listener.h"
#include "push/section_writer.h"

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t MicrosBetween(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(b - a).count());
}

constexpr uint32_t kEarlyPing = 1;
constexpr uint32_t kPackagePing = 0x52554e00;  // "RUN\0": answered right before POSTCOPY_RUN is processed
constexpr uint32_t kListenPing = 0x4c534e00;   // "LSN\0": answered once guest RAM is registered with userfaultfd

}  // namespace

struct PushRestoreChannel::Impl {
  Impl(int fd, const SavedVmState& state, PushRestoreOptions options, PageRequestHandler handler)
      : fd(fd),
        state(state),
        options(options),
        health(fd),
        stream(fd, state, options.lazy, options.stall_timeout_ms, [this](const Status& s) { return WriteFailed(s); }),
        workers(health, stream, state, std::move(handler)),
        listener(fd, state, health, stream, workers, kPackagePing, kListenPing) {}

  // A write error usually means QEMU went away or gave up; the return path says which. Fails the channel.
  Status WriteFailed(const Status& s);
  // Background sections wait while the destination has more than max_queued_push_pages unread.
  void Throttle();
  Status WaitForShut();
  Status WaitForPeerClose();

  const int fd;
  const SavedVmState& state;
  const PushRestoreOptions options;
  Clock::time_point t0 = Clock::now();
  std::atomic<bool> guest_started{false};
  std::atomic<bool> threads_stopped{false};
  push::ChannelHealth health;
  push::SectionWriter stream;
  push::RequestWorkers workers;
  push::ReturnPathListener listener;
  // With health.Lock():
  uint64_t connect_to_package_us = 0;
  uint64_t total_us = 0;
  uint64_t resume_handshake_us = 0;
  std::atomic<uint64_t> throttle_waits{0};
};

Status PushRestoreChannel::Impl::WriteFailed(const Status& s) {
  if (s.code() != StatusCode::kIoError) {
    health.Fail(s);
    return health.status();
  }
  Status why;
  {
    auto lock = health.Lock();
    health.WaitFor(lock, std::chrono::milliseconds(200), [&] { return listener.ended_locked(); });
    if (health.failed()) return health.error_locked();
    const auto& shut = listener.shut_locked();
    if (shut && *shut != 0) {
      why = Status::Aborted(fmt::format("destination reported a failed load (SHUT {}) after {} pages", *shut,
                                        stream.pages_sent()));
    } else {
      why = Status::IoError(fmt::format("destination stopped reading after {} of {} pages (did QEMU exit or reject "
                                        "the stream?): {}",
                                        stream.pages_sent(), stream.total_pages(), s.message()),
                            s.sys_errno());
    }
  }
  health.Fail(why);
  return health.status();
}

void PushRestoreChannel::Impl::Throttle() {
  if (options.max_queued_push_pages == 0) return;
  bool waited = false;
  while (!health.failed() && !threads_stopped.load(std::memory_order_relaxed) &&
         stream.UnreadPages() > options.max_queued_push_pages) {
    waited = true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (waited) throttle_waits.fetch_add(1, std::memory_order_relaxed);
}

Status PushRestoreChannel::Impl::WaitForShut() {
  std::optional<uint32_t> shut;
  bool done;
  {
    auto lock = health.Lock();
    done = health.WaitFor(lock, std::chrono::milliseconds(options.shut_timeout_ms),
                          [&] { return listener.shut_locked().has_value() || listener.ended_locked(); });
    if (health.failed()) return health.error_locked();
    shut = listener.shut_locked();
  }
  if (!done) {
    health.Fail(Status::IoError(fmt::format("destination sent no SHUT within {} ms after the end of the stream",
                                            options.shut_timeout_ms)));
  } else if (!shut) {
    health.Fail(Status::IoError("destination closed the connection after the end of the stream without SHUT"));
  } else if (*shut != 0) {
    health.Fail(Status::Aborted(fmt::format("destination reported a failed load (SHUT {})", *shut)));
  }
  return health.status();
}

Status PushRestoreChannel::Impl::WaitForPeerClose() {
  // QEMU's precopy loader reads one byte after EOF looking for VMDESC; half-closing ends that wait either way.
  shutdown(fd, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.close_timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      health.Fail(Status::IoError(fmt::format("destination kept the channel open {} ms after the end of the stream",
                                              options.close_timeout_ms)));
      return health.status();
    }
    pollfd pfd{fd, POLLIN, 0};
    const int pr = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return Status::IoError("poll", errno);
    if (pr == 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return Status::Ok();
  }
}

PushRestoreChannel::PushRestoreChannel(int fd, const SavedVmState& state, PushRestoreOptions options,
                                       PageRequestHandler handler)
    : impl_(std::make_unique<Impl>(fd, state, options, std::move(handler))) {}

PushRestoreChannel::~PushRestoreChannel() { StopThreads(); }

void PushRestoreChannel::StopThreads() {
  impl_->threads_stopped = true;
  impl_->workers.Stop();
  impl_->listener.Stop();
}

Status PushRestoreChannel::status() const { return impl_->health.status(); }
bool PushRestoreChannel::failed() const { return impl_->health.failed(); }
void PushRestoreChannel::Abort(const Status& why) { impl_->health.Fail(why); }
bool PushRestoreChannel::IsSent(PageId page) const { return impl_->stream.IsSent(page); }
uint64_t PushRestoreChannel::pages_sent() const { return impl_->stream.pages_sent(); }
uint64_t PushRestoreChannel::total_pages() const { return impl_->stream.total_pages(); }
bool PushRestoreChannel::guest_started() const { return impl_->guest_started.load(std::memory_order_acquire); }
uint64_t PushRestoreChannel::requests() const { return impl_->listener.requests(); }

bool PushRestoreChannel::WaitForFailure(int timeout_ms) {
  auto lock = impl_->health.Lock();
  impl_->health.WaitFor(lock, std::chrono::milliseconds(timeout_ms), [] { return false; });
  return impl_->health.failed();
}

std::vector<PageId> PushRestoreChannel::RequestedPages() const {
  auto lock = impl_->health.Lock();
  return impl_->listener.requested_locked();
}

Status PushRestoreChannel::Begin() {
  Impl& c = *impl_;
  c.t0 = Clock::now();
  uint64_t summary = c.options.pagesize_summary;
  if (summary == 0) {
    summary = kTargetPageSize;
    for (const auto& b : c.state.ram_blocks) summary |= b.page_size;
  }
  const bool lazy = c.options.lazy;
  Status s = c.stream.WriteRecords([&](MigrationStreamWriter& w) {
    HLT_RETURN_IF_ERROR(w.WriteHeader());
    HLT_RETURN_IF_ERROR(w.WriteConfiguration());
    if (lazy) {
      HLT_RETURN_IF_ERROR(w.WriteOpenReturnPath());
      HLT_RETURN_IF_ERROR(w.WritePing(kEarlyPing));
      HLT_RETURN_IF_ERROR(w.WritePostcopyAdvise(summary));
    }
    HLT_RETURN_IF_ERROR(w.WriteRamStart());
    // Required by QEMU 7.2 between ADVISE and LISTEN; pages sent after it are kept.
    if (lazy) HLT_RETURN_IF_ERROR(w.WriteDiscardAll());
    return Status::Ok();
  });
  if (lazy) {
    c.listener.Start();
    c.workers.Start(c.options.request_workers);
  }
  return s;
}

Status PushRestoreChannel::BeginResume(int timeout_ms) {
  Impl& c = *impl_;
  if (!c.options.lazy) return Status::Internal("BeginResume is for a lazy (postcopy) restore");
  c.t0 = Clock::now();
  const auto deadline = c.t0 + std::chrono::milliseconds(timeout_ms);
  auto left = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  c.listener.Start();
  c.workers.Start(c.options.request_workers);
  // No header: QEMU's loader goes on reading the stream it was reading, now from this channel.
  HLT_RETURN_IF_ERROR(c.stream.WriteRecords([&](MigrationStreamWriter& w) {
    HLT_RETURN_IF_ERROR(w.BeginResumedStream());
    for (uint32_t b = 0; b < c.state.ram_blocks.size(); ++b) HLT_RETURN_IF_ERROR(w.WriteRecvBitmapRequest(b));
    return Status::Ok();
  }));
  std::vector<std::optional<std::string>> bitmaps;
  {
    auto lock = c.health.Lock();
    auto all_in = [&] {
      const auto& got = c.listener.recv_bitmaps_locked();
      if (got.size() < c.state.ram_blocks.size()) return false;
      return std::all_of(got.begin(), got.end(), [](const auto& b) { return b.has_value(); });
    };
    c.health.WaitFor(lock, left(), [&] { return all_in() || c.listener.ended_locked(); });
    if (c.health.failed()) return c.health.error_locked();
    if (!all_in()) {
      return Status::IoError(fmt::format("QEMU sent no received-pages bitmap for every RAMBlock within {} ms of the "
                                         "recovery channel connecting",
                                         timeout_ms));
    }
    bitmaps = c.listener.recv_bitmaps_locked();
  }
  for (uint32_t b = 0; b < bitmaps.size(); ++b) c.stream.MarkReceived(b, *bitmaps[b]);
  HLT_RETURN_IF_ERROR(c.stream.WriteRecords([](MigrationStreamWriter& w) {
    return w.WritePostcopyResume();
  }));
  {
    auto lock = c.health.Lock();
    c.health.WaitFor(lock, left(),
                     [&] { return c.listener.resume_ack_locked().has_value() || c.listener.ended_locked(); });
    if (c.health.failed()) return c.health.error_locked();
    const auto& ack = c.listener.resume_ack_locked();
    if (!ack) return Status::IoError(fmt::format("QEMU did not acknowledge POSTCOPY_RESUME within {} ms", timeout_ms));
    // QEMU's MIGRATION_RESUME_ACK_VALUE is 1; anything else is a refusal.
    if (*ack != 1) return Status::Aborted(fmt::format("QEMU answered POSTCOPY_RESUME with {:#x}", *ack));
    c.resume_handshake_us = MicrosBetween(c.t0, Clock::now());
  }
  c.guest_started.store(true, std::memory_order_release);
  c.workers.Go();
  return Status::Ok();
}

Status PushRestoreChannel::StartGuest() {
  Impl& c = *impl_;
  if (!c.options.lazy) return Status::Internal("StartGuest is for a lazy (postcopy) restore");
  HLT_RETURN_IF_ERROR(c.health.Sticky());
  HLT_RETURN_IF_ERROR(c.stream.WriteRecords([](MigrationStreamWriter& w) {
    return w.WritePackaged(true, kPackagePing, kListenPing);
  }));
  c.guest_started.store(true, std::memory_order_release);
  {
    auto lock = c.health.Lock();
    c.connect_to_package_us = MicrosBetween(c.t0, Clock::now());
  }
  c.workers.Go();
  return Status::Ok();
}

Status PushRestoreChannel::WaitUntilListening(int timeout_ms) {
  Impl& c = *impl_;
  if (!guest_started()) return Status::Internal("WaitUntilListening before StartGuest");
  auto lock = c.health.Lock();
  const bool seen = c.health.WaitFor(lock, std::chrono::milliseconds(timeout_ms),
                                     [&] { return c.listener.listen_pong_locked() || c.listener.ended_locked(); });
  if (c.health.failed()) return c.health.error_locked();
  if (!seen || !c.listener.listen_pong_locked()) {
    return Status::IoError(fmt::format("destination did not answer the PING after POSTCOPY_LISTEN within {} ms",
                                       timeout_ms));
  }
  return Status::Ok();
}

void PushRestoreChannel::PlaceBlocksDirectly(const std::vector<bool>& blocks, std::function<bool(PageId)> placed) {
  impl_->stream.RefuseBlocks(blocks);
  impl_->workers.SetPlacedElsewhere(blocks, std::move(placed));
}

bool PushRestoreChannel::IsRefused(uint32_t block) const { return impl_->stream.IsRefused(block); }

Result<std::unique_ptr<RamSection>> PushRestoreChannel::OpenSection(InstallPriority priority) {
  Impl& c = *impl_;
  HLT_RETURN_IF_ERROR(c.health.Sticky());
  SectionKind kind = SectionKind::kBackgroundPush;  // eager: everything is a push, never throttled
  if (c.options.lazy) {
    if (!guest_started()) {
      kind = SectionKind::kPreload;
    } else if (priority == InstallPriority::kUrgent) {
      kind = SectionKind::kRequestAnswer;
    } else {
      c.Throttle();
    }
  }
  HLT_ASSIGN_OR_RETURN(auto section, c.stream.Open(kind));
  // A failure while this thread waited for the stream: nothing may go out after it.
  HLT_RETURN_IF_ERROR(c.health.Sticky());
  return section;
}

Status PushRestoreChannel::SendPages(PageId first, uint64_t count, const uint8_t* data, InstallPriority priority) {
  HLT_ASSIGN_OR_RETURN(auto section, OpenSection(priority));
  Status s = section->AddPages(first, count, data);
  Status closed = section->Close();
  return s.ok() ? closed : s;
}

Status PushRestoreChannel::Finish() {
  Impl& c = *impl_;
  HLT_RETURN_IF_ERROR(c.health.Sticky());
  const bool lazy = c.options.lazy;
  HLT_RETURN_IF_ERROR(c.stream.WriteRecords(
      [&](MigrationStreamWriter& w) {
        HLT_RETURN_IF_ERROR(w.WriteRamEnd());
        if (!lazy) HLT_RETURN_IF_ERROR(w.WriteDeviceState());
        HLT_RETURN_IF_ERROR(w.WriteEof());
        if (!lazy) HLT_RETURN_IF_ERROR(w.WriteVmdesc());
        return Status::Ok();
      },
      /*end_of_stream=*/true));
  Status s = lazy ? c.WaitForShut() : c.WaitForPeerClose();
  auto lock = c.health.Lock();
  c.total_us = MicrosBetween(c.t0, Clock::now());
  return s;
}

PushRestoreStats PushRestoreChannel::stats(bool latency_percentiles) const {
  const Impl& c = *impl_;
  PushRestoreStats out;
  {
    auto lock = c.health.Lock();
    out.connect_to_package_us = c.connect_to_package_us;
    out.total_us = c.total_us;
    if (const auto& pong = c.listener.package_pong_locked()) out.connect_to_running_us = MicrosBetween(c.t0, *pong);
    out.requests_already_sent = c.workers.already_sent_locked();
    out.requests_after_end = c.workers.after_end_locked();
    out.pages_sent_before_first_request = c.listener.pages_sent_before_first_request_locked();
    out.request_sizes = c.listener.request_sizes_locked();
    out.resume_handshake_us = c.resume_handshake_us;
  }
  out.requests = c.listener.requests();
  if (latency_percentiles) {
    const LatencySummary lat = c.workers.latency();
    out.request_latency_p50_us = lat.p50_ns / 1000;
    out.request_latency_p99_us = lat.p99_ns / 1000;
    out.request_latency_max_us = lat.max_ns / 1000;
  }
  const push::SectionCounts n = c.stream.counts();
  out.request_pages = n.request_pages;
  out.preload_pages = n.preload_pages;
  out.pushed_pages = n.pushed_pages;
  out.zero_pages = n.zero_pages;
  out.sections = n.sections;
  out.bytes_sent = n.bytes_sent;
  out.resume_received_pages = c.stream.pages_received_before();
  out.throttle_waits = c.throttle_waits.load(std::memory_order_relaxed);
  return out;
}

}  // namespace halite::qemu
