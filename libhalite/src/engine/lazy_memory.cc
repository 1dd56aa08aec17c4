// LazyMemory: userfaultfd-backed guest memory. The sink half puts pages in with UFFDIO_COPY/ZEROPAGE; the
// handler half reads faults and events and calls the engine.
#include "halite/lazy_memory.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/page_bitmap.h"
#include "engine/userfaultfd.h"

namespace halite {
namespace {

constexpr uint64_t kPage = format::kPageSize;
// How long a copy keeps retrying while the address space is changing (an UNMAP or REMOVE event not yet read).
constexpr auto kEagainPatience = std::chrono::seconds(10);

std::string Errno(int e) { return std::strerror(e); }

}  // namespace

class HALITE_HIDDEN LazyMemory::Impl final : public PageSink {
 public:
  struct Area {
    uint8_t* base = nullptr;
    uint64_t size = 0;
    uint64_t first = 0;  // global number of its first page
    int memfd = -1;
    bool owned = false;
    bool registered = false;
    bool zeropage = false;
  };

  Impl(std::vector<Region> regions, LazyMemoryOptions options, uint64_t total_pages)
      : regions_(std::move(regions)), options_(std::move(options)), discarded_(total_pages), present_(total_pages) {}
  ~Impl() override;

  Status Init(std::span<void* const> bases);
  Status Serve(RestoreEngine& engine);
  void Stop();

  // PageSink
  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override;
  bool IsPresent(PageRef page) const override {
    uint64_t g = areas_[page.region].first + page.page;
    return present_.Test(g) || discarded_.Test(g);
  }

  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  Status WaitForError(std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !status_.ok(); });
    return status_;
  }
  LazyMemoryStats Stats() const;

  std::vector<Region> regions_;
  std::vector<Area> areas_;
  std::string mode_;

 private:
  enum class Fill { kCopy, kZero };
  // Per region, the span [first page, end page) a batch filled: woken all at once when the batch is in.
  using WakeSpans = std::vector<std::pair<uint64_t, uint64_t>>;
  // Fills [page, page+count) of `region` by copy or zero page, skipping pages found populated (EEXIST) or
  // gone (unmapped). Without `batch`, wakes every thread waiting on the range; with it, widens the region's span
  // there and leaves the waking to WakeBatch.
  Status FillRange(uint32_t region, uint64_t page, uint64_t count, const uint8_t* src, Fill how,
                   WakeSpans* batch = nullptr);
  Status WakeBatch(const WakeSpans& batch);
  void HandlerThread();
  void OnPageFault(const engine::UffdMessage& m);
  void OnDiscard(uint64_t start, uint64_t end);
  // A discarded page reads as zeros, like fresh anonymous memory; wakes the thread that faulted on it.
  void ZeroDiscardedPage(uint32_t region, uint64_t page_addr);
  void RecordError(const Status& s);
  bool Locate(uint64_t address, PageRef* ref) const;

  LazyMemoryOptions options_;
  engine::AtomicBitmap discarded_;  // removed or unmapped by the owner: never installed from the checkpoint
  engine::AtomicBitmap present_;    // populated before Attach
  int uffd_ = -1;
  int stop_fd_ = -1;
  RestoreEngine* engine_ = nullptr;
  std::vector<std::thread> handlers_;
  std::mutex read_mu_;  // one handler at a time reads a message (and records a discard before the next read)

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Status status_;

  struct Counters {
    std::atomic<uint64_t> faults{0}, faults_done{0}, write_faults{0}, discarded_faults{0}, copy_ioctls{0},
        zeropage_ioctls{0}, wake_ioctls{0}, eexist{0}, eagain_retries{0}, remove_events{0}, unmap_events{0}, errors{0};
  } c_;
};

LazyMemory::Impl::~Impl() {
  Stop();
  for (auto& a : areas_) {
    if (a.owned && a.base) munmap(a.base, a.size);
    if (a.memfd >= 0) close(a.memfd);
  }
  if (uffd_ >= 0) close(uffd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

Status LazyMemory::Impl::Init(std::span<void* const> bases) {
  bool shmem = options_.backing == LazyBacking::kMemfd;
  if (!bases.empty()) {
    // Attached memory may be shmem whatever the options say; asking for the shmem feature costs nothing.
    shmem = true;
  }
  HLT_ASSIGN_OR_RETURN(engine::Userfaultfd u, engine::OpenUserfaultfd(shmem));
  uffd_ = u.fd;
  mode_ = u.mode;
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return Status::IoError("eventfd failed: " + Errno(errno), errno);
  uint64_t first = 0;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const Region& r = regions_[i];
    Area a;
    a.size = r.size;
    a.first = first;
    first += r.page_count();
    if (!bases.empty()) {
      a.base = static_cast<uint8_t*>(bases[i]);
      if (reinterpret_cast<uintptr_t>(a.base) % kPage != 0) {
        areas_.push_back(a);
        return Status::InvalidArgument("region \"" + r.name + "\": the mapping is not page aligned");
      }
    } else if (options_.backing == LazyBacking::kMemfd) {
      a.memfd = memfd_create(("halite:" + r.name).c_str(), MFD_CLOEXEC);
      if (a.memfd < 0 || ftruncate(a.memfd, off_t(r.size)) != 0) {
        int e = errno;
        areas_.push_back(a);
        return Status::IoError("region \"" + r.name + "\": memfd of " + std::to_string(r.size) + " bytes: " + Errno(e),
                               e);
      }
      void* p = mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, a.memfd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        areas_.push_back(a);
        return Status::IoError("region \"" + r.name + "\": mmap of the memfd: " + Errno(e), e);
      }
      a.base = static_cast<uint8_t*>(p);
      a.owned = true;
    } else {
      void* p = mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        areas_.push_back(a);
        return Status::IoError("region \"" + r.name + "\": mmap of " + std::to_string(r.size) + " bytes: " + Errno(e),
                               e);
      }
      a.base = static_cast<uint8_t*>(p);
      a.owned = true;
    }
    areas_.push_back(a);
    Area& ar = areas_.back();
    Status s = engine::UffdRegister(uffd_, ar.base, ar.size, &ar.zeropage);
    if (!s.ok()) return s.WithContext("region \"" + r.name + "\"");
    ar.registered = true;
    if (!bases.empty()) {
      // Pages the caller populated before attaching are its own: never overwritten.
      std::vector<unsigned char> vec(r.page_count());
      if (mincore(ar.base, ar.size, vec.data()) != 0) {
        return Status::IoError("region \"" + r.name + "\": mincore: " + Errno(errno), errno);
      }
      for (uint64_t p = 0; p < vec.size(); ++p) {
        if (vec[p] & 1) present_.Set(ar.first + p);
      }
    }
  }
  return Status::Ok();
}

bool LazyMemory::Impl::Locate(uint64_t address, PageRef* ref) const {
  for (uint32_t i = 0; i < areas_.size(); ++i) {
    uint64_t b = reinterpret_cast<uint64_t>(areas_[i].base);
    if (address >= b && address < b + areas_[i].size) {
      *ref = PageRef{i, (address - b) / kPage};
      return true;
    }
  }
  return false;
}

Status LazyMemory::Impl::FillRange(uint32_t region, uint64_t page, uint64_t count, const uint8_t* src, Fill how,
                                   WakeSpans* batch) {
  const Area& a = areas_[region];
  if (page + count > a.size / kPage || count == 0) {
    return Status::InvalidArgument("region \"" + regions_[region].name + "\": pages " + std::to_string(page) + ".." +
                                   std::to_string(page + count) + " are outside it");
  }
  static const std::vector<uint8_t> kZeros(64 * kPage);
  uint64_t dst = reinterpret_cast<uint64_t>(a.base) + page * kPage;
  uint64_t len = count * kPage;
  uint64_t off = 0;
  bool wake = false;
  const bool batched = batch != nullptr;
  auto patience_end = std::chrono::steady_clock::now() + kEagainPatience;
  while (off < len) {
    uint64_t g = a.first + page + off / kPage;
    if (discarded_.Test(g)) {  // the owner threw it away: do not bring the old content back
      off += kPage;
      continue;
    }
    // Up to the next discarded page, so a discard that arrives meanwhile splits the run at the next call.
    uint64_t n = kPage;
    while (off + n < len && !discarded_.Test(g + n / kPage)) n += kPage;
    engine::UffdFill r;
    if (how == Fill::kCopy) {
      r = engine::UffdCopy(uffd_, dst + off, src + off, n, !batched);
      c_.copy_ioctls.fetch_add(1, std::memory_order_relaxed);
    } else if (a.zeropage) {
      r = engine::UffdZeroPage(uffd_, dst + off, n, !batched);
      c_.zeropage_ioctls.fetch_add(1, std::memory_order_relaxed);
    } else {
      r = engine::UffdCopy(uffd_, dst + off, kZeros.data(), std::min<uint64_t>(n, kZeros.size()), !batched);
      c_.copy_ioctls.fetch_add(1, std::memory_order_relaxed);
    }
    off += r.done;
    if (r.err == 0 || r.done > 0) continue;
    switch (r.err) {
      case EEXIST:  // populated behind our back (another mapping of the memfd, a racing discard+touch)
        c_.eexist.fetch_add(1, std::memory_order_relaxed);
        wake = true;
        off += kPage;
        break;
      case EAGAIN:  // an UNMAP/REMOVE event is pending: let a handler thread read it, then go on
        c_.eagain_retries.fetch_add(1, std::memory_order_relaxed);
        if (std::chrono::steady_clock::now() > patience_end) {
          return Status::IoError(
                     "region \"" + regions_[region].name + "\" page " + std::to_string(page + off / kPage) +
                         ": userfaultfd kept answering EAGAIN (address space changing; are handlers running?)",
                     EAGAIN)
              .set_retryable(true);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        break;
      case ENOENT:  // the range was unmapped: nothing to fill any more
        for (uint64_t p = off / kPage; p < count; ++p) discarded_.Set(a.first + page + p);
        off = len;
        break;
      case ESRCH:
        return Status::Aborted("region \"" + regions_[region].name + "\": the process's address space is gone");
      default:
        return Status::IoError("region \"" + regions_[region].name + "\" page " + std::to_string(page + off / kPage) +
                                   ": " + (how == Fill::kCopy ? "UFFDIO_COPY" : "UFFDIO_ZEROPAGE") + ": " +
                                   Errno(r.err),
                               r.err);
    }
  }
  if (batched) {
    auto& span = (*batch)[region];
    span.first = std::min(span.first, page);
    span.second = std::max(span.second, page + count);
  } else if (wake) {
    engine::UffdWake(uffd_, dst, len);
    c_.wake_ioctls.fetch_add(1, std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status LazyMemory::Impl::WakeBatch(const WakeSpans& batch) {
  // One wake over the span of the batch's pages: threads waiting on pages of the span that are not installed
  // (other blocks) wake too, find their page still missing and fault again, which costs them a retry only.
  for (size_t r = 0; r < areas_.size(); ++r) {
    auto [lo, hi] = batch[r];
    if (lo >= hi) continue;
    int e = engine::UffdWake(uffd_, reinterpret_cast<uint64_t>(areas_[r].base) + lo * kPage, (hi - lo) * kPage);
    c_.wake_ioctls.fetch_add(1, std::memory_order_relaxed);
    if (e != 0 && e != ENOENT) {
      return Status::IoError("region \"" + regions_[r].name + "\": UFFDIO_WAKE: " + Errno(e), e);
    }
  }
  return Status::Ok();
}

// Every batch is the same here: a copy into the mapping does not queue behind anything.
Status LazyMemory::Impl::Install(std::span<const PageInstall> batch, InstallPriority, size_t* runs_installed) {
  *runs_installed = 0;
  WakeSpans spans(areas_.size(), {UINT64_MAX, 0});
  Status s;
  for (const PageInstall& run : batch) {
    if (run.first.region >= areas_.size()) {
      s = Status::InvalidArgument("no region " + std::to_string(run.first.region));
    } else if (!run.zero() && run.data.size() != run.count * kPage) {
      s = Status::InvalidArgument("install: data is not count pages");
    } else {
      s = FillRange(run.first.region, run.first.page, run.count, run.zero() ? nullptr : run.data.data(),
                    run.zero() ? Fill::kZero : Fill::kCopy, &spans);
    }
    if (!s.ok()) break;
    ++*runs_installed;
  }
  // Wake what went in even when a run failed: its faulting threads must not wait for a retry.
  Status woke = WakeBatch(spans);
  return s.ok() ? woke : s;
}

void LazyMemory::Impl::RecordError(const Status& s) {
  c_.errors.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = s;
  }
  cv_.notify_all();
}

void LazyMemory::Impl::OnDiscard(uint64_t start, uint64_t end) {
  for (const Area& a : areas_) {
    uint64_t b = reinterpret_cast<uint64_t>(a.base);
    uint64_t lo = std::max(start, b), hi = std::min(end, b + a.size);
    // Only whole pages are discarded; the kernel reports page-aligned ranges.
    for (uint64_t addr = (lo + kPage - 1) & ~(kPage - 1); addr + kPage <= hi; addr += kPage) {
      discarded_.Set(a.first + (addr - b) / kPage);
    }
  }
}

void LazyMemory::Impl::ZeroDiscardedPage(uint32_t region, uint64_t page_addr) {
  static const std::vector<uint8_t> kZeroPage(kPage);
  engine::UffdFill r = areas_[region].zeropage ? engine::UffdZeroPage(uffd_, page_addr, kPage)
                                               : engine::UffdCopy(uffd_, page_addr, kZeroPage.data(), kPage);
  // Already there (touched again, or filled by a racing handler): the faulting thread only needs waking.
  if (r.err != 0) engine::UffdWake(uffd_, page_addr, kPage);
}

void LazyMemory::Impl::OnPageFault(const engine::UffdMessage& m) {
  c_.faults.fetch_add(1, std::memory_order_relaxed);
  // Counted when the handler is done with the fault (the faulting thread may resume a little earlier).
  struct Done {
    std::atomic<uint64_t>& n;
    ~Done() { n.fetch_add(1, std::memory_order_release); }
  } done{c_.faults_done};
  if (m.write) c_.write_faults.fetch_add(1, std::memory_order_relaxed);
  PageRef ref;
  if (!Locate(m.address, &ref)) {
    RecordError(Status::Internal("userfaultfd fault at " + std::to_string(m.address) +
                                 ", outside every registered region (mremap of lazy memory is not supported)"));
    return;
  }
  uint64_t page_addr = m.address & ~(kPage - 1);
  if (discarded_.Test(areas_[ref.region].first + ref.page)) {
    // Discarded by its owner: like fresh anonymous memory, it reads as zeros.
    c_.discarded_faults.fetch_add(1, std::memory_order_relaxed);
    ZeroDiscardedPage(ref.region, page_addr);
    return;
  }
  for (;;) {
    Result<FaultOutcome> r = engine_->HandleFault(ref);
    if (r) {
      if (discarded_.Test(areas_[ref.region].first + ref.page)) {
        // Discarded while its block was on the way in: the fill skipped it, and the faulting thread still waits.
        c_.discarded_faults.fetch_add(1, std::memory_order_relaxed);
        ZeroDiscardedPage(ref.region, page_addr);
      } else if (r->kind == FaultKind::kPresent) {
        // Installed by someone else; the copy that did it woke us already unless it happened before we queued.
        engine::UffdWake(uffd_, page_addr, kPage);
        c_.wake_ioctls.fetch_add(1, std::memory_order_relaxed);
      }
      return;
    }
    FaultErrorAction action =
        options_.on_fault_error ? options_.on_fault_error(ref, r.error()) : FaultErrorAction::kHold;
    if (action == FaultErrorAction::kRetry) {
      c_.errors.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    RecordError(
        r.error().WithContext(action == FaultErrorAction::kHold ? "faulting thread held" : "page filled with zeros"));
    if (action == FaultErrorAction::kZeroFill) {
      Status s = FillRange(ref.region, ref.page, 1, nullptr, Fill::kZero);
      if (!s.ok()) RecordError(s);
    }
    return;
  }
}

void LazyMemory::Impl::HandlerThread() {
  pollfd fds[2] = {{uffd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      RecordError(Status::IoError("poll on the userfaultfd failed: " + Errno(errno), errno));
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      RecordError(Status::IoError("the userfaultfd reported an error condition"));
      return;
    }
    // Several handlers poll the same descriptor: whoever reads first takes the message, the others see EAGAIN.
    // The kernel lets an madvise or munmap go on as soon as its REMOVE/UNMAP event is read, so its caller can
    // touch the discarded pages at once and another handler may read that fault while the discard is still
    // being recorded. Reading and recording under one lock orders them: a fault read after a discard event
    // always sees the discard (else it would be refilled with the old content).
    Result<engine::UffdMessage> m = [&] {
      std::lock_guard<std::mutex> lock(read_mu_);
      Result<engine::UffdMessage> msg = engine::UffdRead(uffd_);
      if (msg && (msg->kind == engine::UffdMessage::kRemove || msg->kind == engine::UffdMessage::kUnmap)) {
        (msg->kind == engine::UffdMessage::kRemove ? c_.remove_events : c_.unmap_events)
            .fetch_add(1, std::memory_order_relaxed);
        OnDiscard(msg->start, msg->end);
      }
      return msg;
    }();
    if (!m) {
      RecordError(m.error());
      return;
    }
    if (m->kind == engine::UffdMessage::kPageFault) OnPageFault(*m);
  }
}

Status LazyMemory::Impl::Serve(RestoreEngine& engine) {
  if (engine_) return Status::InvalidArgument("LazyMemory::Serve called twice");
  engine_ = &engine;
  unsigned n = std::max(1u, options_.handler_threads);
  for (unsigned i = 0; i < n; ++i) handlers_.emplace_back([this] { HandlerThread(); });
  return Status::Ok();
}

void LazyMemory::Impl::Stop() {
  if (!handlers_.empty()) {
    uint64_t one = 1;
    ssize_t w = write(stop_fd_, &one, sizeof one);
    (void)w;
    for (auto& t : handlers_) t.join();
    handlers_.clear();
  }
  // Without handlers, an munmap or madvise of still-registered memory would wait forever for someone to read its
  // event: hand the memory back to the kernel's ordinary fault handling.
  for (auto& a : areas_) {
    if (a.registered) engine::UffdUnregister(uffd_, a.base, a.size);
    a.registered = false;
  }
}

LazyMemoryStats LazyMemory::Impl::Stats() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  LazyMemoryStats s;
  s.faults = get(c_.faults);
  s.faults_done = c_.faults_done.load(std::memory_order_acquire);
  s.write_faults = get(c_.write_faults);
  s.discarded_faults = get(c_.discarded_faults);
  s.copy_ioctls = get(c_.copy_ioctls);
  s.zeropage_ioctls = get(c_.zeropage_ioctls);
  s.wake_ioctls = get(c_.wake_ioctls);
  s.eexist = get(c_.eexist);
  s.eagain_retries = get(c_.eagain_retries);
  s.remove_events = get(c_.remove_events);
  s.unmap_events = get(c_.unmap_events);
  s.errors = get(c_.errors);
  return s;
}

// --- public shell ---

namespace {

Result<std::unique_ptr<LazyMemory::Impl>> MakeImpl(std::span<const Region> regions, LazyMemoryOptions options,
                                                   std::span<void* const> bases) {
  if (regions.empty()) return Status::InvalidArgument("LazyMemory needs at least one region");
  uint64_t total = 0;
  for (const auto& r : regions) {
    if (r.host_page_size != kPage) {
      return Status::InvalidArgument("region \"" + r.name + "\": host page size " + std::to_string(r.host_page_size) +
                                     " (hugepage-backed lazy memory is not implemented)");
    }
    if (r.size == 0 || r.size % kPage != 0) {
      return Status::InvalidArgument("region \"" + r.name + "\": size must be a non-zero multiple of 4096");
    }
    total += r.page_count();
  }
  auto impl = std::make_unique<LazyMemory::Impl>(std::vector<Region>(regions.begin(), regions.end()),
                                                 std::move(options), total);
  HLT_RETURN_IF_ERROR(impl->Init(bases));
  return impl;
}

}  // namespace

LazyMemory::LazyMemory(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LazyMemory::~LazyMemory() = default;

Status LazyMemory::Probe(std::string* mode) {
  auto u = engine::OpenUserfaultfd(false);
  if (!u) return u.error();
  if (mode) *mode = u->mode;
  close(u->fd);
  return Status::Ok();
}

Result<std::unique_ptr<LazyMemory>> LazyMemory::Create(std::span<const Region> regions, LazyMemoryOptions options) {
  HLT_ASSIGN_OR_RETURN(auto impl, MakeImpl(regions, std::move(options), {}));
  return std::unique_ptr<LazyMemory>(new LazyMemory(std::move(impl)));
}

Result<std::unique_ptr<LazyMemory>> LazyMemory::Attach(std::span<const Region> regions, std::span<void* const> bases,
                                                       LazyMemoryOptions options) {
  if (bases.size() != regions.size()) return Status::InvalidArgument("Attach needs one mapping per region");
  for (void* b : bases) {
    if (!b) return Status::InvalidArgument("Attach: a null mapping");
  }
  HLT_ASSIGN_OR_RETURN(auto impl, MakeImpl(regions, std::move(options), bases));
  return std::unique_ptr<LazyMemory>(new LazyMemory(std::move(impl)));
}

PageSink& LazyMemory::sink() { return *impl_; }
Status LazyMemory::Serve(RestoreEngine& engine) { return impl_->Serve(engine); }
void LazyMemory::Stop() { impl_->Stop(); }
size_t LazyMemory::region_count() const { return impl_->areas_.size(); }
uint8_t* LazyMemory::base(uint32_t region) const { return impl_->areas_[region].base; }
uint64_t LazyMemory::size(uint32_t region) const { return impl_->areas_[region].size; }
int LazyMemory::memfd(uint32_t region) const { return impl_->areas_[region].memfd; }
std::string LazyMemory::mode() const { return impl_->mode_; }
Status LazyMemory::status() const { return impl_->status(); }
Status LazyMemory::WaitForError(std::chrono::milliseconds timeout) const { return impl_->WaitForError(timeout); }
LazyMemoryStats LazyMemory::Stats() const { return impl_->Stats(); }

}  // namespace halite
