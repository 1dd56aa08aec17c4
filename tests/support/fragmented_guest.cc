#include "support/fragmented_guest.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <unordered_set>

#include "support/synthetic_memory.h"
#include "support/test_rng.h"

namespace halite::testing {
namespace {

constexpr uint64_t kPage = 4096;

// The images' generator (support/test_rng.h).
using Rng = TestRng;

enum class Use : uint8_t { kFree, kKernel, kCache, kText, kHeap, kStack };

// A virtual range of a process: the frames behind it, in virtual-address order.
struct Vma {
  Use use;
  std::vector<uint64_t> frames;
};

struct Process {
  std::vector<Vma> vmas;
  // Hot ranges as (vma, first index, count).
  struct Range {
    size_t vma, first, count;
  };
  std::vector<Range> hot;
};

// Hands out frames in extents from a scrambled free list.
class FrameAllocator {
 public:
  FrameAllocator(uint64_t first, uint64_t end, uint32_t max_extent, Rng& rng) {
    for (uint64_t f = first; f < end;) {
      uint64_t n = std::min<uint64_t>(uint64_t{1} << rng.Below(std::bit_width(max_extent)), end - f);
      extents_.push_back({f, n});
      f += n;
    }
    rng.Shuffle(extents_);
  }
  bool Empty() const { return next_ >= extents_.size() && left_ == 0; }
  uint64_t Take() {
    if (left_ == 0) {
      cur_ = extents_[next_].first;
      left_ = extents_[next_].count;
      ++next_;
    }
    --left_;
    return cur_++;
  }
  uint64_t remaining() const {
    uint64_t r = left_;
    for (size_t i = next_; i < extents_.size(); ++i) r += extents_[i].count;
    return r;
  }

 private:
  struct Extent {
    uint64_t first, count;
  };
  std::vector<Extent> extents_;
  size_t next_ = 0;
  uint64_t cur_ = 0, left_ = 0;
};

PageFlavor FlavorFor(Use use, Rng& rng) {
  switch (use) {
    case Use::kFree:
      return PageFlavor::kZero;
    case Use::kKernel: {
      uint64_t r = rng.Below(10);
      return r < 4   ? PageFlavor::kCode
             : r < 7 ? PageFlavor::kPointers
             : r < 9 ? PageFlavor::kSparse
                     : PageFlavor::kText;
    }
    case Use::kCache:
      return rng.Below(10) < 8 ? PageFlavor::kText : PageFlavor::kRandom;
    case Use::kText:
      return rng.Below(10) < 9 ? PageFlavor::kCode : PageFlavor::kDuplicate;
    case Use::kHeap: {
      uint64_t r = rng.Below(10);
      return r < 4   ? PageFlavor::kPointers
             : r < 7 ? PageFlavor::kSparse
             : r < 9 ? PageFlavor::kText
                     : PageFlavor::kRandom;
    }
    case Use::kStack:
      return PageFlavor::kSparse;
  }
  return PageFlavor::kZero;
}

std::string RunsText(const std::vector<uint64_t>& pages) {
  std::string out;
  char line[64];
  for (size_t i = 0; i < pages.size();) {
    size_t j = i + 1;
    while (j < pages.size() && pages[j] == pages[j - 1] + 1) ++j;
    if (j - i == 1) {
      std::snprintf(line, sizeof line, "%llu\n", (unsigned long long)pages[i]);
    } else {
      std::snprintf(line, sizeof line, "%llu %llu\n", (unsigned long long)pages[i], (unsigned long long)(j - i));
    }
    out += line;
    i = j;
  }
  return out;
}

Status WriteText(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::IoError(path + ": cannot create", errno);
  bool ok = std::fwrite(data, 1, size, f) == size;
  ok = std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::IoError(path + ": write failed", errno);
}

}  // namespace

FragmentedGuest GenerateFragmentedGuest(const FragmentedGuestOptions& o) {
  Rng rng(o.seed);
  FragmentedGuest g;
  const uint64_t n = o.pages;
  std::vector<Use> use(n, Use::kFree);
  std::vector<bool> zero(n, false);

  // Physical layout: kernel at the bottom, everything else from scrambled extents.
  uint64_t kernel = std::max<uint64_t>(1, uint64_t(double(n) * o.kernel_fraction));
  for (uint64_t f = 0; f < kernel; ++f) use[f] = Use::kKernel;
  FrameAllocator alloc(kernel, n, std::max(1u, o.max_extent_pages), rng);
  uint64_t cache = uint64_t(double(n) * o.page_cache_fraction);
  for (uint64_t i = 0; i < cache && !alloc.Empty(); ++i) use[alloc.Take()] = Use::kCache;

  // Processes: sizes vary (a few big ones); VMAs in address order: text, heap, anonymous mappings, stack.
  uint64_t process_pages = uint64_t(double(n) * o.process_fraction);
  std::vector<double> weight(o.processes);
  for (auto& w : weight) w = 0.3 + double(rng.Below(1000)) / 1000.0 * (rng.Chance(0.2) ? 4.0 : 1.0);
  double wsum = std::accumulate(weight.begin(), weight.end(), 0.0);
  std::vector<Process> procs(o.processes);
  for (uint32_t p = 0; p < o.processes; ++p) {
    uint64_t size = std::max<uint64_t>(16, uint64_t(double(process_pages) * weight[p] / wsum));
    uint64_t text = size / 8, stack = std::max<uint64_t>(4, size / 40);
    uint64_t heap = (size - text - stack) * 6 / 10, anon = size - text - stack - heap;
    for (auto [u, count] :
         {std::pair{Use::kText, text}, {Use::kHeap, heap}, {Use::kHeap, anon}, {Use::kStack, stack}}) {
      Vma v{u, {}};
      for (uint64_t i = 0; i < count && !alloc.Empty(); ++i) {
        uint64_t f = alloc.Take();
        use[f] = u;
        zero[f] = u != Use::kText && rng.Chance(o.heap_zero_fraction);
        v.frames.push_back(f);
      }
      if (!v.frames.empty()) procs[p].vmas.push_back(std::move(v));
    }
  }
  for (uint64_t f = 0; f < n; ++f) {
    if (use[f] == Use::kFree) zero[f] = true;
  }

  // Content.
  g.image.assign(n * kPage, 0);
  SyntheticMemory mem(o.seed ^ 0x5eed);
  for (uint64_t f = 0; f < n; ++f) {
    if (zero[f]) {
      ++g.zero_pages;
      continue;
    }
    PageFlavor fl = FlavorFor(use[f], rng);
    if (fl == PageFlavor::kZero) fl = PageFlavor::kSparse;
    uint8_t* page = g.image.data() + f * kPage;
    mem.MakePage(fl, page);
    // Keep `zero` true to the content: a restore counts what the bytes are, not what we meant them to be.
    if (std::all_of(page, page + kPage, [](uint8_t b) { return b == 0; })) {
      zero[f] = true;
      ++g.zero_pages;
    }
  }

  // VA hints: each process's frames in address order.
  for (const auto& p : procs) {
    std::vector<uint64_t> space;
    for (const auto& v : p.vmas) space.insert(space.end(), v.frames.begin(), v.frames.end());
    g.va_spaces.push_back(std::move(space));
  }

  // Hot ranges of the active processes: runs of 8..128 virtual pages until hot_fraction of each VMA.
  std::vector<uint32_t> order(o.processes);
  std::iota(order.begin(), order.end(), 0);
  rng.Shuffle(order);
  std::vector<uint32_t> active(order.begin(), order.begin() + std::min(o.active_processes, o.processes));
  for (uint32_t p : active) {
    for (size_t vi = 0; vi < procs[p].vmas.size(); ++vi) {
      size_t len = procs[p].vmas[vi].frames.size();
      size_t want = size_t(double(len) * o.hot_fraction);
      std::vector<bool> taken(len, false);
      size_t got = 0;
      for (int attempts = 0; got < want && attempts < 1000; ++attempts) {
        size_t count = std::min<size_t>({size_t(rng.Between(8, 128)), want - got, len});
        size_t first = rng.Below(len - std::min(len, count) + 1);
        bool clash = false;
        for (size_t i = first; i < first + count && !clash; ++i) clash = taken[i];
        // Leave room after each range: that is where the restore goes further.
        if (clash || (first + count < len && taken[first + count])) continue;
        for (size_t i = first; i < first + count; ++i) taken[i] = true;
        procs[p].hot.push_back({vi, first, count});
        got += count;
      }
      std::sort(procs[p].hot.begin(), procs[p].hot.end(), [](const Process::Range& a, const Process::Range& b) {
        return a.vma < b.vma || (a.vma == b.vma && a.first < b.first);
      });
    }
  }
  // Kernel hot pages: short runs anywhere in the kernel.
  std::vector<uint64_t> kernel_hot;
  for (uint64_t want = uint64_t(double(kernel) * o.kernel_hot_fraction); kernel_hot.size() < want;) {
    uint64_t first = rng.Below(kernel), count = rng.Between(1, 8);
    for (uint64_t f = first; f < std::min(kernel, first + count); ++f) kernel_hot.push_back(f);
  }

  // Runs the scheduler: each active process touches the next `slice` pages of its list, kernel pages in between.
  auto schedule = [&](std::vector<std::vector<GuestAccess>> lists, std::vector<GuestAccess> kern) {
    std::vector<GuestAccess> out;
    std::vector<size_t> pos(lists.size(), 0);
    size_t kpos = 0, live = lists.size();
    while (live > 0 || kpos < kern.size()) {
      live = 0;
      std::vector<size_t> turn(lists.size());
      std::iota(turn.begin(), turn.end(), 0);
      rng.Shuffle(turn);
      for (size_t i : turn) {
        size_t slice = rng.Between(o.slice_pages / 2, o.slice_pages * 3 / 2);
        for (size_t k = 0; k < slice && pos[i] < lists[i].size(); ++k) out.push_back(lists[i][pos[i]++]);
        if (pos[i] < lists[i].size()) ++live;
        for (size_t k = 0; k < 4 && kpos < kern.size(); ++k) out.push_back(kern[kpos++]);
      }
      if (lists.empty()) {
        while (kpos < kern.size()) out.push_back(kern[kpos++]);
      }
    }
    return out;
  };
  auto access = [&](uint64_t frame) {
    bool w = (use[frame] == Use::kHeap || use[frame] == Use::kStack) && rng.Chance(o.write_fraction);
    return GuestAccess{frame, w};
  };

  // Save time.
  {
    std::vector<std::vector<GuestAccess>> lists;
    for (uint32_t p : active) {
      std::vector<GuestAccess> l;
      for (const auto& r : procs[p].hot) {
        for (size_t i = r.first; i < r.first + r.count; ++i) l.push_back(access(procs[p].vmas[r.vma].frames[i]));
      }
      lists.push_back(std::move(l));
    }
    std::vector<GuestAccess> kern;
    for (uint64_t f : kernel_hot) kern.push_back({f, false});
    std::unordered_set<uint64_t> seen;
    for (const auto& a : schedule(std::move(lists), std::move(kern))) {
      if (seen.insert(a.page).second) g.save_trace.push_back(a.page);
    }
    g.save_hot_pages = g.save_trace.size();
  }

  // Restore time: most hot ranges again, a bit further, fresh allocations from free frames, repeats.
  {
    std::vector<uint64_t> free_frames;
    for (uint64_t f = 0; f < n; ++f) {
      if (use[f] == Use::kFree) free_frames.push_back(f);
    }
    std::vector<std::vector<GuestAccess>> lists;
    uint64_t again = 0;
    for (uint32_t p : active) {
      std::vector<GuestAccess> l;
      for (const auto& r : procs[p].hot) {
        if (!rng.Chance(o.restore_overlap)) continue;
        const auto& frames = procs[p].vmas[r.vma].frames;
        size_t extra = size_t(double(r.count) * o.restore_new_fraction / o.restore_overlap + 0.5);
        size_t end = std::min(frames.size(), r.first + r.count + extra);
        for (size_t i = r.first; i < end; ++i) {
          l.push_back(access(frames[i]));
          if (rng.Chance(0.2)) l.push_back(access(frames[i]));  // touched again soon after
        }
        again += r.count;
      }
      // Fresh allocations: the process's heap grows onto free frames, in runs.
      uint64_t fresh = uint64_t(double(again) * o.restore_zero_fraction / double(std::max<size_t>(1, active.size())));
      for (uint64_t k = 0; k < fresh && !free_frames.empty();) {
        uint64_t f = free_frames[rng.Below(free_frames.size())];
        for (uint64_t run = rng.Between(1, 16); run > 0 && k < fresh && f < n && use[f] == Use::kFree;
             --run, ++f, ++k) {
          l.push_back({f, true});
        }
      }
      lists.push_back(std::move(l));
    }
    std::vector<GuestAccess> kern;
    for (uint64_t f : kernel_hot) {
      if (rng.Chance(o.restore_overlap)) kern.push_back({f, false});
    }
    g.restore_trace = schedule(std::move(lists), std::move(kern));
    std::unordered_set<uint64_t> save(g.save_trace.begin(), g.save_trace.end()), seen;
    for (const auto& a : g.restore_trace) {
      if (!seen.insert(a.page).second) continue;
      ++g.restore_distinct;
      if (!zero[a.page]) ++g.restore_nonzero;
      if (save.count(a.page)) ++g.restore_in_save;
    }
  }
  return g;
}

std::string FragmentedGuest::SaveTraceText() const {
  return "# save-time access trace: pages in the order first touched\n" + RunsText(save_trace);
}

std::string FragmentedGuest::VaHintsText() const {
  std::string out = "# VA hints: one address space per process, frames in virtual-address order\n";
  for (size_t i = 0; i < va_spaces.size(); ++i) {
    if (i > 0) out += "\n";
    out += RunsText(va_spaces[i]);
  }
  return out;
}

std::string FragmentedGuest::RestoreTraceText() const {
  std::string out = "# restore-time accesses\n";
  char line[48];
  for (const auto& a : restore_trace) {
    std::snprintf(line, sizeof line, a.write ? "%llu w\n" : "%llu\n", (unsigned long long)a.page);
    out += line;
  }
  return out;
}

std::string FragmentedGuest::Describe() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%llu pages (%llu zero), save-time working set %llu pages, restore trace %zu accesses to %llu "
                "distinct pages (%llu non-zero, %llu of them in the save-time working set)",
                (unsigned long long)(image.size() / kPage), (unsigned long long)zero_pages,
                (unsigned long long)save_hot_pages, restore_trace.size(), (unsigned long long)restore_distinct,
                (unsigned long long)restore_nonzero, (unsigned long long)restore_in_save);
  return buf;
}

Status FragmentedGuest::WriteFiles(const std::string& dir) const {
  HLT_RETURN_IF_ERROR(WriteText(dir + "/image", image.data(), image.size()));
  std::string s = SaveTraceText(), v = VaHintsText(), r = RestoreTraceText();
  HLT_RETURN_IF_ERROR(WriteText(dir + "/save.trace", s.data(), s.size()));
  HLT_RETURN_IF_ERROR(WriteText(dir + "/va.hints", v.data(), v.size()));
  return WriteText(dir + "/restore.trace", r.data(), r.size());
}

}  // namespace halite::testing
