#include "halite/xen/xen_page_layout.h"

#include <algorithm>

namespace halite::xen {

void PageLayout::AppendToLastBatch(uint64_t pfn, PageType type) {
  size_t batch_begin = batch_end_.size() > 1 ? batch_end_[batch_end_.size() - 2] : 0;
  if (runs_.size() > batch_begin) {
    PageRun& last = runs_.back();
    if (last.type == type && last.first_pfn + last.count == pfn && last.count < UINT32_MAX) {
      ++last.count;
      return;
    }
  }
  runs_.push_back(PageRun{pfn, 1, type});
  batch_end_.back() = runs_.size();
}

void PageLayout::AddBatch(std::span<const PageEntry> entries) {
  batch_end_.push_back(runs_.size());
  for (const PageEntry& e : entries) AppendToLastBatch(e.pfn, e.type);
  open_batch_entries_ = kSaverBatchPfnsMax;  // closed: AppendEntry starts a fresh batch
}

void PageLayout::AddBatchRuns(std::span<const PageRun> runs) {
  runs_.insert(runs_.end(), runs.begin(), runs.end());
  batch_end_.push_back(runs_.size());
  open_batch_entries_ = kSaverBatchPfnsMax;
}

void PageLayout::AppendEntry(uint64_t pfn, PageType type) {
  if (batch_end_.empty() || open_batch_entries_ >= kSaverBatchPfnsMax) {
    batch_end_.push_back(runs_.size());
    open_batch_entries_ = 0;
  }
  AppendToLastBatch(pfn, type);
  ++open_batch_entries_;
}

std::span<const PageRun> PageLayout::batch(size_t i) const {
  size_t begin = i == 0 ? 0 : batch_end_[i - 1];
  return std::span<const PageRun>(runs_.data() + begin, batch_end_[i] - begin);
}

uint64_t PageLayout::entry_count() const {
  uint64_t n = 0;
  for (const PageRun& r : runs_) n += r.count;
  return n;
}

void PageLayout::DropSupersededEntries() {
  // Walk backwards: the first time a pfn is met is its last occurrence in the stream.
  PfnSet seen;
  std::vector<std::vector<PageRun>> kept(batch_count());
  for (size_t b = batch_count(); b-- > 0;) {
    auto runs = batch(b);
    for (size_t r = runs.size(); r-- > 0;) {
      const PageRun& run = runs[r];
      for (uint64_t pfn = run.first_pfn + run.count; pfn-- > run.first_pfn;) {
        if (seen.Insert(pfn)) continue;
        auto& out = kept[b];  // built in reverse; runs extend downwards
        if (!out.empty() && out.back().type == run.type && out.back().first_pfn == pfn + 1) {
          --out.back().first_pfn;
          ++out.back().count;
        } else {
          out.push_back(PageRun{pfn, 1, run.type});
        }
      }
    }
  }
  PageLayout result;
  for (auto& runs : kept) {
    std::reverse(runs.begin(), runs.end());
    result.AddBatchRuns(runs);
  }
  *this = std::move(result);
}

bool PfnSet::Insert(uint64_t pfn) {
  auto& chunk = chunks_[pfn >> 9];
  uint64_t& word = chunk[(pfn >> 6) & 7];
  uint64_t bit = uint64_t{1} << (pfn & 63);
  bool present = word & bit;
  word |= bit;
  return present;
}

bool PfnSet::Contains(uint64_t pfn) const {
  auto it = chunks_.find(pfn >> 9);
  return it != chunks_.end() && (it->second[(pfn >> 6) & 7] >> (pfn & 63)) & 1;
}

}  // namespace halite::xen
