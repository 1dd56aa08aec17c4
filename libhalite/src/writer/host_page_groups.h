// Which pages a restorer must install together: the 4 KiB pages of one host page of a region whose host page is
// larger (format-spec 5.2; e.g. 512 pages for hugetlbfs-backed guest memory). The planner keeps such a group in
// one block, so that the fault that needs it reads one block (a destination like QEMU's postcopy places a huge
// page only once all of its pages have arrived).
#ifndef HALITE_WRITER_HOST_PAGE_GROUPS_H_
#define HALITE_WRITER_HOST_PAGE_GROUPS_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace halite::writer {

// One region as the planner sees it.
struct PlannerRegion {
  uint64_t first_page = 0;           // global number of its first page
  uint64_t page_count = 0;
  uint32_t pages_per_host_page = 1;  // host_page_size / 4096; 1 for 4 KiB host pages
};

class HostPageGroups {
 public:
  // `regions` in ascending first_page order; pages outside every region count as groups of one.
  explicit HostPageGroups(std::span<const PlannerRegion> regions) : regions_(regions.begin(), regions.end()) {
    for (const PlannerRegion& r : regions_) any_ = any_ || r.pages_per_host_page > 1;
  }

  // False when every page is a group of its own (no region has host pages larger than 4 KiB).
  bool any() const { return any_; }

  // The group of global page g: [first, first + count).
  struct Group {
    uint64_t first = 0;
    uint64_t count = 1;
  };
  Group Of(uint64_t g) const {
    if (!any_) return {g, 1};
    auto it = std::upper_bound(regions_.begin(), regions_.end(), g,
                               [](uint64_t page, const PlannerRegion& r) { return page < r.first_page; });
    if (it == regions_.begin()) return {g, 1};
    const PlannerRegion& r = *(it - 1);
    if (g >= r.first_page + r.page_count || r.pages_per_host_page <= 1) return {g, 1};
    const uint64_t n = r.pages_per_host_page;
    const uint64_t first = r.first_page + (g - r.first_page) / n * n;
    return {first, std::min(n, r.first_page + r.page_count - first)};
  }
  // True when a and b must be installed together (the same host page of more than one page).
  bool Together(uint64_t a, uint64_t b) const {
    if (!any_) return false;
    const Group ga = Of(a);
    return ga.count > 1 && b >= ga.first && b < ga.first + ga.count;
  }

 private:
  std::vector<PlannerRegion> regions_;
  bool any_ = false;
};

}  // namespace halite::writer

#endif  // HALITE_WRITER_HOST_PAGE_GROUPS_H_
