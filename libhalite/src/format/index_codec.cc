#include "format/index_codec.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "format/page_map_packing.h"
#include "halite/bytes.h"
#include "halite/format_constants.h"

namespace halite::format {
namespace {

// Writes one section as stored: header, body, zero padding.
void WriteStored(ByteWriter& w, uint32_t type, uint32_t flags, std::span<const uint8_t> body) {
  w.U32(type);
  w.U32(flags);
  w.U64(body.size());
  size_t start = w.size();
  w.Bytes(body.data(), body.size());
  w.PadTo(start, 8);
}

// Writes one section: header, body produced by `body`, zero padding.
template <typename F>
void WriteSection(ByteWriter& w, SectionType type, F body, uint32_t flags = 0) {
  std::vector<uint8_t> b;
  ByteWriter bw(&b);
  body(bw);
  WriteStored(w, static_cast<uint32_t>(type), flags, b);
}

// A section that reveals content (13.4): as stored in `model.sealed_sections` when it came sealed from a decoder
// without the key, sealed with `seal` in an encrypted file, plain otherwise.
template <typename F>
void WriteContentSection(ByteWriter& w, const IndexModel& model, uint32_t type, F body, uint32_t flags,
                         const SectionSealer* seal) {
  if (const SealedSection* stored = model.FindSealed(type)) {
    WriteStored(w, type, stored->flags, stored->body);
    return;
  }
  std::vector<uint8_t> b;
  ByteWriter bw(&b);
  body(bw);
  if (seal == nullptr) {
    WriteStored(w, type, flags, b);
    return;
  }
  const std::vector<uint8_t> sealed = (*seal)(type, flags | kSectionFlagSealed, b);
  WriteStored(w, type, flags | kSectionFlagSealed, sealed);
}

// Decoding context: the index bytes, where they sit in the file, and the file's name for messages.
class Decoder {
 public:
  Decoder(std::span<const uint8_t> index, uint64_t index_offset, const std::string& name,
          const SectionUnsealer* unseal)
      : index_(index), index_offset_(index_offset), name_(name), unseal_(unseal) {}

  Result<IndexModel> Run();

 private:
  Status Err(uint64_t file_offset, const std::string& section, const std::string& what) const {
    return Status::Corrupt(name_ + ": index " + section + " at offset " + fmt::format("{:#x}", file_offset) + ": " + what);
  }
  Status CheckZero(ByteCursor& c, size_t n, const std::string& section, const char* field) {
    uint64_t at = c.file_offset();
    auto bytes = c.Bytes(n);
    if (!c.ok()) return Err(at, section, std::string("truncated at ") + field);
    for (size_t i = 0; i < n; ++i) {
      if (bytes[i] != 0) return Err(at + i, section, std::string(field) + " is not zero");
    }
    return Status::Ok();
  }
  Status CheckPadding(ByteCursor& c, size_t entry_start, const std::string& section) {
    size_t pad = (8 - (c.pos() - entry_start) % 8) % 8;
    return CheckZero(c, pad, section, "padding");
  }

  Status DecodeMetadata(std::span<const uint8_t> body, uint64_t at);
  Status DecodeRegions(std::span<const uint8_t> body, uint64_t at);
  Status DecodePageMap(std::span<const uint8_t> body, uint64_t at, uint32_t flags);
  Status DecodePlainPageMap(std::span<const uint8_t> body, uint64_t at, bool sparse);
  Status CheckSparsePageMap(std::vector<bool>* used);
  Status DecodeBlocks(std::span<const uint8_t> body, uint64_t at);
  Status DecodeBlobs(std::span<const uint8_t> body, uint64_t at);
  Status DecodeRestoreOrder(std::span<const uint8_t> body, uint64_t at);
  Status DecodeDictionary(std::span<const uint8_t> body, uint64_t at);
  Status DecodeParent(std::span<const uint8_t> body, uint64_t at);
  Status DecodePageHashes(std::span<const uint8_t> body, uint64_t at);
  Status DecodeCoding(std::span<const uint8_t> body, uint64_t at);
  Status DecodeMac(std::span<const uint8_t> body, uint64_t at);
  Status DecodeEncryption(std::span<const uint8_t> body, uint64_t at);
  // 13.4: a SEALED section. With a key, opens it and decodes the plain body; without, checks its length and keeps
  // it. *handled is false for a sealed skippable section of a type this reader does not know (kept sealed).
  Status DecodeSealed(uint32_t type, uint32_t flags, const std::string& sname, std::span<const uint8_t> body,
                      uint64_t at, uint64_t body_at);
  Status CheckSealedLength(uint32_t type, const std::string& sname, uint64_t length, uint64_t at);
  Status DecodeKnown(uint32_t type, uint32_t flags, std::span<const uint8_t> body, uint64_t at, uint64_t body_at);
  Status CheckSealing();
  Status CheckPayloadLengths() const;
  Status CrossCheck();
  Status CheckPageMapReferences();

  std::span<const uint8_t> index_;
  uint64_t index_offset_;
  const std::string& name_;
  const SectionUnsealer* unseal_;
  IndexModel m_;
  uint64_t total_slots_ = 0;
  // 13.4: which sections were SEALED, and whether the page map and the dictionary could be read.
  bool any_sealed_ = false, page_map_sealed_ = false, dictionary_sealed_ = false, page_hashes_sealed_ = false;
  bool page_map_opaque_ = false, dictionary_present_ = false;
  uint64_t sealed_at_ = 0;
  std::vector<uint64_t> blob_entry_at_;  // where each BLOBS entry starts (file offset), for messages
  uint64_t page_map_at_ = 0, blocks_at_ = 0, blobs_at_ = 0, order_at_ = 0, dictionary_at_ = 0, parent_at_ = 0;
};

const char* SectionName(uint32_t type) {
  switch (static_cast<SectionType>(type)) {
    case SectionType::kMetadata: return "METADATA";
    case SectionType::kRegions: return "REGIONS";
    case SectionType::kPageMap: return "PAGE_MAP";
    case SectionType::kBlocks: return "BLOCKS";
    case SectionType::kBlobs: return "BLOBS";
    case SectionType::kRestoreOrder: return "RESTORE_ORDER";
    case SectionType::kDictionary: return "DICTIONARY";
    case SectionType::kMac: return "MAC";
    case SectionType::kParent: return "PARENT";
    case SectionType::kEncryption: return "ENCRYPTION";
  }
  return "unknown";
}

bool IsKnownRequiredType(uint32_t type) {
  return (type >= 1 && type <= static_cast<uint32_t>(SectionType::kParent)) ||
         type == static_cast<uint32_t>(SectionType::kEncryption);
}

bool IsLastSection(uint32_t type) {
  return type == static_cast<uint32_t>(SectionType::kMac) || type == static_cast<uint32_t>(SectionType::kEncryption);
}

// 13.4: the flags a section may carry: SPARSE on PAGE_MAP (5.3), SEALED on the sections that reveal content and on
// skippable ones.
uint32_t AllowedFlags(uint32_t type) {
  if (type == kCodingSectionType) return 0;  // 13.4: CODING reveals no content; it is never sealed
  if (IsSkippableSection(type)) return kSectionFlagSealed;
  switch (static_cast<SectionType>(type)) {
    case SectionType::kPageMap: return kSectionFlagSparse | kSectionFlagSealed | kSectionFlagPacked;
    case SectionType::kDictionary: return kSectionFlagSealed;
    default: return 0;
  }
}

// Position of a non-skippable section type in the required order of section 5: METADATA..DICTIONARY, then the
// sections later minors added (PARENT), then MAC, always last.
uint32_t SectionRank(uint32_t type) {
  if (type == static_cast<uint32_t>(SectionType::kParent)) return 8;
  if (IsLastSection(type)) return 100;  // MAC or ENCRYPTION: at most one of them, last
  return type;
}

Result<IndexModel> Decoder::Run() {
  ByteCursor c(index_, index_offset_);
  uint32_t last_type = 0;       // the last non-skippable section
  uint32_t last_rank = 0;       // its SectionRank
  uint32_t last_skippable = 0;  // the last skippable section, 0 before the first
  const uint32_t restore_order_rank = static_cast<uint32_t>(SectionType::kRestoreOrder);
  while (c.remaining() > 0) {
    uint64_t at = c.file_offset();
    if (!c.Has(kSectionHeaderSize)) return Err(at, "section header", "truncated (16 bytes expected)");
    uint32_t type = c.U32();
    uint32_t flags = c.U32();
    uint64_t len = c.U64();
    const bool skippable = IsSkippableSection(type);
    if (!skippable && !IsKnownRequiredType(type)) {
      return Err(at, "section header", fmt::format("unknown section type {} (not skippable: types {:#x} and above "
                                                   "are the skippable ones)",
                                                   type, kSkippableSectionBit));
    }
    std::string sname = skippable ? (type == kPageHashesSectionType ? std::string("PAGE_HASHES")
                                     : type == kCodingSectionType   ? std::string("CODING")
                                                                    : fmt::format("skippable section {:#x}", type))
                                  : SectionName(type);
    if (skippable) {
      // 5.9: skippable sections follow every required section, precede MAC, in increasing type order.
      if (last_rank < restore_order_rank) {
        return Err(at, sname, "before the required section " + std::string(SectionName(last_type + 1)) +
                                  " (skippable sections follow every required section)");
      }
      if (IsLastSection(last_type)) {
        return Err(at, sname, "after " + std::string(SectionName(last_type)) + " (" + SectionName(last_type) +
                                  " is always the last section)");
      }
      if (type <= last_skippable) {
        return Err(at, sname, fmt::format("out of order or repeated (after skippable section {:#x})", last_skippable));
      }
      last_skippable = type;
    } else {
      const uint32_t rank = SectionRank(type);
      if (rank <= last_rank) {
        return Err(at, sname, "section out of order or repeated (after " + std::string(SectionName(last_type)) + ")");
      }
      if (last_rank + 1 != rank && last_rank < restore_order_rank) {
        return Err(at, sname, "required section " + std::string(SectionName(last_type + 1)) + " is missing");
      }
      if (last_skippable != 0 && !IsLastSection(type)) {
        return Err(at, sname, fmt::format("after skippable section {:#x} (only MAC or ENCRYPTION may follow a "
                                          "skippable section)",
                                          last_skippable));
      }
      last_type = type;
      last_rank = rank;
    }
    if (flags & ~AllowedFlags(type)) {
      return Err(at + 4, sname, "reserved section flags " + fmt::format("{:#x}", flags & ~AllowedFlags(type)) +
                                    " (expected 0)");
    }
    if (len > c.remaining()) {
      return Err(at + 8, sname, "body_length " + std::to_string(len) + " exceeds the " +
                                    std::to_string(c.remaining()) + " bytes left in the index");
    }
    uint64_t body_at = c.file_offset();
    auto body = c.Bytes(len);
    size_t start = c.pos() - len;
    HLT_RETURN_IF_ERROR(CheckPadding(c, start, sname));
    if (flags & kSectionFlagSealed) {
      HLT_RETURN_IF_ERROR(DecodeSealed(type, flags, sname, body, at, body_at));
      continue;
    }
    HLT_RETURN_IF_ERROR(DecodeKnown(type, flags, body, at, body_at));
  }
  if (last_rank < restore_order_rank) {
    return Err(c.file_offset(), "end", "required section " + std::string(SectionName(last_type + 1)) + " is missing");
  }
  HLT_RETURN_IF_ERROR(CheckSealing());
  HLT_RETURN_IF_ERROR(CheckPayloadLengths());
  HLT_RETURN_IF_ERROR(CrossCheck());
  return std::move(m_);
}

// 5.4 and 5.5: a payload's stored_length against its raw length; 13.2 and 13.3: sealed payloads carry their tags
// (and a FRAMED block its frame table), whose exact size only the block itself says.
Status Decoder::CheckPayloadLengths() const {
  const bool sealed = m_.encryption.present;
  const uint64_t tag = sealed ? kSealTagSize : 0;
  for (size_t i = 0; i < m_.blocks.size(); ++i) {
    const BlockInfo& b = m_.blocks[i];
    const uint64_t eat = blocks_at_ + 8 + kBlockEntrySize * i, raw = b.raw_length(), len = b.stored_length;
    const std::string es = "BLOCKS entry " + std::to_string(i);
    if (!b.compressed()) {
      if (len != raw + tag) {
        return Err(eat + 8, es, fmt::format("raw stored_length {} (expected {}{})", len, raw + tag,
                                            sealed ? ": the pages and a tag" : ""));
      }
      continue;
    }
    // A FRAMED sealed block: a frame table (4 + 8 a frame) and a tag a frame, 2..page_count frames.
    const uint64_t min = !sealed ? 1 : b.framed() ? kFrameTableFixedSize + 2 * (kFrameTableEntrySize + tag + 1) : tag + 1;
    const uint64_t limit = !sealed ? raw : b.framed() ? raw + kFrameTableFixedSize + uint64_t(b.page_count) * 24 : raw + tag;
    if (len < min || len >= limit) {
      return Err(eat + 8, es, fmt::format("compressed stored_length {} (expected {}..{}{})", len, min, limit - 1,
                                          sealed ? ", sealed" : ""));
    }
  }
  for (size_t i = 0; i < m_.blobs.size(); ++i) {
    const BlobInfo& b = m_.blobs[i];
    const std::string es = "BLOBS entry " + std::to_string(i);
    if (b.compressed()) {
      if (b.stored_length < 1 + tag || b.stored_length >= b.raw_length + tag) {
        return Err(blob_entry_at_[i] + 8, es, fmt::format("compressed stored_length {} (expected {}..raw_length{}-1)",
                                                          b.stored_length, 1 + tag, sealed ? "+16" : ""));
      }
    } else if (b.stored_length != b.raw_length + tag) {
      return Err(blob_entry_at_[i] + 8, es, fmt::format("raw stored_length {} != raw_length {}{}", b.stored_length,
                                                        b.raw_length, sealed ? " + 16 (a tag)" : ""));
    }
  }
  return Status::Ok();
}

// A section's plain body (as stored, or opened from its SEALED form).
Status Decoder::DecodeKnown(uint32_t type, uint32_t flags, std::span<const uint8_t> body, uint64_t at,
                            uint64_t body_at) {
  if (IsSkippableSection(type)) {
    if (type == kPageHashesSectionType) return DecodePageHashes(body, body_at);  // 5.11: its own rules apply
    if (type == kCodingSectionType) return DecodeCoding(body, body_at);  // 5.12, likewise
    // Not interpreted: a reader that knows the type reads it from here; every other reader ignores it.
    m_.skippable_sections.push_back(SkippableSection{type, std::vector<uint8_t>(body.begin(), body.end()), flags});
    return Status::Ok();
  }
  switch (static_cast<SectionType>(type)) {
    case SectionType::kMetadata: return DecodeMetadata(body, body_at);
    case SectionType::kRegions: return DecodeRegions(body, body_at);
    case SectionType::kPageMap: return DecodePageMap(body, body_at, flags);
    case SectionType::kBlocks: return DecodeBlocks(body, body_at);
    case SectionType::kBlobs: return DecodeBlobs(body, body_at);
    case SectionType::kRestoreOrder: return DecodeRestoreOrder(body, body_at);
    case SectionType::kDictionary:
      dictionary_at_ = at;
      dictionary_present_ = true;
      return DecodeDictionary(body, body_at);
    case SectionType::kParent:
      parent_at_ = at;
      return DecodeParent(body, body_at);
    case SectionType::kMac:
      m_.mac_section_offset = size_t(at - index_offset_);
      return DecodeMac(body, body_at);
    case SectionType::kEncryption:
      m_.encryption_section_offset = size_t(at - index_offset_);
      return DecodeEncryption(body, body_at);
  }
  return Err(at, "section header", "unknown section type " + std::to_string(type));
}

Status Decoder::DecodeSealed(uint32_t type, uint32_t flags, const std::string& sname, std::span<const uint8_t> body,
                             uint64_t at, uint64_t body_at) {
  any_sealed_ = true;
  if (sealed_at_ == 0) sealed_at_ = at;
  const bool page_map = type == static_cast<uint32_t>(SectionType::kPageMap);
  page_map_sealed_ |= page_map;
  dictionary_sealed_ |= type == static_cast<uint32_t>(SectionType::kDictionary);
  page_hashes_sealed_ |= type == kPageHashesSectionType;
  HLT_RETURN_IF_ERROR(CheckSealedLength(type, sname, body.size(), at));
  const bool known = !IsSkippableSection(type) || type == kPageHashesSectionType;
  if (!known) {
    // A skippable type this reader does not know: kept as stored, sealed or not (13.4).
    m_.skippable_sections.push_back(SkippableSection{type, std::vector<uint8_t>(body.begin(), body.end()), flags});
    return Status::Ok();
  }
  if (unseal_ == nullptr) {
    // No key: measured (CheckSealedLength), kept for whoever has the key, and the rules that need it skipped.
    m_.sealed_sections.push_back(SealedSection{type, flags, std::vector<uint8_t>(body.begin(), body.end())});
    if (page_map) {
      page_map_opaque_ = true;
      page_map_at_ = body_at;
      m_.sparse_page_map = (flags & kSectionFlagSparse) != 0;
      m_.packed_page_map = (flags & kSectionFlagPacked) != 0;
      for (auto& r : m_.regions) m_.page_count += r.page_count();
    }
    if (type == static_cast<uint32_t>(SectionType::kDictionary)) {
      dictionary_at_ = at;
      dictionary_present_ = true;
    }
    return Status::Ok();
  }
  Result<std::vector<uint8_t>> plain = (*unseal_)(type, flags, body);
  if (!plain) {
    return Status(plain.error().code(), name_ + ": index " + sname + " at offset " + fmt::format("{:#x}", at) + ": " +
                                            plain.error().message());
  }
  // The plaintext lies where its ciphertext does: offsets inside it are file offsets as for a plain body.
  return DecodeKnown(type, flags & ~kSectionFlagSealed, *plain, at, body_at);
}

// 13.4: a sealed body's length, checked before the key (and so without it).
Status Decoder::CheckSealedLength(uint32_t type, const std::string& sname, uint64_t length, uint64_t at) {
  if (length < kSealTagSize) return Err(at + 8, sname, "sealed body_length " + std::to_string(length) + " (less than a tag)");
  const uint64_t plain = length - kSealTagSize;
  uint64_t total = 0;
  for (auto& r : m_.regions) total += r.page_count();
  std::string expected;
  if (type == static_cast<uint32_t>(SectionType::kPageMap)) {
    // The SPARSE flag was read with the header; a dense map is 4 bytes a page, a sparse one 8 + 8 an entry.
    const uint32_t flags = LoadLe32(&index_[size_t(at - index_offset_) + 4]);
    const uint64_t plain_max = (flags & kSectionFlagSparse) ? kSparsePageMapFixedSize + kSparsePageMapEntrySize * total
                                                            : 4 * total;
    if (flags & kSectionFlagPacked) {
      // 5.3, since 1.6: a zstd frame shorter than the plain body it holds.
      if (plain == 0 || plain >= plain_max) {
        expected = "16 + 1.." + std::to_string(plain_max - 1) + " (packed: shorter than the plain body)";
      }
    } else if (flags & kSectionFlagSparse) {
      if (plain < kSparsePageMapFixedSize || (plain - kSparsePageMapFixedSize) % kSparsePageMapEntrySize != 0 ||
          (plain - kSparsePageMapFixedSize) / kSparsePageMapEntrySize > total) {
        expected = "16 + 8 + 8 x entries, at most " + std::to_string(total) + " entries";
      }
    } else if (plain != 4 * total) {
      expected = "16 + 4 x " + std::to_string(total) + " pages";
    }
  } else if (type == static_cast<uint32_t>(SectionType::kDictionary)) {
    if (plain < kMinDictionaryLength || plain > kMaxDictionaryLength) expected = "16 + 8..1 MiB";
  } else if (type == kPageHashesSectionType) {
    if (plain != kPageHashesFixedSize + 8 * total_slots_ || total_slots_ == 0) {
      expected = "16 + 8 + 8 x " + std::to_string(total_slots_) + " stored slots";
    }
  }
  if (expected.empty()) return Status::Ok();
  return Err(at + 8, sname, "sealed body_length " + std::to_string(length) + " (expected " + expected + ")");
}

// 13.4: SEALED only in an encrypted file, and there always on the sections that reveal content.
Status Decoder::CheckSealing() {
  if (!m_.encryption.present) {
    if (any_sealed_) return Err(sealed_at_, "section header", "SEALED section in a file without ENCRYPTION");
    return Status::Ok();
  }
  if (!page_map_sealed_) return Err(page_map_at_, "PAGE_MAP", "not SEALED in an encrypted file (13.4)");
  if (dictionary_present_ && !dictionary_sealed_) {
    return Err(dictionary_at_, "DICTIONARY", "not SEALED in an encrypted file (13.4)");
  }
  if (!m_.page_hashes.empty() && !page_hashes_sealed_) {
    return Err(page_map_at_, "PAGE_HASHES", "not SEALED in an encrypted file (13.4)");
  }
  return Status::Ok();
}

Status Decoder::DecodeEncryption(std::span<const uint8_t> body, uint64_t at) {
  const std::string s = "ENCRYPTION";
  if (body.size() != kEncryptionSectionSize) {
    return Err(at, s, "body_length " + std::to_string(body.size()) + " (expected 24)");
  }
  ByteCursor c(body, at);
  m_.encryption.cipher = c.U32();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  if (m_.encryption.cipher != kCipherAes256Gcm && m_.encryption.cipher != kCipherXChaCha20Poly1305) {
    return Err(at, s, "cipher " + std::to_string(m_.encryption.cipher) + " (expected 1 AES-256-GCM or 2 "
                      "XChaCha20-Poly1305)");
  }
  auto tag = c.Bytes(16);
  std::copy(tag.begin(), tag.end(), m_.encryption.index_tag.begin());
  m_.encryption.present = true;
  return Status::Ok();
}

Status Decoder::DecodeMetadata(std::span<const uint8_t> body, uint64_t at) {
  const std::string s = "METADATA";
  ByteCursor c(body, at);
  if (body.size() < kMetadataFixedSize) return Err(at, s, "body is " + std::to_string(body.size()) + " bytes (expected at least 40)");
  uint32_t kind = c.U32();
  if (kind > static_cast<uint32_t>(VmmKind::kOther)) return Err(at, s, "vmm_kind " + std::to_string(kind) + " (expected 0..3)");
  m_.metadata.vmm_kind = static_cast<VmmKind>(kind);
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  auto uuid = c.Bytes(16);
  std::copy(uuid.begin(), uuid.end(), m_.metadata.vm_uuid.begin());
  m_.metadata.created_unix_ns = c.U64();
  uint16_t mlen = c.U16(), clen = c.U16();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  if (mlen > kMaxMetadataString || clen > kMaxMetadataString) {
    return Err(at + 32, s, "string length over 256");
  }
  if (body.size() != kMetadataFixedSize + mlen + clen) {
    return Err(at, s, "body_length " + std::to_string(body.size()) + " (expected " +
                          std::to_string(kMetadataFixedSize + mlen + clen) + " from the string lengths)");
  }
  m_.metadata.machine_type = c.Str(mlen);
  m_.metadata.creator = c.Str(clen);
  if (!IsPrintableAscii(m_.metadata.machine_type)) return Err(at + 40, s, "machine_type is not printable ASCII");
  if (!IsPrintableAscii(m_.metadata.creator)) return Err(at + 40 + mlen, s, "creator is not printable ASCII");
  return Status::Ok();
}

Status Decoder::DecodeRegions(std::span<const uint8_t> body, uint64_t at) {
  const std::string s = "REGIONS";
  ByteCursor c(body, at);
  uint32_t count = c.U32();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  if (!c.ok()) return Err(at, s, "truncated region count");
  if (count < 1 || count > kMaxRegions) return Err(at, s, "region_count " + std::to_string(count) + " (expected 1..1024)");
  std::set<std::string> names;
  uint64_t total_pages = 0;
  m_.regions.reserve(count);  // bounded by kMaxRegions
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t eat = c.file_offset();
    size_t start = c.pos();
    std::string es = s + " entry " + std::to_string(i);
    if (!c.Has(kRegionEntryFixedSize)) return Err(eat, es, "truncated");
    Region r;
    r.guest_phys_base = c.U64();
    r.size = c.U64();
    r.host_page_size = c.U32();
    uint16_t flags = c.U16();
    uint16_t nlen = c.U16();
    if (flags != 0) return Err(eat + 20, es, "reserved flags " + fmt::format("{:#x}", flags) + " (expected 0)");
    if (nlen < 1 || nlen > kMaxNameLength) return Err(eat + 22, es, "name_length " + std::to_string(nlen) + " (expected 1..255)");
    if (!c.Has(nlen)) return Err(eat + 24, es, "truncated name");
    r.name = c.Str(nlen);
    if (!IsPrintableAscii(r.name)) return Err(eat + 24, es, "name is not printable ASCII");
    if (!names.insert(r.name).second) return Err(eat + 24, es, "duplicate region name \"" + r.name + "\"");
    HLT_RETURN_IF_ERROR(CheckPadding(c, start, es));
    uint64_t hps = r.host_page_size;
    if (hps < kMinHostPageSize || hps > kMaxHostPageSize || (hps & (hps - 1)) != 0) {
      return Err(eat + 16, es, "host_page_size " + std::to_string(hps) + " (expected a power of two, 4096..2^30)");
    }
    if (r.guest_phys_base % kPageSize != 0) return Err(eat, es, "guest_phys_base " + fmt::format("{:#x}", r.guest_phys_base) + " is not 4096-aligned");
    if (r.size == 0 || r.size % hps != 0) {
      return Err(eat + 8, es, "size " + fmt::format("{:#x}", r.size) + " (expected > 0 and a multiple of host_page_size)");
    }
    if (r.guest_phys_base + r.size < r.guest_phys_base) return Err(eat, es, "guest_phys_base + size overflows");
    r.first_page = total_pages;
    total_pages += r.size / kPageSize;
    if (total_pages > kMaxTotalPages) {
      return Err(eat + 8, es, "regions hold more than 2^31 pages (limit of section 6)");
    }
    m_.regions.push_back(std::move(r));
  }
  if (c.remaining() != 0) return Err(c.file_offset(), s, std::to_string(c.remaining()) + " bytes after the last entry");
  return Status::Ok();
}

Status Decoder::DecodePageMap(std::span<const uint8_t> body, uint64_t at, uint32_t flags) {
  const bool sparse = (flags & kSectionFlagSparse) != 0;
  if (!(flags & kSectionFlagPacked)) return DecodePlainPageMap(body, at, sparse);
  // 5.3, since 1.6: unpacked into the plain body, whose every rule then applies (its offsets in messages are
  // those of the plain body as if it were stored where the packed one is).
  m_.packed_page_map = true;
  uint64_t total = 0;
  for (auto& r : m_.regions) total += r.page_count();
  const uint64_t plain_max = sparse ? kSparsePageMapFixedSize + kSparsePageMapEntrySize * total : 4 * total;
  Result<std::vector<uint8_t>> plain = UnpackPageMap(body, sparse, plain_max, !sparse);
  if (!plain) return Err(at, "PAGE_MAP", "packed (flag 0x4): " + plain.error().message());
  return DecodePlainPageMap(*plain, at, sparse);
}

Status Decoder::DecodePlainPageMap(std::span<const uint8_t> body, uint64_t at, bool sparse) {
  page_map_at_ = at;
  uint64_t total = 0;
  for (auto& r : m_.regions) total += r.page_count();
  m_.page_count = total;
  if (sparse) {
    // 5.3, since 1.2: u64 entry_count, then (u32 page, u32 value) pairs. Bounded by the section length.
    m_.sparse_page_map = true;
    ByteCursor c(body, at);
    uint64_t count = c.U64();
    if (!c.ok()) return Err(at, "PAGE_MAP", "truncated entry count (sparse)");
    if (count > total || body.size() != kSparsePageMapFixedSize + count * kSparsePageMapEntrySize) {
      return Err(at, "PAGE_MAP", "sparse entry_count " + std::to_string(count) + " with body_length " +
                                     std::to_string(body.size()) + " (expected 8 + 8 x entry_count, entry_count <= " +
                                     std::to_string(total) + " pages)");
    }
    m_.page_map_entries.resize(count);
    for (auto& e : m_.page_map_entries) {
      e.page = c.U32();
      e.value = c.U32();
    }
    return Status::Ok();
  }
  if (body.size() != total * 4) {
    return Err(at, "PAGE_MAP", "body_length " + std::to_string(body.size()) + " (expected 4 x " +
                                   std::to_string(total) + " pages)");
  }
  m_.page_map.resize(total);  // bounded: equals the section length, which is inside the index
  for (uint64_t i = 0; i < total; ++i) m_.page_map[i] = LoadLe32(&body[i * 4]);
  return Status::Ok();
}

Status Decoder::DecodeBlocks(std::span<const uint8_t> body, uint64_t at) {
  blocks_at_ = at;
  const std::string s = "BLOCKS";
  ByteCursor c(body, at);
  uint32_t count = c.U32();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  if (!c.ok()) return Err(at, s, "truncated block count");
  if (uint64_t{count} * kBlockEntrySize != c.remaining()) {
    return Err(at, s, "block_count " + std::to_string(count) + " needs " + std::to_string(uint64_t{count} * 32) +
                          " bytes of entries, body has " + std::to_string(c.remaining()));
  }
  if (count > m_.total_pages()) return Err(at, s, "more blocks than pages");
  m_.blocks.resize(count);
  uint64_t expect_offset = kHeaderSize;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t eat = c.file_offset();
    std::string es = s + " entry " + std::to_string(i);
    BlockInfo& b = m_.blocks[i];
    b.offset = c.U64();
    b.stored_length = c.U32();
    b.page_count = c.U32();
    b.flags = c.U32();
    b.base_page = c.U32();
    b.checksum = c.U64();
    if (b.flags & ~kBlockKnownFlags) return Err(eat + 16, es, "unknown flags " + fmt::format("{:#x}", b.flags));
    if (!b.based() && b.base_page != 0) return Err(eat + 20, es, "base_page is not zero on a block without BASED");
    if (b.page_count < 1 || b.page_count > kMaxBlockPages) {
      return Err(eat + 12, es, "page_count " + std::to_string(b.page_count) + " (expected 1..4096)");
    }
    if (b.offset != expect_offset) {
      return Err(eat, es, "offset " + fmt::format("{:#x}", b.offset) + " (expected " + fmt::format("{:#x}", expect_offset) + ": payloads are contiguous)");
    }
    if (!b.compressed()) {
      if (b.uses_dictionary()) return Err(eat + 16, es, "DICTIONARY flag on an uncompressed block");
      if (b.framed()) return Err(eat + 16, es, "FRAMED flag on an uncompressed block");
      if (b.based()) return Err(eat + 16, es, "BASED flag on an uncompressed block");
    }
    if (b.based() && b.uses_dictionary()) return Err(eat + 16, es, "BASED and DICTIONARY on one block");
    if (b.based() && b.hot()) return Err(eat + 16, es, "BASED flag on a HOT block (it is read with its base group)");
    if (b.framed() && b.page_count < 2) return Err(eat + 16, es, "FRAMED flag on a block of one page");
    // stored_length against the raw length: CheckPayloadLengths, once the index says whether it is encrypted.
    b.first_slot = total_slots_;
    total_slots_ += b.page_count;
    expect_offset += b.stored_length;
    if (expect_offset > index_offset_) return Err(eat, es, "payload runs past the index at " + fmt::format("{:#x}", index_offset_));
  }
  return Status::Ok();
}

Status Decoder::DecodeBlobs(std::span<const uint8_t> body, uint64_t at) {
  blobs_at_ = at;
  const std::string s = "BLOBS";
  ByteCursor c(body, at);
  uint32_t count = c.U32();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  if (!c.ok()) return Err(at, s, "truncated blob count");
  if (count > kMaxBlobs) return Err(at, s, "blob_count " + std::to_string(count) + " (limit 4096)");
  uint64_t expect_offset = kHeaderSize;
  if (!m_.blocks.empty()) expect_offset = m_.blocks.back().offset + m_.blocks.back().stored_length;
  std::set<std::string> names;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t eat = c.file_offset();
    size_t start = c.pos();
    std::string es = s + " entry " + std::to_string(i);
    if (!c.Has(kBlobEntryFixedSize)) return Err(eat, es, "truncated");
    BlobInfo b;
    b.offset = c.U64();
    b.stored_length = c.U64();
    b.raw_length = c.U64();
    b.flags = c.U32();
    uint16_t nlen = c.U16();
    uint16_t reserved = c.U16();
    b.checksum = c.U64();
    if (reserved != 0) return Err(eat + 30, es, "reserved field is not zero");
    if (b.flags & ~kBlobCompressed) return Err(eat + 24, es, "unknown flags " + fmt::format("{:#x}", b.flags));
    if (nlen < 1 || nlen > kMaxNameLength) return Err(eat + 28, es, "name_length " + std::to_string(nlen) + " (expected 1..255)");
    if (!c.Has(nlen)) return Err(eat + 40, es, "truncated name");
    b.name = c.Str(nlen);
    if (!IsPrintableAscii(b.name)) return Err(eat + 40, es, "name is not printable ASCII");
    if (!names.insert(b.name).second) return Err(eat + 40, es, "duplicate blob name \"" + b.name + "\"");
    HLT_RETURN_IF_ERROR(CheckPadding(c, start, es));
    if (b.raw_length > kMaxBlobRawLength) return Err(eat + 16, es, "raw_length " + std::to_string(b.raw_length) + " over the 2^30 limit");
    blob_entry_at_.push_back(eat);
    if (b.offset != expect_offset) {
      return Err(eat, es, "offset " + fmt::format("{:#x}", b.offset) + " (expected " + fmt::format("{:#x}", expect_offset) + ": payloads are contiguous)");
    }
    if (b.stored_length > index_offset_ - expect_offset) {
      return Err(eat, es, "payload runs past the index at " + fmt::format("{:#x}", index_offset_));
    }
    expect_offset += b.stored_length;
    m_.blobs.push_back(std::move(b));
  }
  if (c.remaining() != 0) return Err(c.file_offset(), s, std::to_string(c.remaining()) + " bytes after the last entry");
  if (expect_offset != index_offset_) {
    return Err(at, s, "payloads end at " + fmt::format("{:#x}", expect_offset) + " but the index starts at " + fmt::format("{:#x}", index_offset_) +
                          " (unaccounted bytes)");
  }
  return Status::Ok();
}

Status Decoder::DecodeRestoreOrder(std::span<const uint8_t> body, uint64_t at) {
  order_at_ = at;
  const std::string s = "RESTORE_ORDER";
  ByteCursor c(body, at);
  uint32_t count = c.U32();
  m_.working_set_blocks = c.U32();
  if (!c.ok()) return Err(at, s, "truncated");
  if (count != m_.blocks.size()) {
    return Err(at, s, "block_count " + std::to_string(count) + " (expected " + std::to_string(m_.blocks.size()) + ")");
  }
  if (m_.working_set_blocks > count) return Err(at + 4, s, "working_set_blocks exceeds block_count");
  if (c.remaining() != uint64_t{count} * 4) return Err(at, s, "body_length does not match block_count");
  std::vector<bool> seen(count);
  m_.restore_order.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t b = c.U32();
    if (b >= count || seen[b]) {
      return Err(at + 8 + 4ull * i, s, "entry " + std::to_string(i) + " = " + std::to_string(b) +
                                           " (expected a permutation of the blocks)");
    }
    seen[b] = true;
    m_.restore_order[i] = b;
  }
  return Status::Ok();
}

Status Decoder::DecodeDictionary(std::span<const uint8_t> body, uint64_t at) {
  if (body.size() < kMinDictionaryLength || body.size() > kMaxDictionaryLength) {
    return Err(at, "DICTIONARY", "length " + std::to_string(body.size()) + " (expected 8..1 MiB)");
  }
  m_.dictionary.assign(body.begin(), body.end());
  return Status::Ok();
}

Status Decoder::DecodeParent(std::span<const uint8_t> body, uint64_t at) {
  const std::string s = "PARENT";
  if (body.size() < kParentFixedSize) {
    return Err(at, s, "body is " + std::to_string(body.size()) + " bytes (expected at least 48)");
  }
  ByteCursor c(body, at);
  ParentSection p;
  auto id = c.Bytes(kFileIdSize);
  std::copy(id.begin(), id.end(), p.file_id.begin());
  auto fp = c.Bytes(16);
  std::copy(fp.begin(), fp.end(), p.fingerprint.begin());
  p.page_count = c.U64();
  p.chain_depth = c.U32();
  uint16_t hint_length = c.U16();
  HLT_RETURN_IF_ERROR(CheckZero(c, 2, s, "reserved"));
  if (p.file_id == FileId{}) return Err(at, s, "parent_file_id is all zero");
  if (p.page_count < 1 || p.page_count > kMaxTotalPages) {
    return Err(at + 32, s, "parent_page_count " + std::to_string(p.page_count) + " (expected 1..2^31)");
  }
  if (hint_length < 1 || hint_length > kMaxPathHintLength) {
    return Err(at + 44, s, "path_hint_length " + std::to_string(hint_length) + " (expected 1..1024)");
  }
  if (body.size() != kParentFixedSize + uint64_t{hint_length}) {
    return Err(at, s, "body_length " + std::to_string(body.size()) + " (expected " +
                          std::to_string(kParentFixedSize + hint_length) + " from path_hint_length)");
  }
  p.path_hint = c.Str(hint_length);
  if (!IsValidPathHint(p.path_hint)) {
    return Err(at + kParentFixedSize, s,
               "path_hint is not a relative path of printable ASCII (no leading '/', no empty component)");
  }
  if (p.chain_depth < 1 || p.chain_depth > kMaxChainDepth) {
    return Err(at + 40, s, "chain_depth " + std::to_string(p.chain_depth) + " (expected 1..16: a chain has at most " +
                               "16 parent links; parent \"" + p.path_hint + "\")");
  }
  m_.parent = std::move(p);
  return Status::Ok();
}

Status Decoder::DecodePageHashes(std::span<const uint8_t> body, uint64_t at) {
  const std::string s = "PAGE_HASHES";
  ByteCursor c(body, at);
  uint32_t algorithm = c.U32();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  if (!c.ok()) return Err(at, s, "truncated");
  if (algorithm != kPageHashAlgorithmXxh3Low64) {
    return Err(at, s, "algorithm " + std::to_string(algorithm) + " (expected 1)");
  }
  const uint64_t total = total_slots_;
  if (body.size() != kPageHashesFixedSize + 8 * total) {
    return Err(at, s, "body_length " + std::to_string(body.size()) + " (expected 8 + 8 x " + std::to_string(total) +
                          " stored slots)");
  }
  if (total == 0) return Err(at, s, "present but the file stores no page");
  m_.page_hashes.resize(total);  // bounded: equals the section length, which is inside the index
  for (uint64_t slot = 0; slot < total; ++slot) m_.page_hashes[slot] = c.U64();
  return Status::Ok();
}

Status Decoder::DecodeCoding(std::span<const uint8_t> body, uint64_t at) {
  const std::string s = "CODING";
  ByteCursor c(body, at);
  CodingRecord r;
  r.frame_pages = c.U32();
  const uint32_t trials = c.U32();
  r.sample_blocks = c.U32();
  r.base_groups_tried = c.U32();
  r.base_groups_used = c.U32();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  r.sample_raw_bytes = c.U64();
  if (!c.ok()) return Err(at, s, "truncated (32 bytes expected)");
  if (trials > kMaxCodingTrials) return Err(at + 4, s, "trial_count " + std::to_string(trials) + " (expected 0..16)");
  if (body.size() != kCodingFixedSize + uint64_t{kCodingTrialSize} * trials) {
    return Err(at, s, "body_length " + std::to_string(body.size()) + " (expected 32 + 24 x " + std::to_string(trials) +
                          " trials)");
  }
  if (r.base_groups_used > r.base_groups_tried) {
    return Err(at + 16, s, "base_groups_used " + std::to_string(r.base_groups_used) + " exceeds base_groups_tried " +
                               std::to_string(r.base_groups_tried));
  }
  for (uint32_t i = 0; i < trials; ++i) {
    CodingRecord::Trial t;
    t.frame_pages = c.U32();
    t.dictionary_bytes = c.U32();
    t.sample_bytes = c.U64();
    t.estimate = c.U64();
    r.trials.push_back(t);
  }
  m_.coding = std::move(r);
  return Status::Ok();
}

Status Decoder::DecodeMac(std::span<const uint8_t> body, uint64_t at) {
  const std::string s = "MAC";
  ByteCursor c(body, at);
  uint32_t algorithm = c.U32();
  HLT_RETURN_IF_ERROR(CheckZero(c, 4, s, "reserved"));
  if (!c.ok()) return Err(at, s, "truncated");
  if (algorithm != kMacAlgorithmBlake2b) return Err(at, s, "algorithm " + std::to_string(algorithm) + " (expected 1)");
  uint64_t entries = uint64_t(m_.blocks.size()) + m_.blobs.size();
  if (body.size() != kMacFixedSize + entries * kPayloadMacSize) {
    return Err(at, s, "body_length " + std::to_string(body.size()) + " (expected " +
                          std::to_string(kMacFixedSize + entries * kPayloadMacSize) + " for " +
                          std::to_string(entries) + " blocks and blobs)");
  }
  m_.mac.present = true;
  auto im = c.Bytes(kIndexMacSize);
  std::copy(im.begin(), im.end(), m_.mac.index_mac.begin());
  auto take = [&](size_t n, std::vector<std::array<uint8_t, 16>>* out) {
    out->resize(n);
    for (auto& m : *out) {
      auto b = c.Bytes(kPayloadMacSize);
      std::copy(b.begin(), b.end(), m.begin());
    }
  };
  take(m_.blocks.size(), &m_.mac.block_macs);
  take(m_.blobs.size(), &m_.mac.blob_macs);
  return Status::Ok();
}

// 5.3 sparse form: listed pages strictly increasing and in range, values not IN_PARENT, slots in range; every page
// past the parent's end listed; at least one page left IN_PARENT.
Status Decoder::CheckSparsePageMap(std::vector<bool>* used) {
  const std::string s = "PAGE_MAP";
  if (!m_.parent) return Err(page_map_at_, s, "sparse (flag 0x1) but the file has no PARENT section");
  const uint64_t total = m_.page_count;
  uint64_t past_parent = 0;
  for (size_t i = 0; i < m_.page_map_entries.size(); ++i) {
    const PageMapEntry& e = m_.page_map_entries[i];
    const uint64_t eat = page_map_at_ + kSparsePageMapFixedSize + kSparsePageMapEntrySize * i;
    if (e.page >= total) {
      return Err(eat, s, "entry " + std::to_string(i) + ": page " + std::to_string(e.page) + " (only " +
                             std::to_string(total) + " pages)");
    }
    if (i > 0 && e.page <= m_.page_map_entries[i - 1].page) {
      return Err(eat, s, "entry " + std::to_string(i) + ": page " + std::to_string(e.page) +
                             " (pages must be strictly increasing)");
    }
    if (e.value == kPageMapInParent) {
      return Err(eat + 4, s, "entry " + std::to_string(i) + ": IN_PARENT is never listed (unlisted pages are)");
    }
    if (e.value >= kPageMapFirstSlot) {
      uint64_t slot = e.value - kPageMapFirstSlot;
      if (slot >= total_slots_) {
        return Err(eat + 4, s, "page " + std::to_string(e.page) + " references slot " + std::to_string(slot) +
                                   " (only " + std::to_string(total_slots_) + " exist)");
      }
      (*used)[slot] = true;
    }
    past_parent += e.page >= m_.parent->page_count;
  }
  if (total > m_.parent->page_count && past_parent != total - m_.parent->page_count) {
    return Err(page_map_at_, s,
               "a page past the parent's end is IN_PARENT: the parent (\"" + m_.parent->path_hint + "\") has only " +
                   std::to_string(m_.parent->page_count) + " pages of " + std::to_string(total));
  }
  if (m_.page_map_entries.size() == total) return Err(parent_at_, "PARENT", "present but no page is IN_PARENT");
  return Status::Ok();
}

Status Decoder::CrossCheck() {
  if (m_.sparse_page_map && !m_.parent) {
    return Err(page_map_at_, "PAGE_MAP", "sparse (flag 0x1) but the file has no PARENT section");
  }
  if (m_.parent && !m_.sparse_page_map) {
    return Err(page_map_at_, "PAGE_MAP", "not sparse in a file with PARENT (flag 0x1 expected, 5.3)");
  }
  if (!page_map_opaque_) HLT_RETURN_IF_ERROR(CheckPageMapReferences());
  // HOT flags mirror the working-set prefix of the restore order.
  std::vector<bool> hot(m_.blocks.size());
  for (uint32_t i = 0; i < m_.working_set_blocks; ++i) hot[m_.restore_order[i]] = true;
  bool any_dict = false;
  for (size_t b = 0; b < m_.blocks.size(); ++b) {
    if (m_.blocks[b].hot() != hot[b]) {
      return Err(blocks_at_ + 8 + 32 * b + 16, "BLOCKS entry " + std::to_string(b),
                 "HOT flag disagrees with the working set of RESTORE_ORDER");
    }
    any_dict |= m_.blocks[b].uses_dictionary();
    if (!m_.blocks[b].based()) continue;
    // 5.4, since 1.4: a BASED block is coded against its parent's view, so only a child has one.
    if (!m_.parent) {
      return Err(blocks_at_ + 8 + 32 * b + 16, "BLOCKS entry " + std::to_string(b),
                 "BASED flag in a file without PARENT");
    }
    if (m_.blocks[b].base_page >= m_.parent->page_count) {
      return Err(blocks_at_ + 8 + 32 * b + 20, "BLOCKS entry " + std::to_string(b),
                 "base_page " + std::to_string(m_.blocks[b].base_page) + " is past the parent's " +
                     std::to_string(m_.parent->page_count) + " pages");
    }
  }
  if (any_dict && !dictionary_present_) return Err(blocks_at_, "BLOCKS", "a block uses a dictionary but there is no DICTIONARY section");
  if (!any_dict && dictionary_present_) return Err(dictionary_at_, "DICTIONARY", "present but no block uses it");
  return Status::Ok();
}

// 5.3: every page-map reference in range, every slot referenced; IN_PARENT only where a parent has the page.
Status Decoder::CheckPageMapReferences() {
  std::vector<bool> used(total_slots_);
  bool any_in_parent = m_.sparse_page_map;
  if (m_.sparse_page_map) HLT_RETURN_IF_ERROR(CheckSparsePageMap(&used));
  for (uint64_t g = 0; g < m_.page_map.size(); ++g) {
    uint32_t v = m_.page_map[g];
    if (v < kPageMapFirstSlot) continue;
    if (v == kPageMapInParent) {
      // 5.3 and 5.10: only with a PARENT section, and only for a page the parent has.
      if (!m_.parent) {
        return Err(page_map_at_ + 4 * g, "PAGE_MAP", "page " + std::to_string(g) +
                                                      " is IN_PARENT but the file has no PARENT section");
      }
      if (g >= m_.parent->page_count) {
        return Err(page_map_at_ + 4 * g, "PAGE_MAP",
                   "page " + std::to_string(g) + " is IN_PARENT but the parent (\"" + m_.parent->path_hint +
                       "\") has only " + std::to_string(m_.parent->page_count) + " pages");
      }
      any_in_parent = true;
      continue;
    }
    uint64_t slot = v - kPageMapFirstSlot;
    if (slot >= total_slots_) {
      return Err(page_map_at_ + 4 * g, "PAGE_MAP", "page " + std::to_string(g) + " references slot " +
                                                    std::to_string(slot) + " (only " + std::to_string(total_slots_) + " exist)");
    }
    used[slot] = true;
  }
  for (uint64_t sidx = 0; sidx < total_slots_; ++sidx) {
    if (!used[sidx]) return Err(page_map_at_, "PAGE_MAP", "slot " + std::to_string(sidx) + " is referenced by no page");
  }
  if (m_.parent && !any_in_parent) return Err(parent_at_, "PARENT", "present but no page is IN_PARENT");
  return Status::Ok();
}

}  // namespace

void IndexModel::MaterializePageMap() {
  if (!sparse_page_map || !page_map.empty()) return;
  page_map.assign(page_count, kPageMapInParent);
  for (const auto& e : page_map_entries) page_map[e.page] = e.value;
}

bool IsValidPathHint(const std::string& s) {
  if (s.empty() || s.size() > kMaxPathHintLength || !IsPrintableAscii(s)) return false;
  if (s.front() == '/' || s.back() == '/') return false;
  return s.find("//") == std::string::npos;
}

bool IsPrintableAscii(const std::string& s) {
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch > 0x7e) return false;
  }
  return true;
}

std::vector<uint8_t> EncodeMacSection(const MacSection& mac) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  WriteSection(w, SectionType::kMac, [&](ByteWriter& b) {
    b.U32(kMacAlgorithmBlake2b);
    b.U32(0);
    b.Bytes(mac.index_mac.data(), mac.index_mac.size());
    for (const auto& m : mac.block_macs) b.Bytes(m.data(), m.size());
    for (const auto& m : mac.blob_macs) b.Bytes(m.data(), m.size());
  });
  return out;
}

namespace {

// 5.3: the plain PAGE_MAP body: one u32 a page (dense), or a child's pages that are not IN_PARENT (sparse, 1.2).
std::vector<uint8_t> PlainPageMapBody(const IndexModel& m) {
  std::vector<uint8_t> out;
  ByteWriter b(&out);
  if (!m.parent) {
    for (uint32_t v : m.page_map) b.U32(v);
    return out;
  }
  if (!m.page_map.empty()) {
    uint64_t n = 0;
    for (uint32_t v : m.page_map) n += v != kPageMapInParent;
    b.U64(n);
    for (uint64_t g = 0; g < m.page_map.size(); ++g) {
      if (m.page_map[g] == kPageMapInParent) continue;
      b.U32(uint32_t(g));
      b.U32(m.page_map[g]);
    }
  } else {
    b.U64(m.page_map_entries.size());
    for (const auto& e : m.page_map_entries) {
      b.U32(e.page);
      b.U32(e.value);
    }
  }
  return out;
}

}  // namespace

Status ChoosePageMapPacking(IndexModel* model) {
  const std::vector<uint8_t> plain = PlainPageMapBody(*model);
  HLT_ASSIGN_OR_RETURN(std::vector<uint8_t> packed, PackPageMap(plain, model->parent.has_value()));
  model->packed_page_map = packed.size() < plain.size();
  return Status::Ok();
}

std::vector<uint8_t> EncodeIndex(const IndexModel& m, const SectionSealer* seal) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  WriteSection(w, SectionType::kMetadata, [&](ByteWriter& b) {
    b.U32(static_cast<uint32_t>(m.metadata.vmm_kind));
    b.U32(0);
    b.Bytes(m.metadata.vm_uuid.data(), 16);
    b.U64(m.metadata.created_unix_ns);
    b.U16(uint16_t(m.metadata.machine_type.size()));
    b.U16(uint16_t(m.metadata.creator.size()));
    b.U32(0);
    b.Str(m.metadata.machine_type);
    b.Str(m.metadata.creator);
  });
  WriteSection(w, SectionType::kRegions, [&](ByteWriter& b) {
    b.U32(uint32_t(m.regions.size()));
    b.U32(0);
    for (const auto& r : m.regions) {
      size_t start = b.size();
      b.U64(r.guest_phys_base);
      b.U64(r.size);
      b.U32(r.host_page_size);
      b.U16(0);
      b.U16(uint16_t(r.name.size()));
      b.Str(r.name);
      b.PadTo(start, 8);
    }
  });
  // 5.3: sparse in a file with PARENT; packed (since 1.6) when the model says so and packing makes it shorter.
  const uint32_t page_map_type = static_cast<uint32_t>(SectionType::kPageMap);
  const uint32_t shape = m.parent ? kSectionFlagSparse : 0;
  std::vector<uint8_t> page_map_body;
  uint32_t page_map_flags = shape;
  if (m.FindSealed(page_map_type) == nullptr) {
    page_map_body = PlainPageMapBody(m);
    if (m.packed_page_map) {
      // Packing fails only when zstd cannot allocate; the plain body is then written, and is valid in a file that
      // declares 1.6 (a reader accepts a higher minor than the index needs, section 9).
      Result<std::vector<uint8_t>> packed = PackPageMap(page_map_body, m.parent.has_value());
      if (packed && packed->size() < page_map_body.size()) {
        page_map_body = std::move(*packed);
        page_map_flags |= kSectionFlagPacked;
      }
    }
  }
  WriteContentSection(
      w, m, page_map_type, [&](ByteWriter& b) { b.Bytes(page_map_body.data(), page_map_body.size()); },
      page_map_flags, seal);
  WriteSection(w, SectionType::kBlocks, [&](ByteWriter& b) {
    b.U32(uint32_t(m.blocks.size()));
    b.U32(0);
    for (const auto& bl : m.blocks) {
      b.U64(bl.offset);
      b.U32(bl.stored_length);
      b.U32(bl.page_count);
      b.U32(bl.flags);
      b.U32(bl.based() ? bl.base_page : 0);
      b.U64(bl.checksum);
    }
  });
  WriteSection(w, SectionType::kBlobs, [&](ByteWriter& b) {
    b.U32(uint32_t(m.blobs.size()));
    b.U32(0);
    for (const auto& bl : m.blobs) {
      size_t start = b.size();
      b.U64(bl.offset);
      b.U64(bl.stored_length);
      b.U64(bl.raw_length);
      b.U32(bl.flags);
      b.U16(uint16_t(bl.name.size()));
      b.U16(0);
      b.U64(bl.checksum);
      b.Str(bl.name);
      b.PadTo(start, 8);
    }
  });
  WriteSection(w, SectionType::kRestoreOrder, [&](ByteWriter& b) {
    b.U32(uint32_t(m.restore_order.size()));
    b.U32(m.working_set_blocks);
    for (uint32_t v : m.restore_order) b.U32(v);
  });
  const uint32_t dictionary_type = static_cast<uint32_t>(SectionType::kDictionary);
  if (!m.dictionary.empty() || m.FindSealed(dictionary_type)) {
    WriteContentSection(
        w, m, dictionary_type, [&](ByteWriter& b) { b.Bytes(m.dictionary.data(), m.dictionary.size()); }, 0, seal);
  }
  if (m.parent) {
    WriteSection(w, SectionType::kParent, [&](ByteWriter& b) {
      b.Bytes(m.parent->file_id.data(), m.parent->file_id.size());
      b.Bytes(m.parent->fingerprint.data(), m.parent->fingerprint.size());
      b.U64(m.parent->page_count);
      b.U32(m.parent->chain_depth);
      b.U16(uint16_t(m.parent->path_hint.size()));
      b.U16(0);
      b.Str(m.parent->path_hint);
    });
  }
  auto write_page_hashes = [&] {
    WriteContentSection(
        w, m, kPageHashesSectionType,
        [&](ByteWriter& b) {
          b.U32(kPageHashAlgorithmXxh3Low64);
          b.U32(0);
          for (uint64_t h : m.page_hashes) b.U64(h);
        },
        0, seal);
  };
  auto write_coding = [&] {
    WriteSection(w, static_cast<SectionType>(kCodingSectionType), [&](ByteWriter& b) {
      const CodingRecord& r = *m.coding;
      b.U32(r.frame_pages);
      b.U32(uint32_t(r.trials.size()));
      b.U32(r.sample_blocks);
      b.U32(r.base_groups_tried);
      b.U32(r.base_groups_used);
      b.U32(0);
      b.U64(r.sample_raw_bytes);
      for (const auto& t : r.trials) {
        b.U32(t.frame_pages);
        b.U32(t.dictionary_bytes);
        b.U64(t.sample_bytes);
        b.U64(t.estimate);
      }
    });
  };
  // The skippable sections in increasing type order: those this code knows among the ones it was given.
  bool hashes_written = m.page_hashes.empty() && !m.FindSealed(kPageHashesSectionType), coding_written = !m.coding.has_value();
  auto write_known_before = [&](uint32_t type) {
    if (!hashes_written && type > kPageHashesSectionType) {
      write_page_hashes();
      hashes_written = true;
    }
    if (!coding_written && type > kCodingSectionType) {
      write_coding();
      coding_written = true;
    }
  };
  for (const auto& section : m.skippable_sections) {
    write_known_before(section.type);
    WriteStored(w, section.type, section.flags, section.body);
  }
  write_known_before(UINT32_MAX);
  return out;
}

std::vector<VersionedFeature> VersionedFeatures(const IndexModel& model) {
  std::vector<VersionedFeature> out;
  const SealedSection* sealed_map = model.FindSealed(static_cast<uint32_t>(SectionType::kPageMap));
  if (sealed_map ? (sealed_map->flags & kSectionFlagPacked) != 0 : model.packed_page_map) {
    out.push_back({kFormatMinorPackedPageMap, "a packed PAGE_MAP"});
  }
  if (model.encryption.present) out.push_back({kFormatMinorEncrypted, "encryption"});
  if (std::any_of(model.blocks.begin(), model.blocks.end(), [](const BlockInfo& b) { return b.based(); })) {
    out.push_back({kFormatMinorBasedBlocks, "blocks coded against the parent"});
  }
  if (std::any_of(model.blocks.begin(), model.blocks.end(), [](const BlockInfo& b) { return b.framed(); })) {
    out.push_back({kFormatMinorFramedBlocks, "blocks of independent frames"});
  }
  if (model.parent) out.push_back({kFormatMinorParent, "a PARENT section"});
  if (!model.skippable_sections.empty() || !model.page_hashes.empty() || model.coding) {
    out.push_back({kFormatMinorSkippableSections, "skippable sections"});
  }
  return out;
}

uint16_t MinimumMinorVersion(const IndexModel& model) {
  const std::vector<VersionedFeature> features = VersionedFeatures(model);
  return features.empty() ? 0 : features.front().minor;
}

Result<IndexModel> DecodeIndex(std::span<const uint8_t> index, uint64_t index_offset, const std::string& name,
                               const SectionUnsealer* unseal) {
  return Decoder(index, index_offset, name, unseal).Run();
}

const SealedSection* IndexModel::FindSealed(uint32_t type) const {
  for (const SealedSection& s : sealed_sections) {
    if (s.type == type) return &s;
  }
  return nullptr;
}

}  // namespace halite::format
