#include "writer/layout_planner.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "halite/format_constants.h"

namespace halite::writer {

LayoutOrder PlanPageOrder(LayoutPolicy policy, std::span<const PlannedPageKind> pages,
                          std::span<const GlobalRun> access, std::span<const GlobalRun> va,
                          const HostPageGroups& groups) {
  LayoutOrder plan;
  std::vector<bool> placed(pages.size());
  auto storable = [&](uint64_t g) { return pages[g] == PlannedPageKind::kContent; };
  auto place_one = [&](uint64_t g) {
    if (storable(g) && !placed[g]) {
      placed[g] = true;
      plan.order.push_back(uint32_t(g));
    }
  };
  // A page of a large host page brings the whole host page: it is installed at once anyway.
  auto place = [&](uint64_t g) {
    if (!storable(g) || placed[g]) return;
    const HostPageGroups::Group hp = groups.Of(g);
    for (uint64_t p = hp.first; p < hp.first + hp.count && p < pages.size(); ++p) place_one(p);
  };
  auto place_runs = [&](std::span<const GlobalRun> runs) {
    for (const auto& r : runs) {
      for (uint64_t g = r.first; g < r.first + r.count && g < pages.size(); ++g) place(g);
    }
  };
  if (policy == LayoutPolicy::kHalite || policy == LayoutPolicy::kAccess) {
    place_runs(access);
    plan.accessed = plan.order.size();
  }
  if (policy == LayoutPolicy::kHalite || policy == LayoutPolicy::kVa) place_runs(va);
  for (uint64_t g = 0; g < pages.size(); ++g) place(g);
  return plan;
}

std::vector<ItemRange> CutBlocks(size_t n, size_t hot_end, uint32_t block_pages,
                                 const std::function<bool(size_t)>& joined) {
  std::vector<ItemRange> out;
  for (size_t s = 0; s < n;) {
    const size_t end = s < hot_end ? hot_end : n;
    size_t cut = std::min<size_t>(s + block_pages, end);
    if (cut < end && joined(cut)) {
      // The cut would split a host page: end the block before it, or, when the host page starts the block and
      // does not fit, give it a block of its own.
      size_t start = cut;
      while (start > s && joined(start)) --start;
      if (start > s) {
        cut = start;
      } else {
        cut = s + 1;
        while (cut < end && cut - s < format::kMaxBlockPages && joined(cut)) ++cut;
      }
    }
    out.push_back({s, cut - s});
    s = cut;
  }
  return out;
}

std::vector<uint64_t> PagesToStoreAgain(const PlannerInput& in, const std::vector<bool>& keep, double fraction) {
  std::vector<uint64_t> out;
  if (fraction > 1 || in.block_pages == 0) return out;
  std::vector<PlannedPageKind> flat(in.pages.begin(), in.pages.end());
  for (auto& k : flat) {
    if (k == PlannedPageKind::kInParent) k = PlannedPageKind::kContent;
  }
  const HostPageGroups groups(in.regions);
  const LayoutOrder order = PlanPageOrder(in.policy, flat, in.access, in.va, groups);
  const auto cuts = CutBlocks(order.order.size(), 0, in.block_pages,
                              [&](size_t i) { return groups.Together(order.order[i - 1], order.order[i]); });
  for (const ItemRange& block : cuts) {
    const size_t first = block.first, end = block.first + block.count;
    size_t changed = 0;
    for (size_t i = first; i < end; ++i) changed += in.pages[order.order[i]] == PlannedPageKind::kContent ? 1 : 0;
    if (changed == 0 || double(changed) < fraction * double(end - first)) continue;
    for (size_t i = first; i < end; ++i) {
      const uint64_t g = order.order[i];
      if (in.pages[g] == PlannedPageKind::kInParent && !(g < keep.size() && keep[g])) out.push_back(g);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Renumbers the slots so that those of keyed pages outside the working set (the first `hot` slots) come last,
// grouped by key in increasing order, each group in plan order; the page map follows. Returns how many slots are
// not keyed.
size_t MoveBasedSlotsLast(std::span<const uint32_t> keys, size_t hot, BlockPlan* plan) {
  const size_t n = plan->slot_page.size();
  if (keys.empty()) return n;
  std::vector<uint32_t> order;  // new slot -> old slot
  std::vector<uint32_t> based;
  order.reserve(n);
  for (size_t s = 0; s < n; ++s) {
    (s >= hot && keys[plan->slot_page[s]] != kNoBase ? based : order).push_back(uint32_t(s));
  }
  if (based.empty()) return n;
  const size_t unbased = order.size();
  std::stable_sort(based.begin(), based.end(),
                   [&](uint32_t a, uint32_t b) { return keys[plan->slot_page[a]] < keys[plan->slot_page[b]]; });
  order.insert(order.end(), based.begin(), based.end());
  std::vector<uint32_t> new_of_old(n), slot_page(n);
  for (size_t i = 0; i < n; ++i) {
    new_of_old[order[i]] = uint32_t(i);
    slot_page[i] = plan->slot_page[order[i]];
  }
  plan->slot_page = std::move(slot_page);
  for (uint32_t& v : plan->page_map) {
    if (v >= format::kPageMapFirstSlot && v != format::kPageMapInParent) {
      v = format::kPageMapFirstSlot + new_of_old[v - format::kPageMapFirstSlot];
    }
  }
  return unbased;
}

}  // namespace

Result<BlockPlan> PlanBlocks(const PlannerInput& in, const PagesEqual& equal) {
  if (in.block_pages < 1 || in.block_pages > format::kMaxBlockPages) {
    return Status::InvalidArgument(fmt::format("block_pages {} (expected 1..{})", in.block_pages, format::kMaxBlockPages));
  }
  if (in.hashes.size() != in.pages.size()) {
    return Status::InvalidArgument(fmt::format("{} hashes for {} pages", in.hashes.size(), in.pages.size()));
  }
  if (!in.base_keys.empty() && in.base_keys.size() != in.pages.size()) {
    return Status::InvalidArgument(fmt::format("{} base keys for {} pages", in.base_keys.size(), in.pages.size()));
  }
  BlockPlan plan;
  const uint64_t total = in.pages.size();
  plan.page_map.assign(total, format::kPageMapAbsent);
  for (uint64_t g = 0; g < total; ++g) {
    if (in.pages[g] == PlannedPageKind::kZero) {
      plan.page_map[g] = format::kPageMapZero;
      ++plan.zero_pages;
    } else if (in.pages[g] == PlannedPageKind::kAbsent) {
      ++plan.absent_pages;
    } else if (in.pages[g] == PlannedPageKind::kInParent) {
      plan.page_map[g] = format::kPageMapInParent;
      ++plan.in_parent_pages;
    }
  }

  // Order, then deduplicate in that order, so the copy stored is the first one planned.
  const HostPageGroups groups(in.regions);
  LayoutOrder order = PlanPageOrder(in.policy, in.pages, in.access, in.va, groups);
  // A page of a large host page shares a slot only within its host page, which stays in one block: a duplicate
  // stored elsewhere would make installing the host page read a second block.
  struct DedupKey {
    codec::Hash128 hash;
    uint64_t host_page;  // first page of its large host page; UINT64_MAX for a 4 KiB host page
    bool operator==(const DedupKey&) const = default;
  };
  struct KeyHash {
    size_t operator()(const DedupKey& k) const {
      return size_t(k.hash.low ^ (k.hash.high * 0x9E3779B97F4A7C15ull) ^ (k.host_page * 0xC2B2AE3D27D4EB4Full));
    }
  };
  std::unordered_map<DedupKey, uint32_t, KeyHash> first_slot_with_hash;
  for (size_t i = 0; i < order.order.size(); ++i) {
    const uint32_t g = order.order[i];
    const HostPageGroups::Group hp = groups.Of(g);
    const DedupKey key{in.hashes[g], hp.count > 1 ? hp.first : UINT64_MAX};
    auto [it, inserted] = first_slot_with_hash.try_emplace(key, uint32_t(plan.slot_page.size()));
    if (!inserted) {
      // Same hash: confirm byte for byte before sharing the slot (a collision keeps its own copy).
      HLT_ASSIGN_OR_RETURN(bool same, equal(plan.slot_page[it->second], g));
      if (same) {
        plan.page_map[g] = format::kPageMapFirstSlot + it->second;
        ++plan.duplicate_pages;
        continue;
      }
    }
    plan.page_map[g] = format::kPageMapFirstSlot + uint32_t(plan.slot_page.size());
    plan.slot_page.push_back(g);
    if (i < order.accessed) ++plan.accessed_pages;
  }

  const size_t unbased = MoveBasedSlotsLast(in.base_keys, plan.accessed_pages, &plan);
  // Blocks: up to block_pages slots each, with a forced boundary where the working set ends, so hot blocks hold
  // only working-set pages, and none inside a large host page (its slots are adjacent: placed together, and
  // deduplicated only among themselves).
  const auto cuts = CutBlocks(unbased, plan.accessed_pages, in.block_pages, [&](size_t s) {
    return groups.Together(plan.slot_page[s - 1], plan.slot_page[s]);
  });
  for (const ItemRange& c : cuts) plan.blocks.push_back({c.first, uint32_t(c.count), c.first < plan.accessed_pages});
  // The based slots: blocks of one key each.
  for (size_t s = unbased; s < plan.slot_page.size();) {
    const uint32_t key = in.base_keys[plan.slot_page[s]];
    size_t end = s;
    while (end < plan.slot_page.size() && end - s < in.block_pages && in.base_keys[plan.slot_page[end]] == key) ++end;
    plan.blocks.push_back({s, uint32_t(end - s), false, key});
    s = end;
  }
  // The restore order is the plan order of blocks; the working set is its hot prefix.
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    plan.restore_order.push_back(uint32_t(b));
    if (plan.blocks[b].hot) ++plan.working_set_blocks;
  }
  return plan;
}

}  // namespace halite::writer
