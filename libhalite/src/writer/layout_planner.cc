#include "writer/layout_planner.h"

namespace halite::writer {

LayoutPlan PlanLayout(LayoutPolicy policy, const std::vector<bool>& storable, std::span<const GlobalRun> access,
                      std::span<const GlobalRun> va) {
  LayoutPlan plan;
  std::vector<bool> placed(storable.size());
  auto place_runs = [&](std::span<const GlobalRun> runs) {
    for (const auto& r : runs) {
      for (uint64_t g = r.first; g < r.first + r.count && g < storable.size(); ++g) {
        if (storable[g] && !placed[g]) {
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
  for (uint64_t g = 0; g < storable.size(); ++g) {
    if (storable[g] && !placed[g]) plan.order.push_back(uint32_t(g));
  }
  return plan;
}

}  // namespace halite::writer
