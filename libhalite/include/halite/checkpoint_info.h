// What `hlt-restore info` shows of a checkpoint, computed by the library so that the tool, the C API
// (hlt_reader_get_info, hlt_reader_info_json) and the bindings over it give the same figures.
#ifndef HALITE_CHECKPOINT_INFO_H_
#define HALITE_CHECKPOINT_INFO_H_

#include <array>
#include <cstdint>
#include <string>

#include "halite/checkpoint_reader.h"
#include "halite/export.h"

namespace halite {

// Page and block counts of a checkpoint's view (a chain's: every file's pages as this checkpoint sees them).
// A sealed reader (opened without its key, format-spec 13.7) has no page map: the page counts are 0.
struct HALITE_EXPORT CheckpointCounts {
  uint64_t absent = 0, zero = 0, stored = 0;
  uint64_t duplicates = 0;  // stored pages that share a slot with another page
  uint64_t slots = 0;       // distinct block slots in use
  uint64_t block_bytes = 0, blob_bytes = 0;
  uint64_t compressed_blocks = 0, dict_blocks = 0, framed_blocks = 0, hot_blocks = 0;
  uint32_t min_stored = 0, max_stored = 0, min_pages = 0, max_pages = 0;
};

// One pass over the page map and the block table: O(pages + blocks). Thread-safe on a shared reader.
HALITE_EXPORT CheckpointCounts CountCheckpoint(const CheckpointReader& reader);
// Pages of the regions (also known for a sealed reader).
HALITE_EXPORT uint64_t RegionPages(const CheckpointReader& reader);
// A 16-byte id (file id, VM UUID) as 8-4-4-4-12 hexadecimal.
HALITE_EXPORT std::string HexId(const std::array<uint8_t, 16>& id);
// The JSON document `hlt-restore info --json` prints (one line and a newline), from `counts` of the same reader.
HALITE_EXPORT std::string CheckpointInfoJson(const CheckpointReader& reader, const CheckpointCounts& counts);
// The text `hlt-restore info` prints: format, vmm, regions, pages, blocks, coding, keys, blobs, hints, index and
// chain, a line (or a few) each.
HALITE_EXPORT std::string CheckpointInfoText(const CheckpointReader& reader, const CheckpointCounts& counts);
// What hlt-restore verify prints of a checkpoint `reader` verified (VerifyAll): "CKPT: OK (N blocks, ...)", or for a
// checkpoint opened without its key "CKPT: OK without the key (...)". `mac_verified`: it was opened with a MAC key.
HALITE_EXPORT std::string VerifiedText(const std::string& checkpoint, const CheckpointReader& reader,
                                       bool mac_verified);

}  // namespace halite

#endif  // HALITE_CHECKPOINT_INFO_H_
