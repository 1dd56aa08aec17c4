#include "writer/layout_planner.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "halite/format_constants.h"

namespace halite::writer {

LayoutOrder PlanPageOrder(LayoutPolicy policy, std::span<const PlannedPageKind> pages,
                          std::span<const GlobalRun> access, std::span<const GlobalRun> va) {
  LayoutOrder plan;
  std::vector<bool> placed(pages.size());
  auto storable = [&](uint64_t g) { return pages[g] == PlannedPageKind::kContent; };
  auto place_runs = [&](std::span<const GlobalRun> runs) {
    for (const auto& r : runs) {
      for (uint64_t g = r.first; g < r.first + r.count && g < pages.size(); ++g) {
        if (storable(g) && !placed[g]) {
          placed[g] = true;
          plan.order.push_back(uint32_t(g));
        }
      }
    }
  };
  if (policy == LayoutPolicy::kHalite || policy == LayoutPolicy::kAccess) {
    place_runs(access);
    plan.accessed = plan.order.size();
  }
  if (policy == LayoutPolicy::kHalite || policy == LayoutPolicy::kVa) place_runs(va);
  for (uint64_t g = 0; g < pages.size(); ++g) {
    if (storable(g) && !placed[g]) plan.order.push_back(uint32_t(g));
  }
  return plan;
}

std::vector<uint64_t> PagesToStoreAgain(const PlannerInput& in, const std::vector<bool>& keep, double fraction) {
  std::vector<uint64_t> out;
  if (fraction > 1 || in.block_pages == 0) return out;
  std::vector<PlannedPageKind> flat(in.pages.begin(), in.pages.end());
  for (auto& k : flat) {
    if (k == PlannedPageKind::kInParent) k = PlannedPageKind::kContent;
  }
  const LayoutOrder order = PlanPageOrder(in.policy, flat, in.access, in.va);
  for (size_t first = 0; first < order.order.size(); first += in.block_pages) {
    const size_t end = std::min(order.order.size(), first + in.block_pages);
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

Result<BlockPlan> PlanBlocks(const PlannerInput& in, const PagesEqual& equal) {
  if (in.block_pages < 1 || in.block_pages > format::kMaxBlockPages) {
    return Status::InvalidArgument(fmt::format("block_pages {} (expected 1..{})", in.block_pages, format::kMaxBlockPages));
  }
  if (in.hashes.size() != in.pages.size()) {
    return Status::InvalidArgument(fmt::format("{} hashes for {} pages", in.hashes.size(), in.pages.size()));
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
  LayoutOrder order = PlanPageOrder(in.policy, in.pages, in.access, in.va);
  struct HashKey {
    size_t operator()(const codec::Hash128& h) const { return size_t(h.low ^ (h.high * 0x9E3779B97F4A7C15ull)); }
  };
  std::unordered_map<codec::Hash128, uint32_t, HashKey> first_slot_with_hash;
  for (size_t i = 0; i < order.order.size(); ++i) {
    const uint32_t g = order.order[i];
    auto [it, inserted] = first_slot_with_hash.try_emplace(in.hashes[g], uint32_t(plan.slot_page.size()));
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

  // Blocks: block_pages slots each, with a forced boundary where the working set ends, so hot blocks hold only
  // working-set pages.
  const uint64_t slots = plan.slot_page.size();
  for (uint64_t s = 0; s < slots;) {
    const bool hot = s < plan.accessed_pages;
    const uint64_t end = hot ? plan.accessed_pages : slots;
    const uint32_t n = uint32_t(std::min<uint64_t>(in.block_pages, end - s));
    plan.blocks.push_back({s, n, hot});
    s += n;
  }
  // The restore order is the plan order of blocks; the working set is its hot prefix.
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    plan.restore_order.push_back(uint32_t(b));
    if (plan.blocks[b].hot) ++plan.working_set_blocks;
  }
  return plan;
}

}  // namespace halite::writer
