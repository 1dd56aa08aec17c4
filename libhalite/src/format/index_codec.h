// The index of a checkpoint (format-spec section 5): encode, and decode with every rule checked. Pure: no I/O.
#ifndef HALITE_FORMAT_INDEX_CODEC_H_
#define HALITE_FORMAT_INDEX_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "halite/checkpoint_types.h"
#include "halite/status.h"

namespace halite::format {

// Everything the index says, as plain values. Derived fields (Region::first_page, BlockInfo::first_slot) are
// filled by DecodeIndex and ignored by EncodeIndex.
struct IndexModel {
  Metadata metadata;
  std::vector<Region> regions;
  std::vector<uint32_t> page_map;  // one entry per global page (5.3)
  std::vector<BlockInfo> blocks;
  std::vector<BlobInfo> blobs;
  std::vector<uint32_t> restore_order;
  uint32_t working_set_blocks = 0;
  std::vector<uint8_t> dictionary;  // empty when absent
  uint64_t total_pages() const { return page_map.size(); }
};

std::vector<uint8_t> EncodeIndex(const IndexModel& model);

// Decodes `index` (the bytes at file offset `index_offset`) and checks every rule of section 5 and the payload
// layout of section 2. Does not verify the index checksum (the caller does, from the footer) nor payloads.
// `name` is used in messages; every error is kCorrupt and names the offset.
Result<IndexModel> DecodeIndex(std::span<const uint8_t> index, uint64_t index_offset, const std::string& name);

// Checks that `s` is a valid region/blob name or metadata string (printable ASCII, length limits).
bool IsPrintableAscii(const std::string& s);

}  // namespace halite::format

#endif  // HALITE_FORMAT_INDEX_CODEC_H_
