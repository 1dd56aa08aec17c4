// The postcopy source: one thread writes the stream, a second reads the return path and queues requests.
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "halite/qemu/qemu_byte_io.h"
#include "halite/qemu/qemu_restore_source.h"
#include "halite/qemu/qemu_return_path.h"
#include "halite/qemu/qemu_stream_writer.h"
#include "qemu_clock.h"

namespace halite::qemu {
namespace {

constexpr uint32_t kEarlyPing = 1;
constexpr uint32_t kPackagePing = 0x52554e00;  // "RUN\0": answered right before POSTCOPY_RUN is processed

struct Request {
  std::string block_name;
  uint64_t offset;
  uint32_t length;
  Clock::time_point received;
};

// What the return-path thread learned, shared with the writer thread under `mu`.
struct ReturnPathState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Request> requests;
  std::optional<uint32_t> shut;
  bool ended = false;  // stream ended or failed
  Status error;
  std::optional<Clock::time_point> package_pong;
};

void ReturnPathThread(int fd, const std::atomic<bool>* stop, ReturnPathState* rp) {
  FdSource src(fd, 0, stop);
  ReturnPathReader reader(&src);
  for (;;) {
    auto msg = reader.Next();
    std::lock_guard<std::mutex> lock(rp->mu);
    if (!msg.has_value()) {
      rp->error = msg.error();
      rp->ended = true;
      rp->cv.notify_all();
      return;
    }
    if (!msg->has_value()) {
      rp->ended = true;
      rp->cv.notify_all();
      return;
    }
    ReturnPathMessage& m = **msg;
    switch (m.type) {
      case ReturnPathType::kReqPages:
      case ReturnPathType::kReqPagesId:
        rp->requests.push_back(Request{std::move(m.block_name), m.offset, m.length, Clock::now()});
        break;
      case ReturnPathType::kPong:
        if (m.value == kPackagePing) rp->package_pong = Clock::now();
        break;
      case ReturnPathType::kShut:
        rp->shut = m.value;
        break;
      default:
        rp->error = Status::Unsupported("return path: unexpected " + std::string(ReturnPathTypeName(
                                                                         static_cast<uint16_t>(m.type))) +
                                        " message (postcopy recovery is not supported)");
        rp->ended = true;
        rp->cv.notify_all();
        return;
    }
    rp->cv.notify_all();
  }
}

uint64_t Percentile(std::vector<uint64_t>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

class PostcopyDriver {
 public:
  PostcopyDriver(int fd, const SavedVmState& state, RestorePageSource& pages, const PostcopyRestoreOptions& options,
                 PostcopyRestoreStats* stats)
      : fd_(fd), state_(state), pages_(pages), options_(options), stats_(stats),
        sink_(fd, "restore stream", 256 * 1024, options.stall_timeout_ms),
        writer_(&sink_, &state, MigrationStreamWriterOptions{true, 4096}) {}

  Status Run() {
    t0_ = Clock::now();
    claimed_.resize(state_.ram_blocks.size());
    for (size_t i = 0; i < claimed_.size(); ++i) claimed_[i].assign((state_.ram_blocks[i].page_count() + 63) / 64, 0);
    std::thread rp_thread(ReturnPathThread, fd_, &stop_, &rp_);
    Status s = RunWriter();
    if (s.ok()) s = WaitForShut();
    if (!s.ok()) {
      // Unblock a destination waiting on us and the return-path thread waiting on it.
      shutdown(fd_, SHUT_RDWR);
    }
    stop_ = true;
    rp_thread.join();
    stats_->total_us = MicrosSince(t0_);
    stats_->bytes_sent = sink_.bytes_written();
    stats_->request_latency_p50_us = Percentile(latencies_, 0.5);
    stats_->request_latency_p99_us = Percentile(latencies_, 0.99);
    stats_->request_latency_max_us = latencies_.empty() ? 0 : latencies_.back();
    return s;
  }

 private:
  Status DestinationGone() {
    std::lock_guard<std::mutex> lock(rp_.mu);
    return DestinationGoneLocked();
  }
  Status DestinationGoneLocked() {
    std::string why = "destination closed the connection after " + std::to_string(writer_.pages_sent()) + " of " +
                      std::to_string(writer_.total_pages()) + " pages (did QEMU exit?)";
    if (!rp_.error.ok()) {
      why += ": " + rp_.error.message();
      if (rp_.error.sys_errno() != 0) why += std::string(" (") + strerror(rp_.error.sys_errno()) + ")";
    }
    if (rp_.shut && *rp_.shut != 0) {
      return Status::Aborted("destination reported a failed load (SHUT " + std::to_string(*rp_.shut) + ") after " +
                             std::to_string(writer_.pages_sent()) + " pages");
    }
    return Status::IoError(why);
  }

  // A write error usually means QEMU went away; the return path then says why more precisely.
  Status WriteFailed(const Status& s) {
    std::unique_lock<std::mutex> lock(rp_.mu);
    rp_.cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return rp_.ended; });
    if (rp_.ended) return DestinationGoneLocked().WithContext(s.message());
    return s;
  }

  Status RunWriter() {
    uint64_t summary = options_.pagesize_summary;
    if (summary == 0) {
      summary = 4096;
      for (const auto& b : state_.ram_blocks) summary |= b.page_size;
    }
    for (const auto& b : state_.ram_blocks) {
      if (b.page_size != 0 && b.page_size != 4096) {
        return Status::Unsupported("RAMBlock " + b.name + " uses " + fmt::format("{:#x}", b.page_size) +
                                   "-byte pages: lazy restore of huge-page-backed memory is not supported");
      }
    }
    Status s = Prologue(summary);
    if (!s.ok()) return s.code() == StatusCode::kIoError ? WriteFailed(s) : s;
    stats_->connect_to_package_us = MicrosSince(t0_);

    for (;;) {
      s = ServeRequests();
      if (!s.ok()) return s.code() == StatusCode::kIoError ? WriteFailed(s) : s;
      if (writer_.pages_sent() == writer_.total_pages()) break;
      bool pushed = false;
      const bool throttled = options_.max_queued_push_pages != 0 && QueuedPages() > options_.max_queued_push_pages;
      if (throttled) {
        // Let the destination drain; come back at once for a request.
        std::unique_lock<std::mutex> lock(rp_.mu);
        rp_.cv.wait_for(lock, std::chrono::microseconds(500), [&] { return !rp_.requests.empty() || rp_.ended; });
        if (rp_.ended && rp_.requests.empty()) return DestinationGoneLocked();
        continue;
      }
      if (options_.push_in_background || idle_) {
        s = PushSection(&pushed);
        if (!s.ok()) return s.code() == StatusCode::kIoError ? WriteFailed(s) : s;
      }
      if (!pushed) {
        std::unique_lock<std::mutex> lock(rp_.mu);
        const bool got = rp_.cv.wait_for(lock, std::chrono::milliseconds(options_.idle_request_wait_ms),
                                         [&] { return !rp_.requests.empty() || rp_.ended; });
        if (!got) idle_ = true;  // no request for a while: the guest's startup faults are over, push the rest
      }
      {
        std::lock_guard<std::mutex> lock(rp_.mu);
        if (rp_.ended && rp_.requests.empty()) return DestinationGoneLocked();
      }
    }
    s = writer_.WriteRamEnd();
    if (s.ok()) s = writer_.WriteEof();
    if (s.ok()) s = writer_.Flush();
    if (!s.ok()) return s.code() == StatusCode::kIoError ? WriteFailed(s) : s;
    return Status::Ok();
  }

  Status Prologue(uint64_t summary) {
    HLT_RETURN_IF_ERROR(writer_.WriteHeader());
    HLT_RETURN_IF_ERROR(writer_.WriteConfiguration());
    HLT_RETURN_IF_ERROR(writer_.WriteOpenReturnPath());
    HLT_RETURN_IF_ERROR(writer_.WritePing(kEarlyPing));
    HLT_RETURN_IF_ERROR(writer_.WritePostcopyAdvise(summary));
    HLT_RETURN_IF_ERROR(writer_.WriteRamStart());
    HLT_RETURN_IF_ERROR(writer_.WriteDiscardAll());
    // Preload after the discard (which would wipe it) and before LISTEN: placed directly, never faulted on.
    for (const PageRun& run : options_.preload) {
      std::vector<PageId> ids;
      HLT_RETURN_IF_ERROR(CollectRun(run, &ids));
      for (size_t i = 0; i < ids.size(); i += options_.push_section_pages) {
        const size_t n = std::min<size_t>(options_.push_section_pages, ids.size() - i);
        HLT_RETURN_IF_ERROR(SendSection(std::span(ids).subspan(i, n)));
        stats_->preload_pages += n;
      }
    }
    HLT_RETURN_IF_ERROR(writer_.WritePackaged(true, kPackagePing));
    return writer_.Flush();
  }

  // Unsent, not yet collected pages of a run, clipped to its block. Collected pages are claimed so overlapping
  // runs (hints, the sweep, a request's run) never put a page into a section twice.
  Status CollectRun(const PageRun& run, std::vector<PageId>* ids) {
    if (run.first.block >= state_.ram_blocks.size()) {
      return Status::Internal("page run names block " + std::to_string(run.first.block) + " of " +
                              std::to_string(state_.ram_blocks.size()));
    }
    std::vector<uint64_t>& bits = claimed_[run.first.block];
    const uint64_t n = state_.ram_blocks[run.first.block].page_count();
    for (uint64_t p = run.first.page; p < n && p < run.first.page + run.count; ++p) {
      const PageId id{run.first.block, p};
      const uint64_t mask = uint64_t{1} << (p % 64);
      if ((bits[p / 64] & mask) || writer_.IsSent(id)) continue;
      bits[p / 64] |= mask;
      ids->push_back(id);
    }
    return Status::Ok();
  }

  Status SendSection(std::span<const PageId> ids) {
    if (ids.empty()) return Status::Ok();
    HLT_RETURN_IF_ERROR(writer_.BeginRamPart());
    for (const PageId& id : ids) {
      bool zero = false;
      HLT_RETURN_IF_ERROR(pages_.ReadPage(id, page_buf_, &zero));
      if (zero) {
        HLT_RETURN_IF_ERROR(writer_.WriteZeroPage(id));
        ++stats_->zero_pages;
      } else {
        HLT_RETURN_IF_ERROR(writer_.WritePage(id, page_buf_));
      }
    }
    HLT_RETURN_IF_ERROR(writer_.EndRamSection());
    HLT_RETURN_IF_ERROR(writer_.Flush());
    in_flight_.emplace_back(sink_.bytes_written(), ids.size());
    in_flight_pages_ += ids.size();
    return Status::Ok();
  }

  // Pages written to the socket that the destination has not read yet.
  uint64_t QueuedPages() {
    int outq = 0;
    if (ioctl(fd_, SIOCOUTQ, &outq) != 0) return 0;  // not a socket: no way to tell, do not throttle
    const uint64_t consumed = sink_.bytes_written() - std::min<uint64_t>(sink_.bytes_written(), static_cast<uint64_t>(outq));
    while (!in_flight_.empty() && in_flight_.front().first <= consumed) {
      in_flight_pages_ -= in_flight_.front().second;
      in_flight_.pop_front();
    }
    return in_flight_pages_;
  }

  Status ServeRequests() {
    for (;;) {
      Request req;
      {
        std::lock_guard<std::mutex> lock(rp_.mu);
        if (rp_.requests.empty()) return Status::Ok();
        req = std::move(rp_.requests.front());
        rp_.requests.pop_front();
      }
      idle_ = false;
      ++stats_->requests;
      if (stats_->requests == 1) stats_->pages_sent_before_first_request = writer_.pages_sent();
      const int block = state_.FindBlock(req.block_name);
      if (block < 0) {
        return Status::Corrupt("return path: page request for unknown RAMBlock '" + req.block_name + "'");
      }
      const uint64_t block_pages = state_.ram_blocks[block].page_count();
      const uint64_t first = req.offset / kTargetPageSize;
      const uint64_t last = (req.offset + req.length - 1) / kTargetPageSize;
      if (req.offset % kTargetPageSize != 0 || last >= block_pages) {
        return Status::Corrupt("return path: page request " + fmt::format("{:#x}", req.offset) + "+" + fmt::format("{:#x}", req.length) +
                               " outside RAMBlock " + req.block_name + " (" + fmt::format("{:#x}", block_pages * kTargetPageSize) +
                               " bytes)");
      }
      std::vector<PageId> ids;
      for (uint64_t p = first; p <= last; ++p) {
        const PageId id{static_cast<uint32_t>(block), p};
        pages_.OnPageRequested(id);
        if (!writer_.IsSent(id)) ids.push_back(id);  // the faulting pages go first
      }
      // The faulting pages themselves were checked against IsSent above; claim them like any collected page.
      for (const PageId& id : ids) {
        claimed_[id.block][id.page / 64] |= uint64_t{1} << (id.page % 64);
      }
      if (ids.empty()) {
        // Already sent (usually still in flight in an earlier section): answering again would send it twice.
        ++stats_->requests_already_sent;
        continue;
      }
      const PageRun run = pages_.RunForFault(ids.front(), options_.request_run_pages, block_pages);
      HLT_RETURN_IF_ERROR(CollectRun(run, &ids));
      HLT_RETURN_IF_ERROR(SendSection(ids));
      stats_->request_pages += ids.size();
      latencies_.push_back(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - req.received).count()));
    }
  }

  // Next pages to push: the source's hints first, then an address-order sweep.
  Status PushSection(bool* pushed) {
    std::vector<PageId> ids;
    while (ids.size() < options_.push_section_pages) {
      if (cur_run_.count == 0) {
        PageRun next;
        if (hints_left_ && pages_.NextPushRun(&next)) {
          cur_run_ = next;
        } else {
          hints_left_ = false;
          // Sweep: the next unsent page in address order.
          while (sweep_.block < state_.ram_blocks.size() &&
                 (sweep_.page >= state_.ram_blocks[sweep_.block].page_count() || writer_.IsSent(sweep_))) {
            if (sweep_.page >= state_.ram_blocks[sweep_.block].page_count()) {
              ++sweep_.block;
              sweep_.page = 0;
            } else {
              ++sweep_.page;
            }
          }
          if (sweep_.block >= state_.ram_blocks.size()) break;
          cur_run_ = PageRun{sweep_, options_.push_section_pages};
          sweep_.page += options_.push_section_pages;  // the run now covers these
        }
      }
      const uint32_t take = std::min<uint32_t>(cur_run_.count,
                                               static_cast<uint32_t>(options_.push_section_pages - ids.size()));
      // CollectRun may add fewer (pages already sent, or past the block end); the run advances by what it covered.
      HLT_RETURN_IF_ERROR(CollectRun(PageRun{cur_run_.first, take}, &ids));
      cur_run_.first.page += take;
      cur_run_.count -= take;
    }
    if (ids.empty()) {
      *pushed = false;
      return Status::Ok();
    }
    Pace(ids.size() * kTargetPageSize);
    HLT_RETURN_IF_ERROR(SendSection(ids));
    stats_->pushed_pages += ids.size();
    *pushed = true;
    return Status::Ok();
  }

  void Pace(uint64_t bytes) {
    if (options_.push_rate_limit_bytes_per_sec == 0) return;
    pushed_bytes_ += bytes;
    const double due_s = static_cast<double>(pushed_bytes_) / static_cast<double>(options_.push_rate_limit_bytes_per_sec);
    const auto due = t0_ + std::chrono::microseconds(static_cast<int64_t>(due_s * 1e6));
    // Sleep in small steps, waking early when a request arrives (requests are never rate limited).
    std::unique_lock<std::mutex> lock(rp_.mu);
    rp_.cv.wait_until(lock, due, [&] { return !rp_.requests.empty() || rp_.ended; });
  }

  Status WaitForShut() {
    std::unique_lock<std::mutex> lock(rp_.mu);
    // Requests can still arrive for pages that were in flight; they need no answer.
    const bool done = rp_.cv.wait_for(lock, std::chrono::milliseconds(options_.shut_timeout_ms),
                                      [&] { return rp_.shut.has_value() || rp_.ended; });
    stats_->requests += rp_.requests.size();
    stats_->requests_already_sent += rp_.requests.size();
    rp_.requests.clear();
    if (rp_.package_pong) {
      stats_->connect_to_running_us = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(*rp_.package_pong - t0_).count());
    }
    if (!done) {
      return Status::IoError("destination sent no SHUT within " + std::to_string(options_.shut_timeout_ms) +
                             " ms after the end of the stream");
    }
    if (!rp_.shut) return DestinationGoneLocked();
    if (*rp_.shut != 0) {
      return Status::Aborted("destination reported a failed load (SHUT " + std::to_string(*rp_.shut) + ")");
    }
    return Status::Ok();
  }

  int fd_;
  const SavedVmState& state_;
  RestorePageSource& pages_;
  const PostcopyRestoreOptions& options_;
  PostcopyRestoreStats* stats_;
  FdSink sink_;
  MigrationStreamWriter writer_;
  ReturnPathState rp_;
  std::atomic<bool> stop_{false};
  Clock::time_point t0_;
  std::vector<uint64_t> latencies_;
  uint8_t page_buf_[kTargetPageSize];
  PageRun cur_run_;
  std::deque<std::pair<uint64_t, uint64_t>> in_flight_;  // (stream offset at section end, pages) not yet read
  uint64_t in_flight_pages_ = 0;
  std::vector<std::vector<uint64_t>> claimed_;  // per block: pages put into a section (== sent once it is written)
  bool hints_left_ = true;
  PageId sweep_;
  bool idle_ = false;
  uint64_t pushed_bytes_ = 0;
};

}  // namespace

PageRun RestorePageSource::RunForFault(PageId page, uint32_t default_run, uint64_t block_pages) {
  const uint32_t run = std::max<uint32_t>(default_run, 1);
  const uint64_t start = page.page - page.page % run;
  return PageRun{PageId{page.block, start}, static_cast<uint32_t>(std::min<uint64_t>(run, block_pages - start))};
}

Status RunPostcopyRestore(int fd, const SavedVmState& state, RestorePageSource& pages,
                          const PostcopyRestoreOptions& options, PostcopyRestoreStats* stats) {
  PostcopyRestoreStats local;
  if (stats == nullptr) stats = &local;
  *stats = PostcopyRestoreStats{};
  PostcopyDriver driver(fd, state, pages, options, stats);
  return driver.Run();
}

}  // namespace halite::qemu
