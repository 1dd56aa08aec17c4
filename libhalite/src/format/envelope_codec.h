// Header and footer of a checkpoint file (format-spec sections 3 and 4). Pure: no I/O.
#ifndef HALITE_FORMAT_ENVELOPE_CODEC_H_
#define HALITE_FORMAT_ENVELOPE_CODEC_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "halite/checkpoint_types.h"
#include "halite/format_constants.h"
#include "halite/status.h"

namespace halite::format {

struct Header {
  uint16_t major = kFormatMajor;
  uint16_t minor = 0;  // section 9: the lowest minor whose features the file uses (MinimumMinorVersion)
  FileId file_id{};
  uint32_t flags = 0;
  // 13.1, since 1.5: with kHeaderEncrypted, the id of the file's key (bytes 40..55); zero otherwise.
  std::array<uint8_t, 16> key_id{};
  bool encrypted() const { return (flags & kHeaderEncrypted) != 0; }
};

struct Footer {
  uint64_t index_offset = 0;
  uint64_t index_length = 0;
  uint64_t file_size = 0;
  FileId file_id{};
  uint64_t index_checksum = 0;
};

std::array<uint8_t, kHeaderSize> EncodeHeader(const Header& h);
// `name` is used in messages. Version errors are kUnsupported, everything else kCorrupt.
Result<Header> DecodeHeader(std::span<const uint8_t> bytes, const std::string& name);

std::array<uint8_t, kFooterSize> EncodeFooter(const Footer& f);
// Checks magic, checksum, the stated file size against `actual_file_size`, and the layout arithmetic.
Result<Footer> DecodeFooter(std::span<const uint8_t> bytes, uint64_t actual_file_size, const std::string& name);

// Section 1 and 8: seeds that bind checksums to one file and one position.
uint64_t FileSeed(const FileId& id);
uint64_t BlockSeed(uint64_t file_seed, uint64_t block_index);
uint64_t BlobSeed(uint64_t file_seed, uint64_t blob_index);

}  // namespace halite::format

#endif  // HALITE_FORMAT_ENVELOPE_CODEC_H_
