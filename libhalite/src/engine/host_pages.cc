// Host pages larger than 4 KiB (a region's host_page_size: hugetlbfs-backed guest memory), installed whole.
//
// Why whole, once, and with every zero page: QEMU 7.2's postcopy destination (migration/ram.c,
// ram_load_postcopy) gathers the 4 KiB pages of such a host page in a temporary page and places it with one
// UFFDIO_COPY when the number of pages it received for it reaches the number the host page holds. A page sent
// twice would make it place the host page early, with stale bytes where a page is still missing; a zero page
// left out would make it never place it; pages of another host page arriving in between fail the load ("Non-same
// host page detected"). A hugetlbfs mapping takes no smaller UFFDIO_COPY either. So each such host page goes to
// the sink in one Install call, as runs covering it exactly, in page order, exactly once.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/engine_impl.h"

namespace halite {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

void RestoreEngine::Impl::InitHostPages() {
  uint64_t count = 0;
  for (const Region& r : reader_.regions()) {
    const uint64_t unit = std::max<uint64_t>(1, r.host_page_size / kPage);
    region_unit_.push_back(unit);
    region_host_page_base_.push_back(count);
    if (unit > 1) {
      any_large_ = true;
      count += (r.page_count() + unit - 1) / unit;
    }
  }
  host_page_state_.reset(new std::atomic<uint8_t>[std::max<uint64_t>(count, 1)]);
  for (uint64_t i = 0; i < count; ++i) host_page_state_[i].store(kHpFree, std::memory_order_relaxed);
}

bool RestoreEngine::Impl::InLargeHostPage(uint64_t g) const {
  return any_large_ && region_unit_[RefOf(g).region] > 1;
}

RestoreEngine::Impl::HostPage RestoreEngine::Impl::HostPageOf(uint64_t g) const {
  const PageRef ref = RefOf(g);
  const uint64_t unit = region_unit_[ref.region];
  const uint64_t k = ref.page / unit;
  const uint64_t first = region_first_[ref.region] + k * unit;
  return HostPage{first, std::min(unit, region_first_[ref.region + 1] - first), region_host_page_base_[ref.region] + k};
}

bool RestoreEngine::Impl::BlockHasLargeHostPages(uint32_t b) const {
  if (!any_large_) return false;
  for (const BlockMember& m : reader_.BlockMembers(b)) {
    if (InLargeHostPage(m.page)) return true;
  }
  return false;
}

bool RestoreEngine::Impl::ClaimHostPage(const HostPage& hp) {
  uint8_t expected = kHpFree;
  return host_page_state_[hp.index].compare_exchange_strong(expected, kHpClaimed, std::memory_order_acq_rel);
}

void RestoreEngine::Impl::SetHostPageState(const HostPage& hp, HostPageState s) {
  // Under the stripe lock, as SetBlockState: a waiter that saw "claimed" and is about to sleep cannot miss this.
  Stripe& st = stripes_[hp.index % kStripes];
  {
    std::lock_guard<std::mutex> lock(st.mu);
    host_page_state_[hp.index].store(s, std::memory_order_release);
  }
  st.cv.notify_all();
}

void RestoreEngine::Impl::WaitWhileHostPageClaimed(const HostPage& hp) {
  Stripe& st = stripes_[hp.index % kStripes];
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] { return host_page_state_[hp.index].load(std::memory_order_acquire) != kHpClaimed; });
}

Status RestoreEngine::Impl::HostPageError(const HostPage& hp) const {
  std::lock_guard<std::mutex> lock(failures_mu_);
  auto it = broken_host_pages_.find(hp.index);
  if (it != broken_host_pages_.end()) return it->second;
  return Status::Internal(fmt::format("host page at global page {} failed without a recorded error", hp.first));
}

void RestoreEngine::Impl::DropPresentHostPages(std::span<const HostPage> hps, std::vector<HostPage>* todo) {
  // A destination holds host pages whole, so one present page makes its host page present.
  for (const HostPage& hp : hps) {
    bool present = false;
    for (uint64_t p = hp.first; p < hp.first + hp.count && !present; ++p) present = sink_.IsPresent(RefOf(p));
    if (!present) {
      todo->push_back(hp);
      continue;
    }
    for (uint64_t p = hp.first; p < hp.first + hp.count; ++p) installed_.Set(p);
    c_.pages_skipped_present.fetch_add(hp.count, std::memory_order_relaxed);
    SetHostPageState(hp, kHpInstalled);
  }
}

Status RestoreEngine::Impl::ReadOtherHostPageBlocks(std::span<const HostPage> todo, uint32_t have,
                                                    std::vector<DecodedBlock>* extra) {
  for (const HostPage& hp : todo) {
    for (uint64_t p = hp.first; p < hp.first + hp.count; ++p) {
      const PageLocation loc = reader_.Locate(p);
      if (loc.kind != PageKind::kStored || loc.block == have) continue;
      if (std::any_of(extra->begin(), extra->end(), [&](const DecodedBlock& e) { return e.block == loc.block; })) {
        continue;
      }
      const BlockInfo& info = reader_.blocks()[loc.block];
      DecodedBlock e{loc.block, std::vector<uint8_t>(info.raw_length())};
      const uint64_t t = NowNs();
      Status s = ReadWithRetries(loc.block, e.raw);
      c_.read_ns.fetch_add(NowNs() - t, std::memory_order_relaxed);
      if (!s.ok()) {
        return s.WithContext(fmt::format("block {} at offset {:#x} ({} bytes), read for the host page at page {} "
                                         "of region \"{}\"",
                                         loc.block, info.offset, info.stored_length, RefOf(hp.first).page,
                                         reader_.regions()[RefOf(hp.first).region].name));
      }
      c_.host_page_extra_reads.fetch_add(1, std::memory_order_relaxed);
      c_.bytes_read.fetch_add(info.stored_length, std::memory_order_relaxed);
      c_.bytes_decompressed.fetch_add(info.raw_length(), std::memory_order_relaxed);
      extra->push_back(std::move(e));
    }
  }
  return Status::Ok();
}

void RestoreEngine::Impl::CutHostPageRuns(std::span<const HostPage> todo,
                                          const std::function<const uint8_t*(uint64_t)>& bytes_of,
                                          std::vector<PageInstall>* runs, std::vector<size_t>* runs_end) {
  // Zero runs, and data runs taken straight from a decoded block when their bytes lie there one after the other
  // (the writer stores a host page's pages in page order), else gathered into `staging`, sized before any span
  // into it is taken.
  struct Cut {
    uint64_t first, count;
    const uint8_t* direct;  // contiguous bytes, or null
    size_t staging_page;    // SIZE_MAX for zero runs and direct runs
  };
  thread_local std::vector<Cut> cuts;
  thread_local std::vector<uint8_t> staging;
  thread_local std::vector<const uint8_t*> src;
  cuts.clear();
  size_t gathered = 0;
  for (const HostPage& hp : todo) {
    src.assign(hp.count, nullptr);
    for (uint64_t i = 0; i < hp.count; ++i) src[i] = bytes_of(hp.first + i);
    for (uint64_t i = 0; i < hp.count;) {
      const bool zero = src[i] == nullptr;
      uint64_t j = i + 1;
      bool contiguous = true;
      while (j < hp.count && (src[j] == nullptr) == zero) {
        contiguous = contiguous && (zero || src[j] == src[j - 1] + kPage);
        ++j;
      }
      Cut c{hp.first + i, j - i, nullptr, SIZE_MAX};
      if (!zero && contiguous) c.direct = src[i];
      if (!zero && !contiguous) {
        c.staging_page = gathered;
        gathered += j - i;
      }
      cuts.push_back(c);
      i = j;
    }
    runs_end->push_back(cuts.size());
  }
  staging.resize(gathered * kPage);
  runs->clear();
  for (const Cut& c : cuts) {
    std::span<const uint8_t> data;
    if (c.direct != nullptr) {
      data = std::span<const uint8_t>(c.direct, c.count * kPage);
    } else if (c.staging_page != SIZE_MAX) {
      uint8_t* dst = staging.data() + c.staging_page * kPage;
      for (uint64_t k = 0; k < c.count; ++k) std::memcpy(dst + k * kPage, bytes_of(c.first + k), kPage);
      data = std::span<const uint8_t>(dst, c.count * kPage);
    }
    runs->push_back(PageInstall{RefOf(c.first), c.count, data});
  }
}

void RestoreEngine::Impl::SettleHostPages(std::span<const HostPage> todo, std::span<const PageInstall> runs,
                                          std::span<const size_t> runs_end, size_t done, const Status& s) {
  size_t run = 0;
  for (size_t h = 0; h < todo.size(); ++h) {
    const HostPage& hp = todo[h];
    const size_t first_run = run, end_run = runs_end[h];
    run = end_run;
    if (end_run <= done) {
      uint64_t data_pages = 0;
      for (size_t r = first_run; r < end_run; ++r) data_pages += runs[r].zero() ? 0 : runs[r].count;
      for (uint64_t p = hp.first; p < hp.first + hp.count; ++p) installed_.Set(p);
      c_.pages_installed.fetch_add(data_pages, std::memory_order_relaxed);
      c_.zero_pages_installed.fetch_add(hp.count - data_pages, std::memory_order_relaxed);
      c_.host_pages_installed.fetch_add(1, std::memory_order_relaxed);
      SetHostPageState(hp, kHpInstalled);
    } else if (first_run >= done) {
      SetHostPageState(hp, kHpFree);  // nothing of it went in: a later fault or load offers it again
    } else {
      // Part of it went in: offering it again would install those pages twice. Its faults fail from now on.
      for (size_t r = first_run; r < done; ++r) {
        const uint64_t first = region_first_[runs[r].first.region] + runs[r].first.page;
        for (uint64_t k = 0; k < runs[r].count; ++k) installed_.Set(first + k);
      }
      const PageRef at = RefOf(hp.first);
      Status broken = s.WithContext(fmt::format("host page at page {} of region \"{}\" ({} pages) went in only in part",
                                                at.page, reader_.regions()[at.region].name, hp.count));
      {
        std::lock_guard<std::mutex> lock(failures_mu_);
        broken_host_pages_[hp.index] = broken;
      }
      SetHostPageState(hp, kHpBroken);
    }
  }
}

Status RestoreEngine::Impl::InstallHostPages(std::span<const HostPage> hps, uint32_t have,
                                             std::span<const uint8_t> have_raw, InstallPriority priority) {
  thread_local std::vector<HostPage> todo;
  todo.clear();
  DropPresentHostPages(hps, &todo);
  if (todo.empty()) return Status::Ok();

  // Stored pages in other blocks than `have` (a writer that split host pages, or deduplicated across them): read
  // each such block once, here.
  std::vector<DecodedBlock> extra;
  if (Status s = ReadOtherHostPageBlocks(todo, have, &extra); !s.ok()) {
    // The block's own state is left to whoever loads it; these host pages can be tried again.
    for (const HostPage& hp : todo) SetHostPageState(hp, kHpFree);
    return s;
  }
  auto bytes_of = [&](uint64_t p) -> const uint8_t* {
    const PageLocation loc = reader_.Locate(p);
    if (loc.kind != PageKind::kStored) return nullptr;
    if (loc.block == have) return have_raw.data() + uint64_t{loc.slot_in_block} * kPage;
    for (const DecodedBlock& e : extra) {
      if (e.block == loc.block) return e.raw.data() + uint64_t{loc.slot_in_block} * kPage;
    }
    return nullptr;  // not reached: every block needed was read above
  };

  // Runs covering each host page, then one Install call for all of them.
  thread_local std::vector<PageInstall> runs;
  std::vector<size_t> runs_end;  // per host page of todo: one past its last run
  CutHostPageRuns(todo, bytes_of, &runs, &runs_end);
  const uint64_t t = NowNs();
  size_t done = 0;
  Status s = sink_.Install(runs, priority, &done);
  c_.install_ns.fetch_add(NowNs() - t, std::memory_order_relaxed);
  done = s.ok() ? runs.size() : std::min(done, runs.size());
  c_.install_calls.fetch_add(s.ok() ? runs.size() : done + 1, std::memory_order_relaxed);
  SettleHostPages(todo, runs, runs_end, done, s);
  return s;
}

Status RestoreEngine::Impl::InstallBlockPages(uint32_t b, std::span<const uint8_t> raw, InstallPriority priority,
                                              uint64_t fault_page) {
  thread_local std::vector<Todo> todo;
  thread_local std::vector<uint8_t> staging;
  std::vector<HostPage> touched;
  todo.clear();
  for (const BlockMember& m : reader_.BlockMembers(b)) {
    if (InLargeHostPage(m.page)) {
      touched.push_back(HostPageOf(m.page));
      continue;
    }
    if (!claimed_.TrySet(m.page)) continue;  // installed or being installed through another path
    if (sink_.IsPresent(RefOf(m.page))) {
      installed_.Set(m.page);
      c_.pages_skipped_present.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    todo.push_back({m.page, m.slot});
  }
  std::sort(touched.begin(), touched.end(), [](const HostPage& x, const HostPage& y) { return x.first < y.first; });
  touched.erase(std::unique(touched.begin(), touched.end(),
                            [](const HostPage& x, const HostPage& y) { return x.index == y.index; }),
                touched.end());
  // Host pages another thread holds are that thread's to install (a fault waits for them by their state).
  std::vector<HostPage> mine;
  for (const HostPage& hp : touched) {
    if (ClaimHostPage(hp)) mine.push_back(hp);
  }
  auto release = [&](size_t from) {
    for (size_t i = from; i < mine.size(); ++i) SetHostPageState(mine[i], kHpFree);
  };
  // The faulting host page first, on its own: its thread waits for nothing else.
  if (fault_page != kNoPage) {
    auto it = std::find_if(mine.begin(), mine.end(), [&](const HostPage& hp) {
      return fault_page >= hp.first && fault_page < hp.first + hp.count;
    });
    if (it != mine.end()) {
      const HostPage hp = *it;
      mine.erase(it);
      Status s = InstallHostPages(std::span<const HostPage>(&hp, 1), b, raw, InstallPriority::kUrgent);
      if (!s.ok()) {
        release(0);
        for (const Todo& t : todo) claimed_.Clear(t.g);
        return s;
      }
    }
  }
  std::sort(todo.begin(), todo.end(), [](const Todo& x, const Todo& y) { return x.g < y.g; });
  Status s = InstallRuns(todo, raw, staging, priority);
  if (!s.ok()) {
    release(0);
    return s;
  }
  return InstallHostPages(mine, b, raw, priority);
}

Status RestoreEngine::Impl::HandleLargeFault(uint64_t g, uint64_t t, FaultOutcome* out) {
  const HostPage hp = HostPageOf(g);
  // The block that holds the host page's bytes: the faulting page's own, else the first stored page's. A host page
  // with none is all zero.
  uint32_t block = UINT32_MAX;
  const PageLocation own = reader_.Locate(g);
  if (own.kind == PageKind::kStored) {
    block = own.block;
  } else {
    for (uint64_t p = hp.first; p < hp.first + hp.count && block == UINT32_MAX; ++p) {
      const PageLocation loc = reader_.Locate(p);
      if (loc.kind == PageKind::kStored) block = loc.block;
    }
  }
  out->block = block;
  bool read = false, waited = false;
  for (;;) {
    switch (host_page_state_[hp.index].load(std::memory_order_acquire)) {
      case kHpInstalled:
        // Waiting for another thread's install of a zero host page costs no read: that is a present page.
        out->kind = read || (waited && block != UINT32_MAX) ? FaultKind::kBlocking : FaultKind::kPresent;
        out->joined = out->kind == FaultKind::kBlocking && !read;
        return Status::Ok();
      case kHpBroken:
        return HostPageError(hp);
      case kHpClaimed:
        WaitWhileHostPageClaimed(hp);
        waited = true;
        continue;
      default:
        break;
    }
    if (block == UINT32_MAX) {
      if (!ClaimHostPage(hp)) continue;
      HLT_RETURN_IF_ERROR(
          InstallHostPages(std::span<const HostPage>(&hp, 1), UINT32_MAX, {}, InstallPriority::kUrgent));
      out->kind = FaultKind::kZero;
      return Status::Ok();
    }
    const uint32_t st = block_state_[block].load(std::memory_order_acquire);
    if (st == kFailed) return BlockError(block);
    if (st != kLoaded) {
      // Loading the block installs this host page (first, when this thread loads it) and the others it holds.
      bool r = false, w = false;
      HLT_RETURN_IF_ERROR(EnsureBlock(block, Cause::kDemand, true, &r, &w, g, t));
      read = read || r;
      waited = waited || w;
      continue;
    }
    // The block is in but this host page is not (an earlier install of it failed and let it go): install it
    // alone, reading what it needs.
    if (!ClaimHostPage(hp)) continue;
    read = true;
    HLT_RETURN_IF_ERROR(
        InstallHostPages(std::span<const HostPage>(&hp, 1), UINT32_MAX, {}, InstallPriority::kUrgent));
  }
}

void RestoreEngine::Impl::SkipPresentHostPages() {
  for (uint32_t r = 0; r < reader_.regions().size(); ++r) {
    const uint64_t unit = region_unit_[r];
    if (unit <= 1) continue;
    for (uint64_t g = region_first_[r]; g < region_first_[r + 1]; g += unit) {
      const HostPage hp = HostPageOf(g);
      bool present = false;
      for (uint64_t p = hp.first; p < hp.first + hp.count && !present; ++p) present = sink_.IsPresent(RefOf(p));
      if (!present || !ClaimHostPage(hp)) continue;
      for (uint64_t p = hp.first; p < hp.first + hp.count; ++p) installed_.Set(p);
      c_.pages_present_at_start.fetch_add(hp.count, std::memory_order_relaxed);
      SetHostPageState(hp, kHpInstalled);
    }
  }
}

}  // namespace halite
