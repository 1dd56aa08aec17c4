// Plain value types describing a checkpoint's contents, shared by the writer, the reader and the tools.
#ifndef HALITE_CHECKPOINT_TYPES_H_
#define HALITE_CHECKPOINT_TYPES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "halite/export.h"
#include "halite/format_constants.h"

namespace halite {

using FileId = std::array<uint8_t, 16>;
using Uuid = std::array<uint8_t, 16>;

// Which VMM produced the checkpoint (format-spec 5.1).
enum class VmmKind : uint32_t { kRaw = 0, kQemu = 1, kXen = 2, kOther = 3 };
HALITE_EXPORT const char* VmmKindName(VmmKind kind);

struct HALITE_EXPORT Metadata {
  VmmKind vmm_kind = VmmKind::kRaw;
  Uuid vm_uuid{};
  uint64_t created_unix_ns = 0;
  std::string machine_type;  // e.g. "pc-i440fx-7.2"
  std::string creator;       // e.g. "libhalite 0.1.0 hlt-save"
  bool operator==(const Metadata&) const = default;
};

// A named range of guest memory (format-spec 5.2). Pages are 4096 bytes; host_page_size records what the
// restorer must install at once (e.g. 2 MiB for hugepage-backed memory).
struct HALITE_EXPORT Region {
  std::string name;
  uint64_t guest_phys_base = 0;
  uint64_t size = 0;
  uint32_t host_page_size = 4096;
  uint64_t first_page = 0;  // global number of its first page (derived, not stored)
  uint64_t page_count() const { return size / 4096; }
  bool operator==(const Region&) const = default;
};

// One locality block (format-spec 5.4).
struct HALITE_EXPORT BlockInfo {
  uint64_t offset = 0;
  uint32_t stored_length = 0;
  uint32_t page_count = 0;
  uint32_t flags = 0;
  uint32_t base_page = 0;  // BASED (since 1.4): a page whose parent view's block group is this block's base
  uint64_t checksum = 0;
  uint64_t first_slot = 0;  // derived
  // Derived: which file of a chain holds the block (format-spec 12): 0 the file opened, 1 its parent, ...
  uint32_t chain_level = 0;
  bool compressed() const { return flags & format::kBlockCompressed; }
  bool uses_dictionary() const { return flags & format::kBlockDictionary; }
  bool hot() const { return flags & format::kBlockHot; }
  bool framed() const { return flags & format::kBlockFramed; }
  bool based() const { return flags & format::kBlockBased; }
  uint64_t raw_length() const { return uint64_t{page_count} * format::kPageSize; }
  bool operator==(const BlockInfo&) const = default;
};

// One device-state blob (format-spec 5.5).
struct HALITE_EXPORT BlobInfo {
  std::string name;
  uint64_t offset = 0;
  uint64_t stored_length = 0;
  uint64_t raw_length = 0;
  uint32_t flags = 0;
  uint64_t checksum = 0;
  bool compressed() const { return flags & format::kBlobCompressed; }
  bool operator==(const BlobInfo&) const = default;
};

// How the writer chose the coding of a file's blocks (format-spec 5.12, the CODING section): frames and dictionary
// from a sample of blocks compressed each way it tried, and for a child, the parent's block groups it tried to code
// changed pages against. Informative: nothing a reader restores depends on it.
struct HALITE_EXPORT CodingRecord {
  struct Trial {
    uint32_t frame_pages = 0;       // frames of this many pages (0: one frame a block)
    uint32_t dictionary_bytes = 0;  // with a dictionary of this size (0: none)
    uint64_t sample_bytes = 0;      // the sample's compressed size so
    uint64_t estimate = 0;          // the file's block bytes that stands for, a dictionary's own size included
    bool operator==(const Trial&) const = default;
  };
  uint32_t frame_pages = 0;  // the frames chosen (0: one frame a block)
  uint32_t sample_blocks = 0;
  uint64_t sample_raw_bytes = 0;
  uint32_t base_groups_tried = 0;  // a child: the parent's groups holding a changed page's old version, read anyway
  uint32_t base_groups_used = 0;   // of those, the ones its blocks are coded against (BASED)
  std::vector<Trial> trials;       // at most 16
  bool operator==(const CodingRecord&) const = default;
};

// Where a page's content lives.
enum class PageKind : uint8_t { kAbsent = 0, kZero = 1, kStored = 2 };
HALITE_EXPORT const char* PageKindName(PageKind kind);

struct HALITE_EXPORT PageLocation {
  PageKind kind = PageKind::kAbsent;
  uint32_t block = 0;  // valid when kind == kStored
  uint32_t slot_in_block = 0;
};

// A page named by region and page number within it.
struct HALITE_EXPORT PageRef {
  uint32_t region = 0;
  uint64_t page = 0;
  bool operator==(const PageRef&) const = default;
};

}  // namespace halite

#endif  // HALITE_CHECKPOINT_TYPES_H_
