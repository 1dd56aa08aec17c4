// Guest memory as a map of pages with a builder for x86-64 page tables: the page-walk and accessed-bit tests'
// guest. Test-only.
#ifndef HALITE_TESTS_SUPPORT_GUEST_PAGE_TABLES_H_
#define HALITE_TESTS_SUPPORT_GUEST_PAGE_TABLES_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <vector>

#include "halite/x86_accessed_pages.h"
#include "halite/x86_page_tables.h"

namespace halite::testing {

constexpr uint64_t kP = 1, kRw = 2, kUs = 4, kA = 1u << 5, kPs = 1u << 7;
constexpr uint64_t kTable = kP | kRw | kUs | kA;
constexpr uint64_t kKernelHalf = 0xffff800000000000ull;  // first canonical kernel address, 4 levels

using Page = std::array<uint8_t, 4096>;

// Guest memory as a map of pages, with a builder for page tables.
class Guest {
 public:
  explicit Guest(int levels = 4, uint64_t first_table_pfn = 0x100) : levels_(levels), next_(first_table_pfn) {}

  uint64_t NewTable() {
    uint64_t pfn = next_++;
    pages_[pfn] = Page{};
    return pfn;
  }
  uint64_t Get(uint64_t table, size_t i) const {
    uint64_t v;
    std::memcpy(&v, pages_.at(table).data() + 8 * i, 8);
    return v;
  }
  void Set(uint64_t table, size_t i, uint64_t v) { std::memcpy(pages_[table].data() + 8 * i, &v, 8); }
  void Fill(uint64_t pfn, uint8_t byte) { pages_[pfn].fill(byte); }
  void AlignNext() { next_ += next_ & 1; }  // the next table on an even pfn
  void Remove(uint64_t pfn) { pages_.erase(pfn); }

  // Maps `va` to page `pfn` with a leaf at `leaf_level` (1: 4 KiB, 2: 2 MiB, 3: 1 GiB), making tables as needed.
  void Map(uint64_t root, uint64_t va, uint64_t pfn, int leaf_level = 1, uint64_t extra = 0) {
    uint64_t table = root;
    for (int level = levels_; level > leaf_level; --level) {
      size_t i = (va >> (12 + 9 * (level - 1))) & 511;
      uint64_t e = Get(table, i);
      if (!(e & kP)) {
        e = (NewTable() << 12) | kTable;
        Set(table, i, e);
      }
      table = (e & 0x000FFFFFFFFFF000ull) >> 12;
    }
    size_t i = (va >> (12 + 9 * (leaf_level - 1))) & 511;
    Set(table, i, (pfn << 12) | kP | kRw | (leaf_level > 1 ? kPs : 0) | extra);
  }

  x86::GuestPageReader Reader() {
    return [this](uint64_t pfn, std::span<uint8_t, 4096> out) -> Result<bool> {
      ++reads;
      auto it = pages_.find(pfn);
      if (it == pages_.end()) return false;
      std::memcpy(out.data(), it->second.data(), 4096);
      return true;
    };
  }
  x86::GuestPageWriter Writer() {
    return [this](uint64_t pfn, std::span<const uint8_t, 4096> in) -> Status {
      ++writes;
      std::memcpy(pages_[pfn].data(), in.data(), 4096);
      return Status::Ok();
    };
  }
  const Page& PageAt(uint64_t pfn) const { return pages_.at(pfn); }
  std::vector<uint64_t> AllPfns() const {
    std::vector<uint64_t> v;
    for (auto& [pfn, page] : pages_) v.push_back(pfn);
    return v;
  }

  uint64_t reads = 0;
  uint64_t writes = 0;

 private:
  int levels_;
  uint64_t next_;
  std::map<uint64_t, Page> pages_;
};

}  // namespace halite::testing

#endif  // HALITE_TESTS_SUPPORT_GUEST_PAGE_TABLES_H_
