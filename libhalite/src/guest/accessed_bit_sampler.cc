// Accessed-bit sampling of a stopped guest's live page tables (halite/x86_accessed_pages.h).
#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>

#include "halite/x86_accessed_pages.h"

namespace halite::x86 {
namespace {

constexpr uint64_t kPresent = 1ull << 0;
constexpr uint64_t kAccessed = 1ull << 5;
constexpr size_t kEntries = kGuestPageSize / 8;

using Page = std::array<uint8_t, kGuestPageSize>;

uint32_t KernelHalfPresent(const Page& page) {
  uint32_t n = 0;
  for (size_t i = kEntries / 2; i < kEntries; ++i) {
    uint64_t e;
    std::memcpy(&e, page.data() + 8 * i, 8);
    n += (e & kPresent) ? 1 : 0;
  }
  return n;
}

// The root whose kernel half is fullest, looking at each root's even sibling too: under Linux's page-table
// isolation a vCPU in user mode runs on the user copy (odd page of a pair) whose kernel half holds the entry
// trampoline only; the even page is the same process's kernel copy.
Result<PagingRoot> KernelRoot(const GuestPageReader& read, std::span<const PagingRoot> roots) {
  PagingRoot best = roots.front();
  uint32_t best_present = 0;
  Page page;
  for (const PagingRoot& r : roots) {
    for (uint64_t pfn : {r.table_pfn, r.table_pfn & ~uint64_t{1}}) {
      HLT_ASSIGN_OR_RETURN(bool present, read(pfn, std::span<uint8_t, kGuestPageSize>(page)));
      if (!present || !LooksLikeTopLevelTable(page, (uint64_t{1} << 40) - 1)) continue;
      const uint32_t n = KernelHalfPresent(page);
      if (n > best_present) {
        best_present = n;
        best = PagingRoot{pfn, r.levels};
      }
    }
  }
  return best;
}

}  // namespace

AccessedBitSampler::AccessedBitSampler(GuestPageReader read, GuestPageWriter write, WalkLimits limits)
    : read_(std::move(read)), write_(std::move(write)), limits_(limits) {}

Status AccessedBitSampler::ClearAccessedBits(const AddressSpaceWalk& walk, AccessSample* sample) {
  Page page;
  for (uint64_t pfn : walk.table_pfns) {
    if (pfn == walk.root.table_pfn) continue;  // the top level's bits are not used (WalkLimits::accessed_only)
    HLT_ASSIGN_OR_RETURN(bool present, read_(pfn, std::span<uint8_t, kGuestPageSize>(page)));
    if (!present) continue;
    uint64_t cleared = 0;
    for (size_t i = 0; i < kEntries; ++i) {
      uint64_t e;
      std::memcpy(&e, page.data() + 8 * i, 8);
      if ((e & kPresent) && (e & kAccessed)) {
        e &= ~kAccessed;
        std::memcpy(page.data() + 8 * i, &e, 8);
        ++cleared;
      }
    }
    if (cleared == 0) continue;
    HLT_RETURN_IF_ERROR(write_(pfn, std::span<const uint8_t, kGuestPageSize>(page)));
    ++sample->tables_written;
    sample->entries_cleared += cleared;
  }
  return Status::Ok();
}

Result<AccessSample> AccessedBitSampler::Sample(std::span<const PagingRoot> live_roots) {
  AccessSample sample;
  std::vector<PagingRoot> roots;
  for (const PagingRoot& r : live_roots) {
    if (std::none_of(roots.begin(), roots.end(), [&](const PagingRoot& x) { return x.table_pfn == r.table_pfn; })) {
      roots.push_back(r);
    }
  }
  if (roots.empty()) return Status::NotFound("accessed-bit sample: no vCPU is in 64-bit paging mode");
  sample.live_roots = uint32_t(roots.size());

  // Each walk's tables are cleared before the next walk reads any: a table shared by two walks is then reported
  // once, by the first.
  auto walk = [&](const PagingRoot& root, bool kernel_half, bool measured) -> Status {
    WalkLimits lim = limits_;
    lim.kernel_half_only = kernel_half;
    lim.user_half_only = !kernel_half;
    lim.accessed_only = measured;
    auto w = WalkAddressSpace(read_, root, lim);
    if (!w) return w.error();
    sample.tables_read += w->stats.tables;
    sample.truncated = sample.truncated || w->stats.truncated;
    HLT_RETURN_IF_ERROR(ClearAccessedBits(*w, &sample));
    if (measured) sample.spaces.push_back(std::move(*w));
    return Status::Ok();
  };

  HLT_ASSIGN_OR_RETURN(PagingRoot kernel_root, KernelRoot(read_, roots));
  auto kernel = walk(kernel_root, true, kernel_cleared_);
  if (!kernel.ok()) return kernel;
  kernel_cleared_ = true;
  for (const PagingRoot& r : roots) {
    const bool measured = cleared_roots_.count(r.table_pfn) > 0;
    HLT_RETURN_IF_ERROR(walk(r, false, measured));
    if (measured) ++sample.measured_roots;
    cleared_roots_.insert(r.table_pfn);
  }
  return sample;
}

std::vector<PageRun> AccessedPageRuns(std::span<const AccessSample> samples,
                                      std::span<const GuestMemoryRange> memory_map) {
  std::vector<PageRun> out;
  std::unordered_set<uint64_t> given;  // (region << 40) | page
  for (const AccessSample& s : samples) {
    std::vector<AddressSpaceWalk> small = s.spaces;
    for (AddressSpaceWalk& w : small) {
      std::erase_if(w.runs, [](const VaRun& r) { return r.kernel_half() && r.leaf_level > 1; });
    }
    for (const PageRun& run : ToPageRuns(small, memory_map)) {
      // Split the run around pages given already, keeping the order.
      PageRun cur{run.first, 0, run.address_space};
      for (uint64_t i = 0; i < run.count; ++i) {
        const uint64_t page = run.first.page + i;
        if (given.insert((uint64_t(run.first.region) << 40) | page).second) {
          if (cur.count == 0) cur.first.page = page;
          ++cur.count;
        } else if (cur.count) {
          out.push_back(cur);
          cur.count = 0;
        }
      }
      if (cur.count) out.push_back(cur);
    }
  }
  return out;
}

}  // namespace halite::x86
