// The locality planner: the order in which non-zero pages are packed into blocks. Pure computation.
#ifndef HALITE_WRITER_LAYOUT_PLANNER_H_
#define HALITE_WRITER_LAYOUT_PLANNER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "halite/checkpoint_writer.h"

namespace halite::writer {

struct GlobalRun {
  uint64_t first = 0;  // global page number
  uint64_t count = 0;
};

struct LayoutPlan {
  std::vector<uint32_t> order;  // global page numbers of every storable page, each exactly once
  uint64_t accessed = 0;        // the first `accessed` entries come from the access trace (the working set)
};

// `storable[g]` says whether page g has content to store (present and not zero).
LayoutPlan PlanLayout(LayoutPolicy policy, const std::vector<bool>& storable, std::span<const GlobalRun> access,
                      std::span<const GlobalRun> va);

}  // namespace halite::writer

#endif  // HALITE_WRITER_LAYOUT_PLANNER_H_
