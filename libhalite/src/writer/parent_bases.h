// Incremental saves: which changed pages of a child are coded against a block group of the parent's view (format-spec
// 5.4 BASED, 10). A changed page usually resembles the parent's version of it, which a restore of the child reads
// anyway when it keeps other pages of the same group: coding the page against that group's content makes it cost
// what changed, and the restore reads the two together, each block once.
#ifndef HALITE_WRITER_PARENT_BASES_H_
#define HALITE_WRITER_PARENT_BASES_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/worker_pool.h"
#include "halite/checkpoint_reader.h"
#include "writer/layout_planner.h"

namespace halite::writer {

struct BaseChoiceInput {
  const CheckpointReader* parent = nullptr;
  std::span<const PlannedPageKind> kinds;  // the child's pages as planned (kContent: stored, kInParent: the parent's)
  std::span<const uint8_t> excluded;       // per page: never based (working set, stored again, large host pages)
  int level = 3;
};

struct BaseChoice {
  std::vector<uint32_t> keys;          // per page: kNoBase, or the key of its base (PlannerInput::base_keys)
  std::vector<uint32_t> group_of_key;  // key -> the block of the parent's view that is the base
  uint64_t groups_tried = 0;           // groups read anyway that hold the parent's version of a changed page
  uint64_t groups_used = 0;            // of those, the ones whose trial paid
};

// Reads page `page` of the child into out[4096].
using ReadChildPage = std::function<Status(uint64_t page, uint8_t* out)>;

// For each block group of the parent's view that the child keeps a page of in every block it is made of (so a restore
// of the child reads all of it anyway), its changed pages (at most what the group has room for under format::kMaxGroupPages) are compressed once with the
// group's content as a prefix and once alone; they are based on it when that comes to at most 3/4. Keys order the
// groups as the parent's view restores them. Trials run on `pool`. Errors: reading the parent or a page.
Result<BaseChoice> ChooseBases(const BaseChoiceInput& input, WorkerPool& pool, const ReadChildPage& read_page);

}  // namespace halite::writer

#endif  // HALITE_WRITER_PARENT_BASES_H_
