#include "writer/parent_bases.h"

#include <algorithm>
#include <deque>
#include <future>

#include "codec/zstd_codec.h"
#include "halite/format_constants.h"

namespace halite::writer {
namespace {

using format::kPageSize;

struct Candidate {
  uint32_t group = 0;  // block of the parent's view holding the parent's version
  uint32_t page = 0;
};

struct Trial {
  size_t first = 0, count = 0;  // candidates [first, first + count), one group's
};

// Whether the child keeps a page of every block the group is made of: only then does a restore of the child read the
// whole group anyway (a block of it holding only pages the child changed would otherwise not be read at all).
bool EveryPartKept(const CheckpointReader& parent, uint32_t group, std::span<const PlannedPageKind> kinds) {
  const std::vector<GroupPart> parts = parent.GroupParts(group);
  if (parts.size() == 1) return true;  // kept: the caller saw a page of it IN_PARENT
  std::vector<bool> kept(parts.size());
  for (const BlockMember& m : parent.BlockMembers(group)) {
    if (m.page >= kinds.size() || kinds[m.page] != PlannedPageKind::kInParent) continue;
    size_t i = parts.size() - 1;
    while (i > 0 && parts[i].first_slot > m.slot) --i;
    kept[i] = true;
  }
  return std::all_of(kept.begin(), kept.end(), [](bool k) { return k; });
}

// The group's changed pages compressed alone and against the group's content: {alone, based} bytes.
Result<std::pair<uint64_t, uint64_t>> TrialOf(const CheckpointReader& parent, std::span<const Candidate> pages,
                                              int level, const ReadChildPage& read_page) {
  thread_local codec::Compressor compressor;
  std::vector<uint8_t> base(parent.blocks()[pages[0].group].raw_length()), raw(pages.size() * kPageSize), out;
  HLT_RETURN_IF_ERROR(parent.ReadBlock(pages[0].group, base));
  for (size_t i = 0; i < pages.size(); ++i) HLT_RETURN_IF_ERROR(read_page(pages[i].page, raw.data() + i * kPageSize));
  HLT_RETURN_IF_ERROR(compressor.Compress(raw, level, nullptr, &out));
  const uint64_t alone = out.size();
  HLT_RETURN_IF_ERROR(compressor.Compress(raw, level, codec::FrameReference::Prefix(base), &out));
  return std::pair<uint64_t, uint64_t>{alone, out.size()};
}

}  // namespace

Result<BaseChoice> ChooseBases(const BaseChoiceInput& in, WorkerPool& pool, const ReadChildPage& read_page) {
  const CheckpointReader& parent = *in.parent;
  const auto& groups = parent.blocks();
  const uint64_t limit = std::min<uint64_t>(in.kinds.size(), parent.total_pages());
  BaseChoice out;
  out.keys.assign(in.kinds.size(), kNoBase);
  // Groups the child reads anyway, and the changed pages whose parent version one of them holds.
  std::vector<uint8_t> read_anyway(groups.size());
  std::vector<Candidate> candidates;
  for (uint64_t g = 0; g < limit; ++g) {
    const bool changed = in.kinds[g] == PlannedPageKind::kContent && !(g < in.excluded.size() && in.excluded[g]);
    if (in.kinds[g] != PlannedPageKind::kInParent && !changed) continue;
    const PageLocation loc = parent.Locate(g);
    if (loc.kind != PageKind::kStored) continue;
    if (changed) candidates.push_back({loc.block, uint32_t(g)});
    else read_anyway[loc.block] = 1;  // the child keeps a page of it
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.group < b.group; });
  std::vector<Trial> trials;
  for (size_t i = 0; i < candidates.size();) {
    size_t end = i;
    while (end < candidates.size() && candidates[end].group == candidates[i].group) ++end;
    const uint32_t group = candidates[i].group;
    const size_t room = format::kMaxGroupPages - std::min(format::kMaxGroupPages, groups[group].page_count);
    if (read_anyway[group] && room > 0 && EveryPartKept(parent, group, in.kinds)) {
      trials.push_back({i, std::min(end - i, room)});
    }
    i = end;
  }
  out.groups_tried = trials.size();
  // Keys: the parent's restore order, so that the child's based blocks lie in the order a loader reads the groups.
  std::vector<uint32_t> rank(groups.size(), kNoBase);
  const auto& order = parent.restore_order();
  for (uint32_t i = 0; i < order.size(); ++i) rank[order[i]] = i;
  std::deque<std::pair<size_t, std::future<Result<std::pair<uint64_t, uint64_t>>>>> window;
  const size_t max_in_flight = size_t(pool.size()) * 2;
  size_t next = 0;
  while (next < trials.size() || !window.empty()) {
    while (next < trials.size() && window.size() < max_in_flight) {
      const Trial& t = trials[next];
      const std::span<const Candidate> pages(candidates.data() + t.first, t.count);
      window.emplace_back(next++, pool.Submit([&parent, pages, &in, &read_page] {
                            return TrialOf(parent, pages, in.level, read_page);
                          }));
    }
    auto [index, future] = std::move(window.front());
    window.pop_front();
    auto sizes = future.get();
    if (!sizes) {
      for (auto& w : window) w.second.wait();  // tasks reference locals: let them finish before unwinding
      return sizes.error().WithContext("coding changed pages against the parent");
    }
    if (sizes->second * 4 > sizes->first * 3) continue;  // not worth a block of its own: coded with the others
    const Trial& t = trials[index];
    const uint32_t group = candidates[t.first].group;
    for (size_t i = t.first; i < t.first + t.count; ++i) out.keys[candidates[i].page] = rank[group];
    ++out.groups_used;
  }
  out.group_of_key.assign(order.size(), kNoBase);
  for (uint32_t b = 0; b < groups.size(); ++b) {
    if (rank[b] != kNoBase) out.group_of_key[rank[b]] = b;
  }
  return out;
}

}  // namespace halite::writer
