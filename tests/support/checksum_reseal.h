// The one re-sealer of the test suite and the fuzzers: after a test or a fuzzer changes bytes of a checkpoint on
// purpose, these recompute the checksums that would otherwise reject it first, so the deeper rule under test is
// what decides. Header-only and I/O-free (the fuzzers build it with clang); uses the same pure codecs as the
// reader.
#ifndef HALITE_TESTS_SUPPORT_CHECKSUM_RESEAL_H_
#define HALITE_TESTS_SUPPORT_CHECKSUM_RESEAL_H_

#include <cstdint>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "codec/hashing.h"
#include "halite/bytes.h"
#include "format/encryption_codec.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/format_constants.h"

namespace halite::testing {

// `file` (a checkpoint whose footer is intact) with its index replaced by `index`: payloads kept, a new footer
// with the new index length, file size and index checksum.
inline std::vector<uint8_t> ResealWithIndex(std::span<const uint8_t> file, std::span<const uint8_t> index) {
  using namespace halite::format;
  const uint8_t* old_footer = file.data() + file.size() - kFooterSize;
  Footer footer;
  footer.index_offset = LoadLe64(old_footer);
  std::memcpy(footer.file_id.data(), old_footer + 24, footer.file_id.size());
  std::vector<uint8_t> out(file.begin(), file.begin() + long(footer.index_offset));
  out.insert(out.end(), index.begin(), index.end());
  footer.index_length = index.size();
  footer.file_size = out.size() + kFooterSize;
  footer.index_checksum = codec::Xxh3_64(index, FileSeed(footer.file_id));
  auto encoded = EncodeFooter(footer);
  out.insert(out.end(), encoded.begin(), encoded.end());
  return out;
}

// Where the body of the first section of `type` starts inside `index`, or SIZE_MAX when there is none.
inline size_t FindSectionBody(std::span<const uint8_t> index, uint32_t type) {
  size_t at = 0;
  while (at + format::kSectionHeaderSize <= index.size()) {
    uint32_t t = halite::LoadLe32(&index[at]);
    uint64_t len = halite::LoadLe64(&index[at + 8]);
    if (t == type) return at + format::kSectionHeaderSize;
    if (len > index.size()) break;
    at += format::kSectionHeaderSize + (len + 7) / 8 * 8;
  }
  return SIZE_MAX;
}
inline size_t FindSectionBody(std::span<const uint8_t> index, format::SectionType type) {
  return FindSectionBody(index, static_cast<uint32_t>(type));
}

// Recomputes every checksum of a would-be checkpoint in place: header, each block and blob the index describes
// (when it decodes), index, footer. Whatever does not parse is left as it is.
inline void ResealAllChecksums(std::vector<uint8_t>& f) {
  using namespace halite::format;
  if (f.size() < kHeaderSize + kFooterSize) return;
  StoreLe64(&f[56], codec::Xxh3_64(std::span<const uint8_t>(f.data(), 56), 0));
  uint8_t* footer = f.data() + f.size() - kFooterSize;
  FileId id;
  std::memcpy(id.data(), footer + 24, id.size());
  const uint64_t seed = FileSeed(id);
  const uint64_t index_offset = LoadLe64(footer), index_length = LoadLe64(footer + 8);
  const uint64_t limit = f.size() - kFooterSize;
  if (index_offset <= limit && index_length <= limit - index_offset) {
    std::span<uint8_t> index(f.data() + index_offset, index_length);
    auto model = DecodeIndex(index, index_offset, "reseal");
    if (model) {
      // DecodeIndex checked that every payload lies between the header and the index.
      for (size_t i = 0; i < model->blocks.size(); ++i) {
        auto& b = model->blocks[i];
        b.checksum = codec::Xxh3_64(std::span<const uint8_t>(f.data() + b.offset, b.stored_length), BlockSeed(seed, i));
      }
      for (size_t i = 0; i < model->blobs.size(); ++i) {
        auto& b = model->blobs[i];
        b.checksum = codec::Xxh3_64(std::span<const uint8_t>(f.data() + b.offset, b.stored_length), BlobSeed(seed, i));
      }
      std::vector<uint8_t> encoded = EncodeIndex(*model);
      if (model->mac.present) {
        auto mac = EncodeMacSection(model->mac);
        encoded.insert(encoded.end(), mac.begin(), mac.end());
      }
      if (model->encryption.present) {  // its tag as it was: ResealWithKey recomputes it
        auto section = EncodeEncryptionSection(model->encryption.cipher, model->encryption.index_tag);
        encoded.insert(encoded.end(), section.begin(), section.end());
      }
      if (encoded.size() == index.size()) std::memcpy(index.data(), encoded.data(), encoded.size());
    }
    StoreLe64(footer + 40, codec::Xxh3_64(index, seed));
  }
  StoreLe64(footer + 48, codec::Xxh3_64(std::span<const uint8_t>(footer, 48), seed));
}

// ResealAllChecksums, then, for an encrypted file (format-spec 13.5), the index tag computed with `key` as its
// writer would: the key holder's reseal, so that what decides is a unit's own tag or a rule behind the index tag.
// Whatever does not parse is left as ResealAllChecksums left it.
inline void ResealWithKey(std::vector<uint8_t>& f, const EncryptionKey& key) {
  using namespace halite::format;
  ResealAllChecksums(f);
  if (f.size() < kHeaderSize + kFooterSize) return;
  uint8_t* footer = f.data() + f.size() - kFooterSize;
  FileId id;
  std::memcpy(id.data(), f.data() + 16, id.size());
  const uint64_t index_offset = LoadLe64(footer), index_length = LoadLe64(footer + 8);
  const uint64_t limit = f.size() - kFooterSize;
  if (index_offset > limit || index_length > limit - index_offset) return;
  std::span<uint8_t> index(f.data() + index_offset, index_length);
  auto view = FindEncryptionSection(index, index_offset, "reseal");
  if (!view) return;
  auto cipher = FileCipher::Derive(key, id, view->cipher);
  if (!cipher) return;
  IndexTag tag = ComputeIndexTag(**cipher, std::span<const uint8_t>(f.data(), kHeaderSize), index.first(view->offset));
  std::memcpy(index.data() + view->offset + kSectionHeaderSize + 8, tag.data(), tag.size());
  const uint64_t seed = FileSeed(id);
  StoreLe64(footer + 40, codec::Xxh3_64(index, seed));
  StoreLe64(footer + 48, codec::Xxh3_64(std::span<const uint8_t>(footer, 48), seed));
}

}  // namespace halite::testing

#endif  // HALITE_TESTS_SUPPORT_CHECKSUM_RESEAL_H_
