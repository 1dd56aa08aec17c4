#include "format/encryption_codec.h"

#include <cstring>

#include <fmt/format.h>

#include "codec/mac.h"
#include "halite/bytes.h"

namespace halite::format {

const char* CipherNumberName(uint32_t cipher) {
  switch (cipher) {
    case kCipherAes256Gcm: return "AES-256-GCM";
    case kCipherXChaCha20Poly1305: return "XChaCha20-Poly1305";
  }
  return "unknown";
}

Result<std::shared_ptr<const FileCipher>> FileCipher::Derive(const EncryptionKey& key, const FileId& file_id,
                                                             uint32_t cipher) {
  if (cipher != kCipherAes256Gcm && cipher != kCipherXChaCha20Poly1305) {
    return Status::Corrupt("cipher " + std::to_string(cipher) + " (expected 1 AES-256-GCM or 2 XChaCha20-Poly1305)");
  }
  HLT_RETURN_IF_ERROR(codec::InitMac());
  // 13.1: FK = BLAKE2b-32(K, "HLT-FILE-KEY-1" || file_id || u32le(cipher)).
  uint8_t cipher_le[4];
  StoreLe32(cipher_le, cipher);
  std::array<uint8_t, codec::kAeadKeySize> file_key;
  std::span<const uint8_t> parts[] = {file_id, cipher_le};
  codec::Mac(key, kFileKeyTag, parts, file_key);
  auto aead = codec::AeadKey::Create(static_cast<codec::AeadAlgorithm>(cipher), file_key);
  codec::Wipe(file_key);
  if (!aead) return aead.error();
  std::shared_ptr<FileCipher> out(new FileCipher());
  out->key_ = std::move(*aead);
  out->file_id_ = file_id;
  out->cipher_ = cipher;
  return std::shared_ptr<const FileCipher>(std::move(out));
}

std::array<uint8_t, kUnitAdSize> EncodeUnitAd(const FileId& file_id, const UnitAd& ad) {
  std::array<uint8_t, kUnitAdSize> b{};
  std::memcpy(&b[0], file_id.data(), file_id.size());
  StoreLe64(&b[16], ad.position);
  StoreLe32(&b[24], static_cast<uint32_t>(ad.kind));
  StoreLe32(&b[28], ad.part);
  StoreLe32(&b[32], ad.parts);
  StoreLe32(&b[36], ad.flags);
  StoreLe64(&b[40], ad.length);
  StoreLe32(&b[48], ad.first_page);
  StoreLe32(&b[52], ad.pages);
  return b;
}

codec::AeadNonce UnitNonce(UnitKind kind, uint32_t part, uint64_t position) {
  // 13.1: u8 kind || u8 0 || u16le part || u64le position, then zeros (XChaCha20-Poly1305 takes 24 bytes).
  codec::AeadNonce n{};
  n[0] = uint8_t(static_cast<uint32_t>(kind));
  n[2] = uint8_t(part);
  n[3] = uint8_t(part >> 8);
  StoreLe64(&n[4], position);
  return n;
}

void FileCipher::Seal(const UnitAd& ad, std::span<const uint8_t> plain, std::span<uint8_t> out) const {
  const auto a = EncodeUnitAd(file_id_, ad);
  key_->Seal(UnitNonce(ad.kind, ad.part, ad.position), a, plain, out);
}

void FileCipher::SealWithAd(const codec::AeadNonce& nonce, std::span<const uint8_t> ad,
                            std::span<const uint8_t> plain, std::span<uint8_t> out) const {
  key_->Seal(nonce, ad, plain, out);
}

bool FileCipher::Open(const UnitAd& ad, std::span<const uint8_t> sealed, std::span<uint8_t> out) const {
  const auto a = EncodeUnitAd(file_id_, ad);
  return key_->Open(UnitNonce(ad.kind, ad.part, ad.position), a, sealed, out);
}

UnitAd BlockUnitAd(uint64_t block, const BlockInfo& info) {
  return UnitAd{UnitKind::kBlock, block, 0, 1, info.flags & ~kBlockHot, info.stored_length, 0, info.page_count};
}

UnitAd FrameUnitAd(uint64_t block, const BlockInfo& info, uint32_t part, uint32_t parts, uint32_t first_page,
                   uint32_t pages) {
  return UnitAd{UnitKind::kBlock, block, part, parts, info.flags & ~kBlockHot, info.stored_length, first_page, pages};
}

uint64_t SealedBlockLength(uint64_t content_size, size_t frames) {
  if (frames == 0) return content_size + kSealTagSize;
  return kFrameTableFixedSize + frames * (kFrameTableEntrySize + kSealTagSize) + content_size;
}

std::vector<uint8_t> SealBlock(const FileCipher& cipher, uint64_t block, const BlockInfo& info,
                               std::span<const uint8_t> content, std::span<const codec::FrameExtent> frames) {
  BlockInfo sealed_info = info;
  sealed_info.stored_length = uint32_t(SealedBlockLength(content.size(), frames.size()));
  std::vector<uint8_t> out(sealed_info.stored_length);
  if (frames.empty()) {
    cipher.Seal(BlockUnitAd(block, sealed_info), content, out);
    return out;
  }
  // 13.2: the frame table, then each frame sealed on its own.
  const uint32_t parts = uint32_t(frames.size());
  StoreLe32(&out[0], parts);
  size_t at = kFrameTableFixedSize + size_t(parts) * kFrameTableEntrySize;
  for (uint32_t k = 0; k < parts; ++k) {
    const codec::FrameExtent& f = frames[k];
    const uint32_t first_page = uint32_t(f.content_offset / kPageSize), pages = uint32_t(f.content_size / kPageSize);
    StoreLe32(&out[kFrameTableFixedSize + k * kFrameTableEntrySize], pages);
    StoreLe32(&out[kFrameTableFixedSize + k * kFrameTableEntrySize + 4], uint32_t(f.payload_size + kSealTagSize));
    cipher.Seal(FrameUnitAd(block, sealed_info, k, parts, first_page, pages),
                content.subspan(f.payload_offset, f.payload_size),
                std::span<uint8_t>(out).subspan(at, f.payload_size + kSealTagSize));
    at += f.payload_size + kSealTagSize;
  }
  return out;
}

Result<std::vector<SealedFrame>> ParseFrameTable(std::span<const uint8_t> payload, const BlockInfo& info,
                                                 const std::string& where) {
  auto err = [&](uint64_t at, const std::string& what) {
    return Status::Corrupt(fmt::format("{}: frame table (payload byte {}): {}", where, at, what));
  };
  if (payload.size() < kFrameTableFixedSize) return err(0, "truncated frame count");
  const uint32_t count = LoadLe32(payload.data());
  if (count < 2 || count > info.page_count) {
    return err(0, fmt::format("frame_count {} (expected 2..{}, the block's pages)", count, info.page_count));
  }
  const uint64_t table_end = kFrameTableFixedSize + uint64_t(count) * kFrameTableEntrySize;
  if (table_end > payload.size()) return err(0, fmt::format("{} entries run past the payload's end", count));
  std::vector<SealedFrame> frames(count);  // bounded by page_count (<= 4096)
  uint64_t at = table_end, pages = 0, content = 0;
  for (uint32_t k = 0; k < count; ++k) {
    const size_t e = kFrameTableFixedSize + size_t(k) * kFrameTableEntrySize;
    SealedFrame& f = frames[k];
    f.pages = LoadLe32(&payload[e]);
    f.sealed_length = LoadLe32(&payload[e + 4]);
    if (f.pages < 1 || f.pages > info.page_count - pages) {
      return err(e, fmt::format("frame {}: pages {} (expected 1..{}: the frames hold the block's {} pages)", k,
                                f.pages, info.page_count - pages, info.page_count));
    }
    if (f.sealed_length < kSealTagSize + 1 || f.sealed_length > payload.size() - at) {
      return err(e + 4, fmt::format("frame {}: sealed_length {} (expected {}..{}: a frame byte and the tag, within "
                                    "the payload)",
                                    k, f.sealed_length, kSealTagSize + 1, payload.size() - at));
    }
    f.first_page = uint32_t(pages);
    f.offset = size_t(at);
    pages += f.pages;
    content += f.sealed_length - kSealTagSize;
    at += f.sealed_length;
  }
  if (pages != info.page_count) {
    return err(0, fmt::format("frames hold {} pages, the block {}", pages, info.page_count));
  }
  if (at != payload.size()) {
    return err(at, fmt::format("{} bytes after the last frame", payload.size() - at));
  }
  if (content >= info.raw_length()) {
    return err(0, fmt::format("frames hold {} bytes of content for {} raw bytes (a block that does not compress is "
                              "stored raw)",
                              content, info.raw_length()));
  }
  return frames;
}

UnitAd BlobUnitAd(uint64_t blob, const BlobInfo& info) {
  return UnitAd{UnitKind::kBlob, blob, 0, 1, info.flags, info.stored_length, 0, 0};
}

UnitAd SectionUnitAd(uint32_t type, uint32_t flags, uint64_t body_length) {
  return UnitAd{UnitKind::kSection, type, 0, 1, flags, body_length, 0, 0};
}

IndexTag ComputeIndexTag(const FileCipher& cipher, std::span<const uint8_t> header_bytes,
                         std::span<const uint8_t> index_before) {
  // 13.5: an empty plaintext sealed with AD = unit AD || header || index before ENCRYPTION.
  const UnitAd ad{UnitKind::kIndexTag, 0, 0, 1, 0, index_before.size(), 0, 0};
  const auto unit = EncodeUnitAd(cipher.file_id(), ad);
  std::vector<uint8_t> all;
  all.reserve(unit.size() + header_bytes.size() + index_before.size());
  all.insert(all.end(), unit.begin(), unit.end());
  all.insert(all.end(), header_bytes.begin(), header_bytes.end());
  all.insert(all.end(), index_before.begin(), index_before.end());
  IndexTag tag;
  cipher.SealWithAd(UnitNonce(UnitKind::kIndexTag, 0, 0), all, {}, tag);
  return tag;
}

std::vector<uint8_t> EncodeEncryptionSection(uint32_t cipher, const IndexTag& tag) {
  std::vector<uint8_t> out(kSectionHeaderSize + kEncryptionSectionSize, 0);
  StoreLe32(&out[0], static_cast<uint32_t>(SectionType::kEncryption));
  StoreLe64(&out[8], kEncryptionSectionSize);
  StoreLe32(&out[16], cipher);
  std::memcpy(&out[24], tag.data(), tag.size());
  return out;
}

Result<EncryptionSectionView> FindEncryptionSection(std::span<const uint8_t> index, uint64_t index_offset,
                                                    const std::string& name) {
  auto err = [&](uint64_t at, const std::string& what) {
    return Status::Corrupt(fmt::format("{}: index at offset {:#x}: {}", name, index_offset + at, what));
  };
  size_t at = 0, last = SIZE_MAX;
  while (at < index.size()) {
    if (index.size() - at < kSectionHeaderSize) return err(at, "truncated section header (16 bytes expected)");
    const uint64_t len = LoadLe64(&index[at + 8]);
    const uint64_t padded = (len + 7) / 8 * 8;
    if (len > index.size() - at - kSectionHeaderSize || padded > index.size() - at - kSectionHeaderSize) {
      return err(at + 8, "body_length " + std::to_string(len) + " runs past the index");
    }
    last = at;
    at += kSectionHeaderSize + size_t(padded);
  }
  if (last == SIZE_MAX || LoadLe32(&index[last]) != static_cast<uint32_t>(SectionType::kEncryption)) {
    return err(last == SIZE_MAX ? 0 : last, "the last section is not ENCRYPTION (13.5: an encrypted file's index ends "
                                            "with it)");
  }
  if (LoadLe32(&index[last + 4]) != 0 || LoadLe64(&index[last + 8]) != kEncryptionSectionSize) {
    return err(last, "ENCRYPTION section: flags must be 0 and body_length 24");
  }
  EncryptionSectionView v;
  v.cipher = LoadLe32(&index[last + 16]);
  if (LoadLe32(&index[last + 20]) != 0) return err(last + 20, "ENCRYPTION section: reserved is not zero");
  std::memcpy(v.index_tag.data(), &index[last + 24], v.index_tag.size());
  v.offset = last;
  return v;
}

}  // namespace halite::format
