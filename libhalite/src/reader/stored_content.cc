// A block's or blob's content as an unencrypted file stores it (raw pages, zstd frames), read from storage and
// verified, not decompressed: blobs are decompressed from here, and hlt-save rekey re-seals it under another key.
#include <fmt/format.h>

#include "codec/hashing.h"
#include "reader/reader_impl.h"

namespace halite {

Result<std::vector<uint8_t>> CheckpointReader::Impl::ReadBlobContent(uint32_t index) const {
  const BlobInfo& b = model_.blobs[index];
  const std::string where = file_->name() + ": blob \"" + b.name + "\" at offset " + fmt::format("{:#x}", b.offset);
  std::vector<uint8_t> payload(b.stored_length);  // bounded by the file size (checked at open)
  HLT_RETURN_IF_ERROR(file_->ReadAt(b.offset, payload));
  if (options_.mac_key) {
    HLT_RETURN_IF_ERROR(format::CheckPayloadMac(*options_.mac_key, format::kBlobMacTag, header_.file_id, index,
                                                payload, model_.mac.blob_macs[index], where));
  }
  const uint64_t computed = codec::Xxh3_64(payload, format::BlobSeed(format::FileSeed(header_.file_id), index));
  if (computed != b.checksum) {
    return Status::Corrupt(where + ": checksum mismatch (stored " + fmt::format("{:#x}", b.checksum) + ", computed " +
                           fmt::format("{:#x}", computed) + ")");
  }
  if (cipher_) return OpenSealedBlob(index, payload);  // 13.3
  return payload;
}

Result<CheckpointReader::Impl::BlockContent> CheckpointReader::Impl::ReadBlockContent(uint32_t block) const {
  const BlockInfo& b = model_.blocks[block];
  std::vector<uint8_t> payload(b.stored_length);
  HLT_RETURN_IF_ERROR(ReadPayload(block, payload).WithContext("block " + std::to_string(block)));
  HLT_RETURN_IF_ERROR(VerifyOrReread(block, payload, nullptr));
  const codec::Dictionary* dict = b.uses_dictionary() ? dictionary_.get() : nullptr;
  BlockContent out;
  if (!cipher_) {
    if (b.framed()) {
      HLT_ASSIGN_OR_RETURN(out.frames, codec::SplitFrames(payload, dict, b.raw_length(), format::kPageSize));
    }
    out.bytes = std::move(payload);
    return out;
  }
  if (!b.framed()) {
    out.bytes.resize(payload.size() - format::kSealTagSize);
    if (!cipher_->Open(format::BlockUnitAd(block, b), payload, out.bytes)) {
      return Status::AuthFailed(BlockWhere(block) + ": authentication failed (tampered, cut short, moved from another "
                                                    "place or file)");
    }
    return out;
  }
  // 13.2: each frame opened on its own; their contents laid end to end as an unencrypted FRAMED block holds them.
  HLT_ASSIGN_OR_RETURN(std::vector<format::SealedFrame> frames, format::ParseFrameTable(payload, b, BlockWhere(block)));
  const uint32_t parts = uint32_t(frames.size());
  for (uint32_t k = 0; k < parts; ++k) {
    const format::SealedFrame& f = frames[k];
    codec::FrameExtent e;
    e.payload_offset = out.bytes.size();
    e.payload_size = f.sealed_length - format::kSealTagSize;
    e.content_offset = size_t(f.first_page) * format::kPageSize;
    e.content_size = size_t(f.pages) * format::kPageSize;
    out.bytes.resize(out.bytes.size() + e.payload_size);
    if (!cipher_->Open(format::FrameUnitAd(block, b, k, parts, f.first_page, f.pages),
                       std::span<const uint8_t>(payload).subspan(f.offset, f.sealed_length),
                       std::span<uint8_t>(out.bytes).subspan(e.payload_offset, e.payload_size))) {
      return Status::AuthFailed(fmt::format("{}: frame {}: authentication failed (tampered, cut short, moved from "
                                            "another place or file)",
                                            BlockWhere(block), k));
    }
    out.frames.push_back(e);
  }
  return out;
}

}  // namespace halite
