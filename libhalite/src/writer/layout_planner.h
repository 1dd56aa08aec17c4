// The locality planner: everything a checkpoint's layout is, decided in one pure function. Given what each page
// is (absent, zero, or content with a hash), the save-time hints and the policy, it returns the block plan: the
// page map, which page's bytes fill each slot, the blocks, the working set and the restore order. No I/O:
// the byte comparison that confirms a duplicate is the caller's (a callback), so tests give it memory and the
// writer gives it the page store.
#ifndef HALITE_WRITER_LAYOUT_PLANNER_H_
#define HALITE_WRITER_LAYOUT_PLANNER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "codec/hashing.h"
#include "halite/checkpoint_writer.h"
#include "halite/status.h"
#include "writer/host_page_groups.h"

namespace halite::writer {

struct GlobalRun {
  uint64_t first = 0;  // global page number
  uint64_t count = 0;
};

// What the planner knows of one page.
// kInParent: equal, byte for byte, to the parent's page of the same number (format-spec 12): not stored.
enum class PlannedPageKind : uint8_t { kAbsent = 0, kZero = 1, kContent = 2, kInParent = 3 };

// No base: a slot coded on its own (PlannerInput::base_keys, PlannedBlock::base_key).
inline constexpr uint32_t kNoBase = UINT32_MAX;

struct PlannerInput {
  LayoutPolicy policy = LayoutPolicy::kHalite;
  uint32_t block_pages = 64;                   // slots per block, 1..4096
  std::span<const PlannedPageKind> pages;      // one per global page
  std::span<const codec::Hash128> hashes;      // content hash per page (read for kContent pages only)
  std::span<const GlobalRun> access;           // save-time access order (the working set)
  std::span<const GlobalRun> va;               // virtual-address adjacency
  // The regions, where some have host pages larger than 4 KiB (their pages are planned a host page at a time);
  // empty: every page is its own host page.
  std::span<const PlannerRegion> regions;
  // Incremental saves (format-spec 5.4, BASED): per page, kNoBase or the key of the parent's block group the page is
  // to be coded against. The slots of keyed pages outside the working set are planned after every other slot, in
  // blocks of their own, one key after another in increasing order, each key's slots in plan order. The caller
  // keeps each key's slots within what its group has room for. Empty: no page is.
  std::span<const uint32_t> base_keys;
};

// True when pages a and b (both kContent) hold the same bytes. Called only for pages whose hashes are equal.
using PagesEqual = std::function<Result<bool>(uint64_t a, uint64_t b)>;

struct PlannedBlock {
  uint64_t first_slot = 0;
  uint32_t pages = 0;
  bool hot = false;               // holds working-set pages only
  uint32_t base_key = kNoBase;    // the key (PlannerInput::base_keys) of every slot of a block coded against the parent
};

struct BlockPlan {
  std::vector<uint32_t> page_map;       // format-spec 5.3: absent, zero, slot + 2 or IN_PARENT, one per page
  std::vector<uint32_t> slot_page;      // slot -> the global page whose bytes fill it (the first in plan order)
  std::vector<PlannedBlock> blocks;     // up to block_pages slots each, cut where the working set ends
  std::vector<uint32_t> restore_order;  // block indices, the order a restorer should load them in
  uint32_t working_set_blocks = 0;      // the hot prefix of restore_order
  uint64_t accessed_pages = 0;          // distinct stored pages of the working set
  uint64_t duplicate_pages = 0;         // content pages stored as a reference to an earlier slot
  uint64_t zero_pages = 0;
  uint64_t absent_pages = 0;
  uint64_t in_parent_pages = 0;
};

// The whole plan (format-spec 10): pages the guest touched during the save first, in that order, then the rest
// in virtual-address adjacency order, then physical order (`access`, `va`, `physical` policies use one source
// each, then physical order); identical pages stored once, the copy stored being the first in plan order
// (equality confirmed by `equal`, never by the hash alone); blocks of `block_pages` slots in plan order with a
// forced boundary where the working set ends; the restore order is the plan order of blocks. Keyed pages
// (input.base_keys) come last, in blocks by key.
// Host pages larger than 4 KiB (input.regions): the first page of one that the order reaches brings all of its
// stored pages with it, in page order; a page of one is stored as a duplicate only of a page of the same host
// page; and a block never ends inside one (it ends before a host page that does not fit, and a host page with
// more stored pages than block_pages gets a block of its own, of up to 4096 slots), so that installing a host page
// reads exactly one block.
// Errors: whatever `equal` returns; kInvalidArgument for block_pages out of range or spans of other lengths.
Result<BlockPlan> PlanBlocks(const PlannerInput& input, const PagesEqual& equal);

// Only the page order (every kContent page once, hints first per the policy) and how many of its first
// entries came from the access trace. PlanBlocks uses it; exposed for the hint tests.
struct LayoutOrder {
  std::vector<uint32_t> order;
  uint64_t accessed = 0;
};
LayoutOrder PlanPageOrder(LayoutPolicy policy, std::span<const PlannedPageKind> pages,
                          std::span<const GlobalRun> access, std::span<const GlobalRun> va,
                          const HostPageGroups& groups = HostPageGroups({}));

// Cuts `n` items in plan order (slots, or pages) into blocks: [first, first + count) each, at most `block_pages`
// items, a boundary at `hot_end`, and never one between item i - 1 and item i when `joined(i)` (one host page),
// unless that host page alone has more than format::kMaxBlockPages items.
struct ItemRange {
  size_t first = 0;
  size_t count = 0;
};
std::vector<ItemRange> CutBlocks(size_t n, size_t hot_end, uint32_t block_pages,
                                 const std::function<bool(size_t)>& joined);

// Incremental saves (format-spec 12): the kInParent pages worth storing again. A flat checkpoint of the same
// content would group pages into blocks of `block_pages` in layout order (PlanPageOrder, kInParent pages counted as
// content); where at least `fraction` of such a group changed, its unchanged pages are returned, so that the child
// stores the whole group together and a restore of the chain reads one block for it, as a restore of the flat
// checkpoint would, instead of a child block and a parent block. Pages with `keep[g]` set are never returned (the
// caller has no bytes for them). fraction > 1 returns none. Ascending page order.
std::vector<uint64_t> PagesToStoreAgain(const PlannerInput& input, const std::vector<bool>& keep, double fraction);

}  // namespace halite::writer

#endif  // HALITE_WRITER_LAYOUT_PLANNER_H_
