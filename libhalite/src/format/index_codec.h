// The index of a checkpoint (format-spec section 5): encode, and decode with every rule checked. Pure: no I/O.
#ifndef HALITE_FORMAT_INDEX_CODEC_H_
#define HALITE_FORMAT_INDEX_CODEC_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "halite/checkpoint_types.h"
#include "halite/format_constants.h"
#include "halite/status.h"

namespace halite::format {

// The MAC section (5.8). Checked against a key by the reader, not by the decoder.
struct MacSection {
  bool present = false;
  std::array<uint8_t, 32> index_mac{};
  std::vector<std::array<uint8_t, 16>> block_macs;
  std::vector<std::array<uint8_t, 16>> blob_macs;
};

// A section an older reader may skip (5.9): kept as bytes, interpreted only by readers that know its type.
struct SkippableSection {
  uint32_t type = 0;  // has kSkippableSectionBit set
  std::vector<uint8_t> body;
  uint32_t flags = 0;  // 0, or kSectionFlagSealed (13.4): the body is sealed, and is kept sealed
};

// 13.4, since 1.5: a SEALED section as stored, kept by a decoder that has no key (and re-encoded as it is).
struct SealedSection {
  uint32_t type = 0;
  uint32_t flags = 0;  // kSectionFlagSealed, with kSectionFlagSparse for a child's PAGE_MAP
  std::vector<uint8_t> body;  // ciphertext and tag
};

// 13.5, since 1.5: the ENCRYPTION section.
struct EncryptionSection {
  bool present = false;
  uint32_t cipher = 0;
  std::array<uint8_t, 16> index_tag{};
};

// 13.4: opens a SEALED section's body (type, flags and body as stored) into the plain body. Errors (kAuthFailed
// when the tag fails) are reported with the section's offset.
using SectionUnsealer =
    std::function<Result<std::vector<uint8_t>>(uint32_t type, uint32_t flags, std::span<const uint8_t> body)>;
// 13.4: seals a plain section body; `flags` already has kSectionFlagSealed. Returns ciphertext and tag.
using SectionSealer =
    std::function<std::vector<uint8_t>(uint32_t type, uint32_t flags, std::span<const uint8_t> plain)>;

// The PARENT section (5.10, since 1.2): the file this one's IN_PARENT pages come from.
struct ParentSection {
  FileId file_id{};                      // the parent's file_id
  std::array<uint8_t, 16> fingerprint{};  // section 12: XXH3_128 of the parent's header, index and footer
  uint64_t page_count = 0;               // the parent's total pages
  uint32_t chain_depth = 0;              // parent links below this file: 1 when the parent has no parent
  std::string path_hint;                 // the parent's path relative to this file's directory
  bool operator==(const ParentSection&) const = default;
};

// One listed page of a sparse PAGE_MAP (5.3, since 1.2).
struct PageMapEntry {
  uint32_t page = 0;
  uint32_t value = 0;  // absent, zero or slot + 2; never IN_PARENT
  bool operator==(const PageMapEntry&) const = default;
};

// Everything the index says, as plain values. Derived fields (Region::first_page, BlockInfo::first_slot) are
// filled by DecodeIndex and ignored by EncodeIndex.
struct IndexModel {
  Metadata metadata;
  std::vector<Region> regions;
  std::vector<uint32_t> page_map;  // one entry per global page (5.3); empty when decoded from a sparse PAGE_MAP
  // 5.3, since 1.2, in a file with PARENT: the PAGE_MAP as stored (the pages that are not IN_PARENT), kept sparse
  // by the decoder so that nothing is allocated per page before the parent is verified; MaterializePageMap() makes
  // page_map from it. EncodeIndex writes a file with PARENT this way, from page_map when it is filled.
  bool sparse_page_map = false;
  // 5.3, since 1.6: the PAGE_MAP is stored PACKED (delta-coded and compressed). Decode: as stored; encode: what
  // EncodeIndex writes (ChoosePageMapPacking sets it when that makes the section shorter).
  bool packed_page_map = false;
  std::vector<PageMapEntry> page_map_entries;
  uint64_t page_count = 0;  // total pages from REGIONS (decode)
  std::vector<BlockInfo> blocks;
  std::vector<BlobInfo> blobs;
  std::vector<uint32_t> restore_order;
  uint32_t working_set_blocks = 0;
  std::vector<uint8_t> dictionary;  // empty when absent
  std::optional<ParentSection> parent;  // 5.10
  std::vector<uint64_t> page_hashes;    // 5.11: one per stored slot, or empty when the file has no PAGE_HASHES
  std::optional<CodingRecord> coding;   // 5.12: the CODING section, when present
  std::vector<SkippableSection> skippable_sections;  // in file order (increasing type), before MAC (5.9)
  MacSection mac;                   // mac.present says whether the MAC section exists (5.8)
  size_t mac_section_offset = 0;    // where the MAC section starts inside the index (decode only)
  // Section 13, since 1.5. Decoded without a key, the SEALED sections stay as stored here (PAGE_MAP, DICTIONARY
  // and PAGE_HASHES are then empty, and no rule that needs them was checked); EncodeIndex writes them back as
  // they are. With a key (an unsealer), they are opened and decoded as any section, and this stays empty.
  std::vector<SealedSection> sealed_sections;
  EncryptionSection encryption;
  size_t encryption_section_offset = 0;  // where the ENCRYPTION section starts inside the index (decode only)
  bool sealed() const { return !sealed_sections.empty(); }
  const SealedSection* FindSealed(uint32_t type) const;
  uint64_t total_pages() const { return sparse_page_map || page_map.empty() ? page_count : page_map.size(); }
  uint64_t total_slots() const { return blocks.empty() ? 0 : blocks.back().first_slot + blocks.back().page_count; }
  // Fills page_map from a sparse PAGE_MAP: every page IN_PARENT but the listed ones. Allocates 4 bytes a page:
  // call once the parent is verified (section 12).
  void MaterializePageMap();
};

// Encodes every section but MAC and ENCRYPTION (model.mac and model.encryption are ignored): they cover these
// bytes. Skippable sections are written after the required ones, in the order given (the caller keeps their types
// increasing); PAGE_HASHES, when model.page_hashes is not empty, and CODING, when model.coding is set, go among them in type
// order (CODING is never sealed). With `seal`
// (an encrypted file, 13.4), PAGE_MAP, DICTIONARY and PAGE_HASHES are sealed; a section in
// model.sealed_sections is written as it is stored there.
std::vector<uint8_t> EncodeIndex(const IndexModel& model, const SectionSealer* seal = nullptr);
// The MAC section, to append after EncodeIndex's bytes.
std::vector<uint8_t> EncodeMacSection(const MacSection& mac);

// Decodes `index` (the bytes at file offset `index_offset`) and checks every rule of section 5 and the payload
// layout of section 2. Does not verify the index checksum (the caller does, from the footer) nor payloads.
// `name` is used in messages; every error is kCorrupt and names the offset. A SEALED section (13.4) is opened with
// `unseal` and decoded as any section (its errors keep their code: kAuthFailed for a tag); without one it is
// only measured and kept in model.sealed_sections.
Result<IndexModel> DecodeIndex(std::span<const uint8_t> index, uint64_t index_offset, const std::string& name,
                               const SectionUnsealer* unseal = nullptr);

// 5.9: a section type with the high bit set may be skipped by a reader that does not know it.
inline bool IsSkippableSection(uint32_t type) { return (type & kSkippableSectionBit) != 0; }

// 5.3, since 1.6: sets model->packed_page_map when the packed PAGE_MAP is shorter than the plain one (call with
// page_map, parent and regions set, before the header's minor version is chosen).
Status ChoosePageMapPacking(IndexModel* model);

// Section 9: the lowest minor version whose features `model` uses (6 with a packed PAGE_MAP, else 5 encrypted, else 4 with a BASED block, else 3
// with a FRAMED block, else 2 with a PARENT section, else 1 with a skippable section, else 0).
uint16_t MinimumMinorVersion(const IndexModel& model);

// Section 9: each feature of a later minor that `model` uses, newest first (for messages that name them).
struct VersionedFeature {
  uint16_t minor;
  const char* name;
};
std::vector<VersionedFeature> VersionedFeatures(const IndexModel& model);

// 5.10: a path hint is 1..1024 printable ASCII bytes, relative (no leading '/'), with no empty component.
bool IsValidPathHint(const std::string& s);

// Checks that `s` is a valid region/blob name or metadata string (printable ASCII, length limits).
bool IsPrintableAscii(const std::string& s);

}  // namespace halite::format

#endif  // HALITE_FORMAT_INDEX_CODEC_H_
