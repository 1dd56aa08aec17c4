// x86-64 guest page-table walker (halite/x86_page_tables.h). Written from the architecture's description of
// 4-level and 5-level paging (Intel SDM vol. 3A ch. 4.5, AMD APM vol. 2 ch. 5.3): entry bit 0 present, bit 7
// page size (in PDPT and PD entries only; reserved above), bits 51:12 the next table or page frame.
#include "halite/x86_page_tables.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_set>

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite::x86 {
namespace {

constexpr uint64_t kPresent = 1ull << 0;
constexpr uint64_t kAccessed = 1ull << 5;
constexpr uint64_t kPageSizeBit = 1ull << 7;
constexpr uint64_t kAddrMask = 0x000FFFFFFFFFF000ull;     // bits 51:12
constexpr uint64_t kAddr2M = 0x000FFFFFFFE00000ull;       // bits 51:21
constexpr uint64_t kAddr1G = 0x000FFFFFC0000000ull;       // bits 51:30
constexpr uint64_t kReserved2M = 0x00000000001FE000ull;   // bits 20:13 of a 2 MiB leaf (bit 12 is PAT)
constexpr uint64_t kReserved1G = 0x000000003FFFE000ull;   // bits 29:13 of a 1 GiB leaf
constexpr uint64_t kEntriesPerTable = 512;
constexpr uint64_t kHalf = 256;  // first kernel-half entry of a top-level table

// CR0, CR4, EFER bits.
constexpr uint64_t kCr0Pg = 1ull << 31;
constexpr uint64_t kCr4Pae = 1ull << 5;
constexpr uint64_t kCr4La57 = 1ull << 12;
constexpr uint64_t kEferLma = 1ull << 10;
// CR3 bits 63 (no-flush with PCIDE), 62 and 61 (linear-address masking) are not part of the address.
constexpr uint64_t kCr3Reserved = 0x1FF0000000000000ull;  // bits 60:52

using Page = std::array<uint8_t, kGuestPageSize>;

inline uint64_t Entry(std::span<const uint8_t, kGuestPageSize> page, size_t i) {
  return LoadLe64(page.data() + 8 * i);  // x86 entries are little-endian
}

inline uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint32_t KernelPresent(std::span<const uint8_t, kGuestPageSize> page) {
  uint32_t n = 0;
  for (size_t i = kHalf; i < kEntriesPerTable; ++i) n += (Entry(page, i) & kPresent) ? 1 : 0;
  return n;
}

bool SameEntries(std::span<const uint8_t, kGuestPageSize> a, std::span<const uint8_t, kGuestPageSize> b,
                 size_t first, size_t last) {
  for (size_t i = first; i < last; ++i) {
    if ((Entry(a, i) & ~kAccessed) != (Entry(b, i) & ~kAccessed)) return false;
  }
  return true;
}

uint64_t Canonical(uint64_t va, int levels) {
  const int bits = 12 + 9 * levels;  // 48 or 57
  const uint64_t sign = 1ull << (bits - 1);
  va &= (1ull << bits) - 1;
  return (va & sign) ? (va | ~((1ull << bits) - 1)) : va;
}

// A table page at a level, as one key: (pfn << 3) | level.
using TableKeys = std::unordered_set<uint64_t>;
inline uint64_t TableKey(uint64_t pfn, int level) { return (pfn << 3) | uint64_t(level); }

// True when user-half entry `e` of a top-level table names the same next-level table as a present entry of its
// kernel half: an alias of kernel mappings. Linux's trampoline_pgd does that (entry 0 is the direct map's own
// PUD, so virtual address 0 maps physical memory one to one); walked as a user half, it would look like a process
// mapping all of memory in physical order, ahead of every real process.
bool AliasesKernelEntry(std::span<const uint8_t, kGuestPageSize> top, uint64_t e) {
  if (!(e & kPresent) || (e & kPageSizeBit)) return false;
  for (size_t i = kHalf; i < kEntriesPerTable; ++i) {
    const uint64_t k = Entry(top, i);
    if ((k & kPresent) && !(k & kPageSizeBit) && (k & kAddrMask) == (e & kAddrMask)) return true;
  }
  return false;
}

class Walker {
 public:
  // `kernel_tables`: tables of the kernel half walked through another root (may be null). Tables this walk reads
  // from its own kernel half go to `kernel_tables_out` too (may be null).
  Walker(const GuestPageReader& read, const WalkLimits& limits, AddressSpaceWalk* out, const TableKeys* kernel_tables,
         TableKeys* kernel_tables_out)
      : read_(read), lim_(limits), out_(out), shared_kernel_(kernel_tables), kernel_out_(kernel_tables_out) {}

  Status Run() {
    const PagingRoot& root = out_->root;
    if (root.levels != 4 && root.levels != 5) {
      return Status::InvalidArgument("page walk: " + std::to_string(root.levels) + " paging levels (expected 4 or 5)");
    }
    if (root.table_pfn > lim_.max_pfn) {
      return Status::NotFound("page walk: root table pfn " + fmt::format("{:#x}", root.table_pfn) + " is beyond the guest's memory");
    }
    HLT_ASSIGN_OR_RETURN(bool present, ReadTable(root.table_pfn, root.levels));
    if (!present) return Status::NotFound("page walk: root table pfn " + fmt::format("{:#x}", root.table_pfn) + " is not in memory");
    // The kernel half first, so that its tables are known when the user half is walked: a user-half entry naming
    // one of them is an alias of kernel mappings (see AliasesKernelEntry), not memory of a process.
    if (!lim_.user_half_only) {
      in_kernel_half_ = true;
      HLT_RETURN_IF_ERROR(Table(root.levels, 0, kHalf, kEntriesPerTable));
      in_kernel_half_ = false;
    }
    if (lim_.kernel_half_only) return Status::Ok();
    const size_t kernel_runs = out_->runs.size();
    // Lower levels' buffers only were reused by the kernel half's walk: pages_[root.levels] is still the root.
    for (size_t i = 0; i < kHalf; ++i) {
      if (AliasesKernelEntry(pages_[root.levels], Entry(pages_[root.levels], i))) user_aliases_.insert(i);
    }
    HLT_RETURN_IF_ERROR(Table(root.levels, 0, 0, kHalf));
    // Runs in ascending virtual-address order: the user half's first.
    std::rotate(out_->runs.begin(), out_->runs.begin() + kernel_runs, out_->runs.end());
    return Status::Ok();
  }

 private:
  // True when user-half entry `i` of table `level`, naming table `next` below, aliases the kernel half.
  bool KernelAlias(int level, size_t i, uint64_t next) const {
    if (in_kernel_half_) return false;
    if (level == out_->root.levels && user_aliases_.count(i)) return true;
    const uint64_t key = TableKey(next, level - 1);
    return kernel_tables_.count(key) || (shared_kernel_ && shared_kernel_->count(key));
  }

  // Reads table `pfn` for `level` into pages_[level]; false when absent, already walked or a limit was hit.
  Result<bool> ReadTable(uint64_t pfn, int level) {
    if (!visited_.insert(TableKey(pfn, level)).second) {
      ++out_->stats.revisited_tables;
      return false;
    }
    if (out_->stats.tables >= lim_.max_tables) {
      Stop();
      return false;
    }
    HLT_ASSIGN_OR_RETURN(bool present, read_(pfn, std::span<uint8_t, kGuestPageSize>(pages_[level])));
    if (!present) {
      ++out_->stats.missing_tables;
      return false;
    }
    ++out_->stats.tables;
    out_->table_pfns.push_back(pfn);
    if (in_kernel_half_) {
      kernel_tables_.insert(TableKey(pfn, level));
      if (kernel_out_) kernel_out_->insert(TableKey(pfn, level));
    }
    return true;
  }

  void Stop() {
    out_->stats.truncated = true;
    stop_ = true;
  }

  // Walks entries first..end-1 of the table already read into pages_[level], which maps virtual addresses from
  // `base`.
  Status Table(int level, uint64_t base, size_t first, size_t end) {
    const uint64_t span_shift = 12 + 9 * uint64_t(level - 1);  // bytes mapped by one entry: 2^span_shift
    for (size_t i = first; i < end && !stop_; ++i) {
      // Entry() copies out: the recursive call below reuses lower levels' buffers only, never this one.
      const uint64_t e = Entry(pages_[level], i);
      if (!(e & kPresent)) continue;
      if (lim_.accessed_only && level < out_->root.levels && !(e & kAccessed)) {
        ++out_->stats.not_accessed_entries;
        continue;
      }
      const uint64_t va = base | (uint64_t(i) << span_shift);
      if (level == 1) {
        AddLeaf(va, (e & kAddrMask) >> 12, 1, 1);
        ++out_->stats.leaves_4k;
        continue;
      }
      if (e & kPageSizeBit) {
        if (level == 2 && !(e & kReserved2M)) {
          AddLeaf(va, (e & kAddr2M) >> 12, 512, 2);
          ++out_->stats.leaves_2m;
        } else if (level == 3 && !(e & kReserved1G)) {
          AddLeaf(va, (e & kAddr1G) >> 12, 512 * 512, 3);
          ++out_->stats.leaves_1g;
        } else {
          ++out_->stats.bad_entries;  // PS in a PML4/PML5 entry, or a misaligned large page
        }
        continue;
      }
      const uint64_t next = (e & kAddrMask) >> 12;
      if (next > lim_.max_pfn) {
        ++out_->stats.bad_entries;
        continue;
      }
      if (KernelAlias(level, i, next)) {
        ++out_->stats.kernel_alias_entries;
        continue;
      }
      HLT_ASSIGN_OR_RETURN(bool present, ReadTable(next, level - 1));
      if (present) HLT_RETURN_IF_ERROR(Table(level - 1, va, 0, kEntriesPerTable));
    }
    return Status::Ok();
  }

  void AddLeaf(uint64_t va, uint64_t pfn, uint64_t pages, uint8_t leaf_level) {
    if (pfn > lim_.max_pfn) {
      ++out_->stats.outside_leaves;
      return;
    }
    pages = std::min(pages, lim_.max_pfn - pfn + 1);
    va = Canonical(va, out_->root.levels);
    auto& runs = out_->runs;
    if (!runs.empty()) {
      VaRun& last = runs.back();
      if (last.leaf_level == leaf_level && last.va + last.pages * kGuestPageSize == va &&
          last.pfn + last.pages == pfn) {
        last.pages += pages;
        out_->stats.mapped_pages += pages;
        return;
      }
    }
    if (runs.size() >= lim_.max_runs) {
      Stop();
      return;
    }
    runs.push_back(VaRun{va, pfn, pages, leaf_level});
    out_->stats.mapped_pages += pages;
  }

  const GuestPageReader& read_;
  const WalkLimits& lim_;
  AddressSpaceWalk* out_;
  const TableKeys* shared_kernel_;
  TableKeys* kernel_out_;
  std::array<Page, 6> pages_{};  // one buffer per level (1..5)
  TableKeys visited_;
  TableKeys kernel_tables_;             // read from this root's kernel half
  std::unordered_set<size_t> user_aliases_;  // top-level user entries equal to a kernel-half entry
  bool in_kernel_half_ = false;
  bool stop_ = false;
};

Result<AddressSpaceWalk> WalkOne(const GuestPageReader& read, const PagingRoot& root, const WalkLimits& limits,
                                 const TableKeys* kernel_tables, TableKeys* kernel_tables_out) {
  AddressSpaceWalk out;
  out.root = root;
  out.user_half_only = limits.user_half_only;
  Walker walker(read, limits, &out, kernel_tables, kernel_tables_out);
  HLT_RETURN_IF_ERROR(walker.Run());
  return out;
}

// One level below the top: a PDPT (4-level) or PML4 (5-level) reached from a candidate root must look like a
// table too: a present entry at least, every present entry pointing into memory, no reserved page-size bits.
bool LooksLikeSubTable(std::span<const uint8_t, kGuestPageSize> page, int level, uint64_t max_pfn) {
  bool any = false;
  for (size_t i = 0; i < kEntriesPerTable; ++i) {
    const uint64_t e = Entry(page, i);
    if (!(e & kPresent)) {
      if (e != 0) return false;  // Linux and Windows clear non-present upper-level entries
      continue;
    }
    any = true;
    if (e & kPageSizeBit) {
      if (level != 3 || (e & kReserved1G)) return false;
      continue;  // a 1 GiB page may map MMIO beyond memory
    }
    if (((e & kAddrMask) >> 12) > max_pfn) return false;
  }
  return any;
}

uint64_t PageHash(std::span<const uint8_t, kGuestPageSize> page) {
  uint64_t h = 0x243F6A8885A308D3ull;
  for (size_t i = 0; i < kEntriesPerTable; ++i) h = Mix(h, Entry(page, i) & ~kAccessed);
  return h;
}

}  // namespace

Result<PagingRoot> PagingRootFromRegisters(uint64_t cr0, uint64_t cr3, uint64_t cr4, uint64_t efer) {
  if (!(cr0 & kCr0Pg)) return Status::Unsupported("paging is off (CR0.PG clear): no virtual address space");
  if (!(efer & kEferLma)) {
    return Status::Unsupported(std::string("32-bit ") + ((cr4 & kCr4Pae) ? "PAE" : "non-PAE") +
                               " paging (EFER.LMA clear): only long-mode page tables are walked");
  }
  if (!(cr4 & kCr4Pae)) return Status::Corrupt("long mode active (EFER.LMA) without CR4.PAE");
  if (cr3 & kCr3Reserved) return Status::Corrupt("CR3 has reserved bits 60:52 set");
  return PagingRoot{(cr3 & kAddrMask) >> 12, (cr4 & kCr4La57) ? 5 : 4};
}

Result<AddressSpaceWalk> WalkAddressSpace(const GuestPageReader& read, const PagingRoot& root,
                                          const WalkLimits& limits) {
  return WalkOne(read, root, limits, nullptr, nullptr);
}

bool LooksLikeTopLevelTable(std::span<const uint8_t, kGuestPageSize> page, uint64_t max_pfn) {
  bool kernel = false;
  for (size_t i = 0; i < kEntriesPerTable; ++i) {
    const uint64_t e = Entry(page, i);
    if (e == 0) continue;
    if (!(e & kPresent) || (e & kPageSizeBit) || ((e & kAddrMask) >> 12) > max_pfn) return false;
    if (i >= kHalf) kernel = true;
  }
  return kernel;
}

uint64_t KernelHalfFingerprint(std::span<const uint8_t, kGuestPageSize> page) {
  uint64_t h = 0x13198A2E03707344ull;
  for (size_t i = kHalf; i < kEntriesPerTable; ++i) h = Mix(h, Entry(page, i) & ~kAccessed);
  return h;
}

Result<RootScan> FindSharedKernelRoots(const GuestPageReader& read, std::span<const PagingRoot> known,
                                       std::span<const uint64_t> candidate_pfns, const RootScanLimits& limits) {
  RootScan scan;
  struct Known {
    Page page;
    uint64_t fingerprint;
    int levels;
  };
  std::vector<Known> knowns;
  std::unordered_set<uint64_t> seen_pfns, seen_content;
  Page page{}, sub{};
  for (const PagingRoot& r : known) {
    seen_pfns.insert(r.table_pfn);
    Known k;
    HLT_ASSIGN_OR_RETURN(bool present, read(r.table_pfn, std::span<uint8_t, kGuestPageSize>(k.page)));
    if (!present || KernelPresent(k.page) < limits.min_kernel_entries) continue;
    k.fingerprint = KernelHalfFingerprint(k.page);
    k.levels = r.levels;
    seen_content.insert(PageHash(k.page));
    knowns.push_back(k);
  }
  if (knowns.empty()) return scan;

  for (uint64_t pfn : candidate_pfns) {
    if (pfn > limits.max_pfn) continue;
    if (!seen_pfns.insert(pfn).second) {
      if (std::any_of(known.begin(), known.end(), [&](const PagingRoot& r) { return r.table_pfn == pfn; })) {
        ++scan.duplicates;
      }
      continue;
    }
    ++scan.candidates;
    HLT_ASSIGN_OR_RETURN(bool present, read(pfn, std::span<uint8_t, kGuestPageSize>(page)));
    if (!present || !LooksLikeTopLevelTable(page, limits.max_pfn)) {
      ++scan.not_tables;
      continue;
    }
    const uint64_t fp = KernelHalfFingerprint(page);
    const Known* match = nullptr;
    for (const Known& k : knowns) {
      if (k.fingerprint == fp && SameEntries(k.page, page, kHalf, kEntriesPerTable)) {
        match = &k;
        break;
      }
    }
    if (!match) {
      ++scan.other_kernel;
      continue;
    }
    // The user half must map something of its own through tables that look like tables: entries aliasing the
    // kernel half (Linux's trampoline_pgd) are not a process's memory.
    uint32_t user_entries = 0, aliases = 0, checked = 0;
    bool valid = true;
    for (size_t i = 0; i < kHalf && valid; ++i) {
      const uint64_t e = Entry(page, i);
      if (!(e & kPresent)) continue;
      if (AliasesKernelEntry(page, e)) {
        ++aliases;
        continue;
      }
      ++user_entries;
      if (checked >= limits.max_checked_subtables) continue;
      ++checked;
      HLT_ASSIGN_OR_RETURN(bool sub_present, read((e & kAddrMask) >> 12, std::span<uint8_t, kGuestPageSize>(sub)));
      valid = sub_present && LooksLikeSubTable(sub, match->levels - 1, limits.max_pfn);
    }
    if (!valid) {
      ++scan.not_tables;
      continue;
    }
    if (user_entries == 0) {
      ++(aliases ? scan.kernel_aliases : scan.empty_user_half);
      continue;
    }
    if (!seen_content.insert(PageHash(page)).second) {
      ++scan.duplicates;
      continue;
    }
    if (scan.roots.size() >= limits.max_roots) {
      scan.truncated = true;
      break;
    }
    scan.roots.push_back(PagingRoot{pfn, match->levels});
  }
  return scan;
}

Result<GuestWalk> WalkGuestAddressSpaces(const GuestPageReader& read, std::span<const PagingRoot> cpu_roots,
                                         std::span<const uint64_t> candidate_pfns, const GuestWalkOptions& options) {
  GuestWalk out;
  const uint64_t max_pfn = options.limits.max_pfn;
  std::vector<PagingRoot> roots;
  Page page{}, sibling{};
  for (PagingRoot r : cpu_roots) {
    if (r.table_pfn > max_pfn) continue;
    HLT_ASSIGN_OR_RETURN(bool present, read(r.table_pfn, std::span<uint8_t, kGuestPageSize>(page)));
    if (!present) continue;
    if (options.prefer_pti_kernel_copy && (r.table_pfn & 1)) {
      HLT_ASSIGN_OR_RETURN(bool sib, read(r.table_pfn - 1, std::span<uint8_t, kGuestPageSize>(sibling)));
      if (sib && LooksLikeTopLevelTable(sibling, max_pfn) && SameEntries(page, sibling, 0, kHalf) &&
          KernelPresent(sibling) > KernelPresent(page)) {
        r.table_pfn -= 1;
        ++out.pti_kernel_copies;
      }
    }
    if (std::none_of(roots.begin(), roots.end(), [&](const PagingRoot& x) { return x.table_pfn == r.table_pfn; })) {
      roots.push_back(r);
    }
  }
  if (roots.empty()) {
    if (cpu_roots.empty()) return out;
    return Status::NotFound("page walk: no vCPU's root table is in guest memory");
  }
  out.cpu_roots = uint32_t(roots.size());

  if (options.find_shared_kernel_roots && !candidate_pfns.empty()) {
    RootScanLimits scan_limits;
    scan_limits.max_pfn = max_pfn;
    scan_limits.max_roots = options.max_roots;
    HLT_ASSIGN_OR_RETURN(out.scan, FindSharedKernelRoots(read, roots, candidate_pfns, scan_limits));
    roots.insert(roots.end(), out.scan.roots.begin(), out.scan.roots.end());
  }

  // Kernel halves already walked, so each is walked once, with the tables each one uses (for the user halves of
  // the roots sharing it: a user entry naming one of them aliases the kernel).
  std::vector<Page> walked_kernels;
  std::vector<TableKeys> kernel_tables;
  uint64_t tables_left = options.max_total_tables, runs_left = options.max_total_runs;
  for (const PagingRoot& r : roots) {
    if (tables_left == 0 || runs_left == 0) {
      out.truncated = true;
      break;
    }
    HLT_ASSIGN_OR_RETURN(bool present, read(r.table_pfn, std::span<uint8_t, kGuestPageSize>(page)));
    if (!present) continue;
    WalkLimits lim = options.limits;
    lim.max_tables = std::min(lim.max_tables, tables_left);
    lim.max_runs = std::min(lim.max_runs, runs_left);
    const TableKeys* shared = nullptr;
    for (size_t k = 0; k < walked_kernels.size() && !shared; ++k) {
      if (SameEntries(walked_kernels[k], page, kHalf, kEntriesPerTable)) shared = &kernel_tables[k];
    }
    lim.user_half_only = KernelPresent(page) == 0 || shared != nullptr;
    TableKeys* collect = nullptr;
    if (!lim.user_half_only) {
      walked_kernels.push_back(page);
      kernel_tables.emplace_back();
      collect = &kernel_tables.back();
    }
    HLT_ASSIGN_OR_RETURN(AddressSpaceWalk walk, WalkOne(read, r, lim, shared, collect));
    tables_left -= std::min(tables_left, walk.stats.tables);
    runs_left -= std::min(runs_left, uint64_t(walk.runs.size()));
    out.spaces.push_back(std::move(walk));
  }
  return out;
}

std::vector<GuestMemoryRange> RegionsAsMemoryMap(std::span<const Region> regions) {
  std::vector<GuestMemoryRange> map;
  for (uint32_t i = 0; i < regions.size(); ++i) map.push_back({regions[i].guest_phys_base, regions[i].size, i, 0});
  return map;
}

std::vector<PageRun> ToPageRuns(std::span<const AddressSpaceWalk> walks, std::span<const Region> regions) {
  return ToPageRuns(walks, RegionsAsMemoryMap(regions));
}

std::vector<PageRun> ToPageRuns(std::span<const AddressSpaceWalk> walks,
                                std::span<const GuestMemoryRange> memory_map) {
  std::vector<GuestMemoryRange> ranges;
  for (const GuestMemoryRange& r : memory_map) {
    if (r.size && r.gpa % kGuestPageSize == 0 && r.size % kGuestPageSize == 0 && r.region_offset % kGuestPageSize == 0)
      ranges.push_back(r);
  }
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.gpa < b.gpa; });
  std::vector<PageRun> out;
  auto emit = [&](const VaRun& run, uint32_t space) {
    uint64_t first = run.pfn;
    const uint64_t end = run.pfn + run.pages;  // guest-physical page numbers
    // The last range starting at or before `first`, then forward through those that overlap.
    auto it = std::upper_bound(ranges.begin(), ranges.end(), first,
                               [](uint64_t pfn, const GuestMemoryRange& r) { return pfn < r.gpa / kGuestPageSize; });
    if (it != ranges.begin()) --it;
    for (; it != ranges.end() && first < end; ++it) {
      const uint64_t r_first = it->gpa / kGuestPageSize, r_end = r_first + it->size / kGuestPageSize;
      if (r_first >= end) break;
      const uint64_t lo = std::max(first, r_first), hi = std::min(end, r_end);
      if (lo >= hi) continue;
      out.push_back(PageRun{PageRef{it->region, it->region_offset / kGuestPageSize + (lo - r_first)}, hi - lo, space});
      first = hi;
    }
  };
  // Pass 0: user halves; pass 1: kernel 4 KiB mappings; pass 2: kernel large pages.
  for (int pass = 0; pass < 3; ++pass) {
    for (uint32_t s = 0; s < walks.size(); ++s) {
      for (const VaRun& run : walks[s].runs) {
        const int p = !run.kernel_half() ? 0 : (run.leaf_level == 1 ? 1 : 2);
        if (p == pass) emit(run, s);
      }
    }
  }
  return out;
}

uint64_t CountMappedPages(std::span<const AddressSpaceWalk> walks, const std::function<bool(uint64_t pfn)>& count,
                          bool kernel_large_pages) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [first, end)
  for (const auto& w : walks) {
    for (const VaRun& r : w.runs) {
      if (kernel_large_pages || !r.kernel_half() || r.leaf_level == 1) ranges.emplace_back(r.pfn, r.pfn + r.pages);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t n = 0, done = 0;  // pages below `done` were counted already
  for (const auto& [first, end] : ranges) {
    for (uint64_t pfn = std::max(first, done); pfn < end; ++pfn) n += count(pfn) ? 1 : 0;
    done = std::max(done, end);
  }
  return n;
}

}  // namespace halite::x86
