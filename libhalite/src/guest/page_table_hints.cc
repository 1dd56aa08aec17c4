// Page-table walk over the writer's staged pages (halite/x86_guest_hints.h).
#include <algorithm>
#include <array>
#include <chrono>
#include <string>
#include <unordered_set>

#include "halite/x86_guest_hints.h"

namespace halite::x86 {
namespace {

using Clock = std::chrono::steady_clock;
using PageContent = CheckpointWriter::PageContent;

// Guest frames <-> (region, page), over a memory map clipped to the writer's regions.
class FrameMap {
 public:
  FrameMap(std::span<const GuestMemoryRange> map, const std::vector<Region>& regions) {
    std::vector<GuestMemoryRange> given(map.begin(), map.end());
    if (given.empty()) given = RegionsAsMemoryMap(regions);
    for (GuestMemoryRange r : given) {
      if (r.region >= regions.size() || r.gpa % kGuestPageSize || r.size % kGuestPageSize ||
          r.region_offset % kGuestPageSize || r.region_offset >= regions[r.region].size ||
          r.gpa + r.size < r.gpa) {
        continue;
      }
      r.size = std::min(r.size, regions[r.region].size - r.region_offset);
      if (r.size) ranges_.push_back(r);
    }
    std::sort(ranges_.begin(), ranges_.end(), [](const auto& a, const auto& b) { return a.gpa < b.gpa; });
  }

  const std::vector<GuestMemoryRange>& ranges() const { return ranges_; }
  bool empty() const { return ranges_.empty(); }
  uint64_t max_pfn() const {
    uint64_t m = 0;
    for (const auto& r : ranges_) m = std::max(m, (r.gpa + r.size) / kGuestPageSize - 1);
    return m;
  }
  uint64_t pages() const {
    uint64_t n = 0;
    for (const auto& r : ranges_) n += r.size / kGuestPageSize;
    return n;
  }
  // The (region, page) showing guest frame `pfn`; false in a hole.
  bool Find(uint64_t pfn, PageRef* where) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pfn,
                               [](uint64_t v, const GuestMemoryRange& r) { return v < r.gpa / kGuestPageSize; });
    if (it == ranges_.begin()) return false;
    --it;
    const uint64_t first = it->gpa / kGuestPageSize;
    if (pfn >= first + it->size / kGuestPageSize) return false;
    *where = PageRef{it->region, it->region_offset / kGuestPageSize + (pfn - first)};
    return true;
  }
  // The lowest guest frame showing (region, page); false when no range maps it.
  bool FrameOf(PageRef where, uint64_t* pfn) const {
    for (const auto& r : ranges_) {
      const uint64_t first = r.region_offset / kGuestPageSize;
      if (r.region == where.region && where.page >= first && where.page < first + r.size / kGuestPageSize) {
        *pfn = r.gpa / kGuestPageSize + (where.page - first);
        return true;
      }
    }
    return false;
  }

 private:
  std::vector<GuestMemoryRange> ranges_;
};

void AddNote(std::string* notes, const std::string& note) {
  if (!notes->empty()) *notes += "; ";
  *notes += note;
}

}  // namespace

void TopLevelTableCandidates::Observe(PageRef where, std::span<const uint8_t, kGuestPageSize> page) {
  // The frame bound is checked when the walk reads the page again; here only the shape of the entries counts.
  if (!LooksLikeTopLevelTable(page, (uint64_t{1} << 40) - 1)) return;
  if (entries_.size() >= max_entries_) {
    truncated_ = true;
    return;
  }
  entries_.push_back(Entry{where, KernelHalfFingerprint(page)});
}

Result<PageTableHintReport> AddPageTableHints(CheckpointWriter& writer, std::span<const VcpuControlRegisters> vcpus,
                                              std::span<const GuestMemoryRange> memory_map,
                                              const TopLevelTableCandidates& candidates,
                                              const GuestWalkOptions& options) {
  const auto start = Clock::now();
  PageTableHintReport report;
  report.vcpus = uint32_t(vcpus.size());
  report.candidates = candidates.entries().size();
  const std::vector<Region>& regions = writer.regions();
  for (uint32_t r = 0; r < regions.size(); ++r) {
    for (uint64_t p = 0; p < regions[r].page_count(); ++p) {
      if (writer.ContentOf(r, p) == PageContent::kData) ++report.nonzero_pages;
    }
  }
  const FrameMap frames(memory_map, regions);
  if (frames.empty()) {
    report.skipped = "the guest's memory map shows none of the checkpoint's regions";
    return report;
  }

  std::vector<PagingRoot> roots;
  for (const VcpuControlRegisters& v : vcpus) {
    auto root = PagingRootFromRegisters(v.cr0, v.cr3, v.cr4, v.efer);
    if (root) {
      roots.push_back(*root);
    } else {
      AddNote(&report.notes, "vCPU " + std::to_string(v.vcpu) + ": " + root.error().message());
    }
  }
  if (roots.empty()) {
    report.skipped = vcpus.empty() ? "no vCPU registers" : "no vCPU is in 64-bit paging mode (" + report.notes + ")";
    return report;
  }

  GuestPageReader read = [&](uint64_t pfn, std::span<uint8_t, kGuestPageSize> out) -> Result<bool> {
    PageRef where;
    if (!frames.Find(pfn, &where)) return false;
    return writer.ReadPage(where.region, where.page, out);
  };

  // Only candidates whose kernel half matches a vCPU root's (or its PTI kernel copy's, the even page of the
  // pair) can be another process's root: read back those alone.
  std::unordered_set<uint64_t> fingerprints;
  std::array<uint8_t, kGuestPageSize> page;
  for (const PagingRoot& r : roots) {
    for (uint64_t pfn : {r.table_pfn, r.table_pfn & ~uint64_t{1}}) {
      HLT_ASSIGN_OR_RETURN(bool present, read(pfn, page));
      if (present) fingerprints.insert(KernelHalfFingerprint(page));
    }
  }
  std::vector<uint64_t> candidate_pfns;
  for (const auto& c : candidates.entries()) {
    uint64_t pfn = 0;
    if (fingerprints.count(c.kernel_half_fingerprint) && frames.FrameOf(c.where, &pfn)) candidate_pfns.push_back(pfn);
  }
  std::sort(candidate_pfns.begin(), candidate_pfns.end());
  candidate_pfns.erase(std::unique(candidate_pfns.begin(), candidate_pfns.end()), candidate_pfns.end());

  GuestWalkOptions walk_options = options;
  walk_options.limits.max_pfn = std::min(walk_options.limits.max_pfn, frames.max_pfn());
  // Runs cost ~60 bytes each by the time the writer has them; real guests need about one per page mapped,
  // shared pages (libraries) once per process. Keep hostile tables from costing more than that.
  walk_options.max_total_runs =
      std::min(walk_options.max_total_runs, std::max<uint64_t>(uint64_t{1} << 16, 2 * frames.pages()));
  auto walk = WalkGuestAddressSpaces(read, roots, candidate_pfns, walk_options);
  if (!walk) {
    if (walk.error().code() != StatusCode::kNotFound) return walk.error();
    report.skipped = "the vCPUs' page-table roots are not in the checkpoint: " + walk.error().message();
    return report;
  }
  report.cpu_roots = walk->cpu_roots;
  report.pti_kernel_copies = walk->pti_kernel_copies;
  report.scan_roots = uint32_t(walk->scan.roots.size());
  report.kernel_alias_roots = uint32_t(walk->scan.kernel_aliases);
  report.truncated = walk->truncated || walk->scan.truncated || candidates.truncated();
  for (const AddressSpaceWalk& space : walk->spaces) {
    report.table_pages += space.stats.tables;
    report.missing_tables += space.stats.missing_tables;
    report.kernel_alias_entries += space.stats.kernel_alias_entries;
    report.runs += space.runs.size();
    report.truncated = report.truncated || space.stats.truncated;
  }

  const std::vector<PageRun> runs = ToPageRuns(walk->spaces, frames.ranges());
  report.hint_runs = runs.size();
  auto content_is = [&](bool data_only) {
    return [&frames, &writer, data_only](uint64_t pfn) {
      PageRef where;
      if (!frames.Find(pfn, &where)) return false;
      const PageContent c = writer.ContentOf(where.region, where.page);
      return data_only ? c == PageContent::kData : c != PageContent::kAbsent;
    };
  };
  report.mapped_pages = CountMappedPages(walk->spaces, content_is(false));
  report.mapped_nonzero_pages = CountMappedPages(walk->spaces, content_is(true));
  report.mapped_nonzero_small_pages = CountMappedPages(walk->spaces, content_is(true), false);
  if (!runs.empty()) HLT_RETURN_IF_ERROR(writer.AddVaRuns(runs));
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace halite::x86
