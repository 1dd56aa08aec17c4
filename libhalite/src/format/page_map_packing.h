// The PACKED PAGE_MAP (format-spec 5.3, since 1.6): the plain page-map body (dense or sparse) delta-coded by u32
// words and compressed as one zstd frame. A mostly zero memory has a page map of runs of one value, and a memory
// stored in page order one of runs of consecutive slots; both code to next to nothing. Pure: no I/O.
#ifndef HALITE_FORMAT_PAGE_MAP_PACKING_H_
#define HALITE_FORMAT_PAGE_MAP_PACKING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "halite/status.h"

namespace halite::format {

// The delta stride in u32 words: 1 for a dense map (each entry against the page before), 2 for a sparse one (each
// field of an entry against the same field of the entry before; the u64 entry_count's two words against zero).
inline uint32_t PageMapDeltaStride(bool sparse) { return sparse ? 2 : 1; }

// Packs a plain body (a multiple of 4 bytes). Deterministic for one zstd version.
Result<std::vector<uint8_t>> PackPageMap(std::span<const uint8_t> plain, bool sparse);

// Unpacks a packed body into the plain body, checking before allocating that the zstd frame declares a content
// size that is a multiple of 4 and at most `max_plain` (and exactly `max_plain` when `exact`), that the packed
// body is shorter than the plain one, and that nothing follows the frame. Errors are kCorrupt, without position
// (the caller names the section and its offset).
Result<std::vector<uint8_t>> UnpackPageMap(std::span<const uint8_t> packed, bool sparse, uint64_t max_plain,
                                           bool exact);

}  // namespace halite::format

#endif  // HALITE_FORMAT_PAGE_MAP_PACKING_H_
