// Reading encrypted checkpoints (format-spec section 13): the index with its key (index tag checked first, sealed
// sections opened) or without it, and sealed blocks and blobs, authenticated and decrypted in memory only, into
// the caller's buffer or in place in the payload buffer the reader read them into, never anywhere else.
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "codec/hashing.h"
#include "codec/mac.h"
#include "halite/checkpoint_location.h"
#include "reader/reader_impl.h"

namespace halite {

Status CheckpointReader::Impl::NeedsKey() const {
  return Status::AuthFailed(fmt::format("{}: encrypted with key id {}: opened without its key, its content cannot "
                                        "be read",
                                        file_->name(), KeyIdHex(header_.key_id)));
}

Status CheckpointReader::Impl::DecodeEncryptedIndex(std::span<const uint8_t> header_bytes,
                                                    std::span<const uint8_t> index) {
  const std::string& name = file_->name();
  const uint64_t at = footer_.index_offset;
  Result<EncryptionKey> key = Status::NotFound("no keys were given");
  if (options_.keyring) key = options_.keyring->Find(header_.key_id);
  if (!key) {
    if (options_.open_without_key) {
      sealed_ = true;  // 13.7: structure and checksums only
      HLT_ASSIGN_OR_RETURN(model_, format::DecodeIndex(index, at, name));
      return Status::Ok();
    }
    // The key service's own failure (a --key-command that failed) says more than "not found"; a wrong key shows as
    // the ids that were given.
    std::string why = key.error().code() == StatusCode::kNotFound ? "" : " (" + key.error().message() + ")";
    if (options_.keyring && why.empty()) {
      std::string given;
      for (const KeyId& id : options_.keyring->ids()) given += (given.empty() ? "" : ", ") + KeyIdHex(id);
      if (!given.empty()) why = " (the keys given have ids " + given + ")";
    }
    return Status::AuthFailed(fmt::format("{}: encrypted with key id {}, and no key with that id was given (a key "
                                          "file, a keyring, HALITE_ENCRYPT_KEY or a key command){}",
                                          name, KeyIdHex(header_.key_id), why));
  }
  // 13.5: the tag over the header and the index, before anything the index says is used.
  HLT_ASSIGN_OR_RETURN(format::EncryptionSectionView view, format::FindEncryptionSection(index, at, name));
  auto cipher = format::FileCipher::Derive(*key, header_.file_id, view.cipher);
  codec::Wipe(*key);
  if (!cipher) return cipher.error().WithContext(name + ": index ENCRYPTION");
  cipher_ = *cipher;
  const format::IndexTag tag = format::ComputeIndexTag(*cipher_, header_bytes, index.first(view.offset));
  if (!codec::MacEqual(tag, view.index_tag)) {
    return Status::AuthFailed(fmt::format("{}: index at offset {:#x}: index tag mismatch (the header or the index was "
                                          "changed by someone without key id {})",
                                          name, at + view.offset, KeyIdHex(header_.key_id)));
  }
  // 13.4: the sealed sections, opened as the decoder meets them.
  const format::SectionUnsealer unseal = [this](uint32_t type, uint32_t flags,
                                                std::span<const uint8_t> body) -> Result<std::vector<uint8_t>> {
    std::vector<uint8_t> plain(body.size() - format::kSealTagSize);  // the decoder checked body.size() >= 16
    if (!cipher_->Open(format::SectionUnitAd(type, flags, body.size()), body, plain)) {
      return Status::AuthFailed("sealed body: authentication failed (tampered or moved)");
    }
    return plain;
  };
  HLT_ASSIGN_OR_RETURN(model_, format::DecodeIndex(index, at, name, &unseal));
  return Status::Ok();
}

Status CheckpointReader::Impl::OpenSealedBlock(uint32_t block, std::span<uint8_t> payload, std::span<uint8_t> out,
                                               const BlockProgress* progress, size_t first,
                                               std::span<const uint8_t> prefix) const {
  const BlockInfo& b = model_.blocks[block];
  if (!b.framed()) {
    // One unit. A raw block decrypts straight into place, a compressed one in place in the payload (the AEADs
    // write the plaintext over its ciphertext), to be decoded from there once its tag verified.
    const std::span<uint8_t> content =
        b.compressed() ? payload.first(payload.size() - format::kSealTagSize) : out;  // stored_length >= 16
    if (!cipher_->Open(format::BlockUnitAd(block, b), payload, content)) {
      return Status::AuthFailed(BlockWhere(block) + ": authentication failed (tampered, cut short, moved from "
                                                    "another place or file)");
    }
    return DecodeContent(block, content, out, progress, first, prefix);
  }
  // 13.2: the frame table first, then each frame on its own, the one holding byte `first` before the others.
  HLT_ASSIGN_OR_RETURN(std::vector<format::SealedFrame> frames, format::ParseFrameTable(payload, b, BlockWhere(block)));
  const uint32_t parts = uint32_t(frames.size());
  uint32_t lead = 0;
  while (lead + 1 < parts && uint64_t(frames[lead + 1].first_page) * format::kPageSize <= first) ++lead;
  thread_local codec::Decompressor decompressor;
  // A BASED block's frames are coded against its base group (5.4), the others with the dictionary or nothing.
  const codec::FrameReference ref = b.based()              ? codec::FrameReference::Prefix(prefix)
                                    : b.uses_dictionary() ? codec::FrameReference(dictionary_.get())
                                                          : codec::FrameReference();
  for (uint32_t i = 0; i < parts; ++i) {
    const uint32_t k = i == 0 ? lead : (i - 1 < lead ? i - 1 : i);
    const format::SealedFrame& f = frames[k];
    // The frame table keeps frames apart and within the payload (ParseFrameTable): each opens in place.
    const std::span<uint8_t> sealed = payload.subspan(f.offset, f.sealed_length);
    const std::span<uint8_t> plain = sealed.first(f.sealed_length - format::kSealTagSize);
    if (!cipher_->Open(format::FrameUnitAd(block, b, k, parts, f.first_page, f.pages), sealed, plain)) {
      return Status::AuthFailed(fmt::format("{}: frame {}: authentication failed (tampered, cut short, moved from "
                                            "another place or file)",
                                            BlockWhere(block), k));
    }
    const size_t base = size_t(f.first_page) * format::kPageSize;
    std::span<uint8_t> dest = out.subspan(base, size_t(f.pages) * format::kPageSize);
    Status s;
    // The caller's own errors pass through unchanged. One reference captured, so that std::function keeps the
    // callback in place (no allocation per frame).
    struct {
      size_t done = 0;  // of this frame
      size_t base;
      const BlockProgress* progress;
      bool caller_failed = false;
    } at{0, base, progress, false};
    if (progress) {
      s = decompressor.DecompressExact(plain, ref, dest, [&at](size_t ready) {
        const size_t begin = std::exchange(at.done, ready);
        if (ready <= begin) return Status::Ok();
        Status p = (*at.progress)(at.base + begin, at.base + ready);
        at.caller_failed = !p.ok();
        return p;
      });
    } else {
      s = decompressor.DecompressExact(plain, ref, dest);
    }
    if (at.caller_failed) return s;
    if (!s.ok()) return Status::Corrupt(fmt::format("{}: frame {}: {}", BlockWhere(block), k, s.message()));
  }
  return Status::Ok();
}

Status CheckpointReader::Impl::DecodeCached(uint32_t block, std::span<uint8_t> payload, std::span<uint8_t> out,
                                            const BlockProgress* progress, size_t first,
                                            std::span<const uint8_t> prefix, bool* use_storage) const {
  bool reported = false;
  BlockProgress noting;
  if (progress) {
    noting = [&](size_t begin, size_t end) {
      reported = true;
      return (*progress)(begin, end);
    };
  }
  Status s = Decompress(block, payload, false, out, progress ? &noting : nullptr, first, prefix);
  // XXH3 is no MAC: an entry planted with a matching checksum fails its tag, and storage has the real block. Once
  // a byte was reported, only authenticated bytes were (13.2), and the failure stands as the block's.
  if (s.code() == StatusCode::kAuthFailed && cipher_ && !reported) {
    *use_storage = true;
    return s;
  }
  if (s.ok()) cache_hits_.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Result<std::vector<uint8_t>> CheckpointReader::Impl::OpenSealedBlob(uint32_t index,
                                                                    std::span<const uint8_t> payload) const {
  const BlobInfo& b = model_.blobs[index];
  std::vector<uint8_t> content(payload.size() - format::kSealTagSize);  // stored_length >= 16 (index decoder)
  if (!cipher_->Open(format::BlobUnitAd(index, b), payload, content)) {
    return Status::AuthFailed(fmt::format("{}: blob \"{}\" at offset {:#x}: authentication failed (tampered, cut "
                                          "short, moved from another place or file)",
                                          file_->name(), b.name, b.offset));
  }
  return content;
}

// 13.7: without the key, every payload's checksum (storage scrubbing).
Status CheckpointReader::Impl::VerifySealedFile(const std::function<void(const VerifyProgress&)>& progress,
                                                VerifyProgress* p) const {
  std::vector<uint8_t> payload;
  for (uint32_t b = 0; b < model_.blocks.size(); ++b) {
    payload.resize(model_.blocks[b].stored_length);
    HLT_RETURN_IF_ERROR(ReadPayload(b, payload));
    HLT_RETURN_IF_ERROR(VerifyOrReread(b, payload, nullptr));
    ++p->blocks_done;
    if (progress) progress(*p);
  }
  const uint64_t seed = format::FileSeed(header_.file_id);
  for (uint32_t i = 0; i < model_.blobs.size(); ++i) {
    const BlobInfo& b = model_.blobs[i];
    payload.resize(b.stored_length);
    HLT_RETURN_IF_ERROR(file_->ReadAt(b.offset, payload));
    const uint64_t computed = codec::Xxh3_64(payload, format::BlobSeed(seed, i));
    if (computed != b.checksum) {
      return Status::Corrupt(fmt::format("{}: blob \"{}\" at offset {:#x}: checksum mismatch (stored {:#x}, computed "
                                         "{:#x})",
                                         file_->name(), b.name, b.offset, b.checksum, computed));
    }
  }
  return Status::Ok();
}

Result<std::optional<KeyId>> ReadCheckpointKeyId(const std::string& path) {
  HLT_ASSIGN_OR_RETURN(auto file, OpenCheckpointFile(path));
  std::array<uint8_t, format::kHeaderSize> hb;
  if (file->size() < hb.size()) return Status::Corrupt(path + ": shorter than a header (not a checkpoint)");
  HLT_RETURN_IF_ERROR(file->ReadAt(0, hb));
  HLT_ASSIGN_OR_RETURN(format::Header header, format::DecodeHeader(hb, path));
  if (!header.encrypted()) return std::optional<KeyId>();
  return std::optional<KeyId>(header.key_id);
}

}  // namespace halite
