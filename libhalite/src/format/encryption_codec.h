// Encrypted checkpoints (format-spec section 13): file keys, unit nonces and associated data, sealed blocks
// (frame by frame for FRAMED blocks), blobs and sections, and the index tag. Pure: no I/O; the AEADs are codec's.
// The writer seals with these, the reader opens with them, and the fuzzers and test vectors use the same code.
#ifndef HALITE_FORMAT_ENCRYPTION_CODEC_H_
#define HALITE_FORMAT_ENCRYPTION_CODEC_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/aead.h"
#include "codec/zstd_codec.h"
#include "halite/checkpoint_types.h"
#include "halite/encryption.h"
#include "halite/format_constants.h"
#include "halite/status.h"

namespace halite::format {

using IndexTag = std::array<uint8_t, kSealTagSize>;

// 13.1: what a unit's associated data says about it.
struct UnitAd {
  UnitKind kind = UnitKind::kBlock;
  uint64_t position = 0;  // block or blob index, section type, 0 for the index tag
  uint32_t part = 0;      // frame index of a FRAMED block's frame
  uint32_t parts = 1;     // frame count of a FRAMED block
  uint32_t flags = 0;     // block flags without HOT, blob flags, section flags
  uint64_t length = 0;    // the block's or blob's stored_length, a section's body_length, the index tag's extent
  uint32_t first_page = 0;
  uint32_t pages = 0;
};

// A file's key (13.1: derived from the checkpoint key, the file_id and the cipher) and the sealing of its units.
// Thread-safe.
class FileCipher {
 public:
  // Errors: kCorrupt for a cipher number 13.5 does not define,
  // kIoError (libsodium cannot initialise).
  static Result<std::shared_ptr<const FileCipher>> Derive(const EncryptionKey& key, const FileId& file_id,
                                                          uint32_t cipher);
  uint32_t cipher() const { return cipher_; }
  const FileId& file_id() const { return file_id_; }
  // Writes plain's ciphertext and tag to out (plain.size() + 16 bytes).
  void Seal(const UnitAd& ad, std::span<const uint8_t> plain, std::span<uint8_t> out) const;
  // Checks the tag and writes the plaintext to out (sealed.size() - 16 bytes); false when it does not verify.
  bool Open(const UnitAd& ad, std::span<const uint8_t> sealed, std::span<uint8_t> out) const;
  // Seal with associated data given whole (the index tag's is the unit AD, the header and the index).
  void SealWithAd(const codec::AeadNonce& nonce, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
                  std::span<uint8_t> out) const;

 private:
  FileCipher() = default;
  std::unique_ptr<codec::AeadKey> key_;
  FileId file_id_{};
  uint32_t cipher_ = 0;
};

const char* CipherNumberName(uint32_t cipher);  // "AES-256-GCM", "XChaCha20-Poly1305", "unknown"
std::array<uint8_t, kUnitAdSize> EncodeUnitAd(const FileId& file_id, const UnitAd& ad);
codec::AeadNonce UnitNonce(UnitKind kind, uint32_t part, uint64_t position);

// 13.2: the associated data of block `block` (one unit), or of frame `part` of `parts` holding `pages` pages from
// `first_page` on.
UnitAd BlockUnitAd(uint64_t block, const BlockInfo& info);
UnitAd FrameUnitAd(uint64_t block, const BlockInfo& info, uint32_t part, uint32_t parts, uint32_t first_page,
                   uint32_t pages);
// The stored length of a block whose content is `content_size` bytes (in `frames` frames when FRAMED, else 0).
uint64_t SealedBlockLength(uint64_t content_size, size_t frames);
// Seals a block's content (what an unencrypted file would store) into its payload. `info` carries the block's
// flags and page count (its stored_length is computed here); `frames` lists a FRAMED block's frames in order
// (codec::SplitFrames of the content), empty otherwise.
std::vector<uint8_t> SealBlock(const FileCipher& cipher, uint64_t block, const BlockInfo& info,
                               std::span<const uint8_t> content, std::span<const codec::FrameExtent> frames);

// A frame of an encrypted FRAMED block, as its frame table places it.
struct SealedFrame {
  uint32_t first_page = 0;  // in the block
  uint32_t pages = 0;
  size_t offset = 0;        // of the sealed frame in the payload
  uint32_t sealed_length = 0;
};
// 13.2: the frame table of an encrypted FRAMED block, checked against every rule before anything is decrypted.
// `where` names the block in messages; errors are kCorrupt.
Result<std::vector<SealedFrame>> ParseFrameTable(std::span<const uint8_t> payload, const BlockInfo& info,
                                                 const std::string& where);

// 13.3 and 13.4.
UnitAd BlobUnitAd(uint64_t blob, const BlobInfo& info);
UnitAd SectionUnitAd(uint32_t type, uint32_t flags, uint64_t body_length);

// 13.5: the index tag over the header and the index bytes before the ENCRYPTION section.
IndexTag ComputeIndexTag(const FileCipher& cipher, std::span<const uint8_t> header_bytes,
                         std::span<const uint8_t> index_before);
// The ENCRYPTION section, to append after the other sections.
std::vector<uint8_t> EncodeEncryptionSection(uint32_t cipher, const IndexTag& tag);

// The ENCRYPTION section of an index found by walking the section framing only (13.5: a reader with the key checks
// the index tag before it decodes the index with the sealed sections opened). kCorrupt when the framing is broken
// or the last section is not a well-formed ENCRYPTION section.
struct EncryptionSectionView {
  uint32_t cipher = 0;
  IndexTag index_tag{};
  size_t offset = 0;  // of the section in the index: the extent the tag covers
};
Result<EncryptionSectionView> FindEncryptionSection(std::span<const uint8_t> index, uint64_t index_offset,
                                                    const std::string& name);

}  // namespace halite::format

#endif  // HALITE_FORMAT_ENCRYPTION_CODEC_H_
