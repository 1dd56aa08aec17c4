// Fuzz target: the index decoder (format-spec section 5 and the payload layout of section 2).
//
// Input: u64le index_offset (where the index sits in the file), then the index bytes. An index that decodes
// must obey the rules the reader relies on without rechecking them (slots, blocks, payload layout, limits) and
// re-encode to exactly the same bytes: every byte of an index is checked, so decoding loses nothing.
#include <algorithm>
#include <vector>

#include "format/encryption_codec.h"
#include "format/index_codec.h"
#include "fuzz_input.h"
#include "halite/format_constants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halite;
  fuzz::FuzzInput in(data, size);
  const uint64_t index_offset = in.U64();
  const auto index = in.Rest();
  auto m = format::DecodeIndex(index, index_offset, "fuzz.hlt");
  if (!m) {
    FUZZ_CHECK_MSG(m.error().code() == StatusCode::kCorrupt, m.error().ToString());
    return 0;
  }
  // Limits of section 6.
  FUZZ_CHECK(!m->regions.empty() && m->regions.size() <= format::kMaxRegions);
  FUZZ_CHECK(m->total_pages() <= format::kMaxTotalPages);
  FUZZ_CHECK(m->blobs.size() <= format::kMaxBlobs);
  FUZZ_CHECK(m->dictionary.size() <= format::kMaxDictionaryLength);
  uint64_t pages = 0;
  for (const auto& r : m->regions) {
    FUZZ_CHECK(r.first_page == pages);
    pages += r.page_count();
  }
  FUZZ_CHECK(pages == m->total_pages());
  // Payload layout: contiguous from the header to the index.
  uint64_t at = format::kHeaderSize, slots = 0;
  for (const auto& b : m->blocks) {
    FUZZ_CHECK(b.offset == at && b.first_slot == slots);
    FUZZ_CHECK(b.page_count >= 1 && b.page_count <= format::kMaxBlockPages);
    // 13.2: a sealed payload carries a tag (and a FRAMED one its frame table).
    const uint64_t tag = m->encryption.present ? format::kSealTagSize : 0;
    FUZZ_CHECK(b.compressed() ? b.stored_length > tag && (b.framed() || b.stored_length < b.raw_length() + tag)
                              : b.stored_length == b.raw_length() + tag);
    at += b.stored_length;
    slots += b.page_count;
  }
  for (const auto& b : m->blobs) {
    FUZZ_CHECK(b.offset == at && b.raw_length <= format::kMaxBlobRawLength);
    at += b.stored_length;
  }
  FUZZ_CHECK(at == index_offset);
  // Slots: every reference in range (the reader's Locate indexes tables with it).
  for (uint64_t g = 0; g < m->page_map.size(); ++g) {
    const uint32_t v = m->page_map[g];
    if (v == format::kPageMapInParent) {
      // 5.3, 5.10: only with a PARENT section, and inside the parent's pages.
      FUZZ_CHECK(m->parent.has_value() && g < m->parent->page_count);
    } else if (v >= format::kPageMapFirstSlot) {
      FUZZ_CHECK(v - format::kPageMapFirstSlot < slots);
    }
  }
  if (m->parent) {
    FUZZ_CHECK(m->parent->chain_depth >= 1 && m->parent->chain_depth <= format::kMaxChainDepth);
    FUZZ_CHECK(format::IsValidPathHint(m->parent->path_hint));
    // 5.3: a child's page map is sparse and leaves at least one page IN_PARENT.
    FUZZ_CHECK(m->sparse_page_map && m->page_map.empty() && m->page_map_entries.size() < m->total_pages());
    for (size_t i = 0; i < m->page_map_entries.size(); ++i) {
      const auto& e = m->page_map_entries[i];
      FUZZ_CHECK(e.page < m->total_pages() && (i == 0 || e.page > m->page_map_entries[i - 1].page));
      FUZZ_CHECK(e.value != format::kPageMapInParent);
      if (e.value >= format::kPageMapFirstSlot) FUZZ_CHECK(e.value - format::kPageMapFirstSlot < slots);
    }
  } else {
    FUZZ_CHECK(!m->sparse_page_map);
  }
  FUZZ_CHECK(m->page_hashes.empty() || m->page_hashes.size() == slots);
  FUZZ_CHECK(m->restore_order.size() == m->blocks.size() && m->working_set_blocks <= m->blocks.size());
  if (m->mac.present) {
    FUZZ_CHECK(m->mac.block_macs.size() == m->blocks.size() && m->mac.blob_macs.size() == m->blobs.size());
  }
  // Round trip.
  std::vector<uint8_t> again = format::EncodeIndex(*m);
  if (m->mac.present) {
    FUZZ_CHECK(m->mac_section_offset == again.size());
    auto mac = format::EncodeMacSection(m->mac);
    again.insert(again.end(), mac.begin(), mac.end());
  }
  if (m->encryption.present) {  // 13.5; the sealed sections were kept as stored and written back as they were
    FUZZ_CHECK(!m->mac.present && m->encryption_section_offset == again.size());
    auto section = format::EncodeEncryptionSection(m->encryption.cipher, m->encryption.index_tag);
    again.insert(again.end(), section.begin(), section.end());
  } else {
    FUZZ_CHECK(!m->sealed());
  }
  if (m->packed_page_map && m->FindSealed(uint32_t(format::SectionType::kPageMap)) == nullptr) {
    // 5.3, since 1.6: a PACKED page map may be any zstd frame of the plain body, which the encoder writes its own
    // way: the re-encoded index decodes to the same map, and encoding that again changes nothing.
    auto m2 = format::DecodeIndex(again, index_offset, "fuzz");
    FUZZ_CHECK(m2.has_value());
    FUZZ_CHECK(m2->page_map == m->page_map && m2->page_map_entries == m->page_map_entries);
    std::vector<uint8_t> third = format::EncodeIndex(*m2);
    FUZZ_CHECK(std::equal(third.begin(), third.end(), again.begin()));
    return 0;
  }
  FUZZ_CHECK(again.size() == index.size() && std::equal(again.begin(), again.end(), index.begin()));
  return 0;
}
