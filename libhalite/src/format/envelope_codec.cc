#include "format/envelope_codec.h"

#include <cstring>

#include <fmt/format.h>

#include "codec/hashing.h"
#include "halite/bytes.h"

namespace halite::format {

uint64_t FileSeed(const FileId& id) { return LoadLe64(id.data()) ^ LoadLe64(id.data() + 8); }
uint64_t BlockSeed(uint64_t file_seed, uint64_t block_index) {
  return file_seed ^ (kBlockSeedMultiplier * (block_index + 1));
}
uint64_t BlobSeed(uint64_t file_seed, uint64_t blob_index) {
  return file_seed ^ (kBlobSeedMultiplier * (blob_index + 1));
}

std::array<uint8_t, kHeaderSize> EncodeHeader(const Header& h) {
  std::array<uint8_t, kHeaderSize> b{};
  std::memcpy(b.data(), kHeaderMagic, 8);
  StoreLe16(&b[8], h.major);
  StoreLe16(&b[10], h.minor);
  StoreLe32(&b[12], kHeaderSize);
  std::memcpy(&b[16], h.file_id.data(), 16);
  StoreLe32(&b[32], kPageSize);
  StoreLe32(&b[36], h.flags);
  std::memcpy(&b[kHeaderKeyIdOffset], h.key_id.data(), h.key_id.size());
  StoreLe64(&b[56], codec::Xxh3_64(std::span(b.data(), 56), 0));
  return b;
}

Result<Header> DecodeHeader(std::span<const uint8_t> b, const std::string& name) {
  auto err = [&](uint64_t off, const std::string& what) {
    return Status::Corrupt(name + ": header at offset " + fmt::format("{:#x}", off) + ": " + what);
  };
  if (b.size() != kHeaderSize) return err(0, "expected 64 bytes");
  if (std::memcmp(b.data(), kHeaderMagic, 8) != 0) return err(0, "bad magic (expected \"HLTCKPT\\0\")");
  uint64_t stored = LoadLe64(&b[56]);
  uint64_t computed = codec::Xxh3_64(b.first(56), 0);
  if (stored != computed) {
    return err(56, "checksum mismatch (stored " + fmt::format("{:#x}", stored) + ", computed " + fmt::format("{:#x}", computed) + ")");
  }
  Header h;
  h.major = LoadLe16(&b[8]);
  h.minor = LoadLe16(&b[10]);
  if (h.major != kFormatMajor || h.minor > kFormatMinor) {
    return Status::Unsupported(name + ": format version " + std::to_string(h.major) + "." +
                               std::to_string(h.minor) + " (this reader reads " + std::to_string(kFormatMajor) +
                               ".0 to " + std::to_string(kFormatMajor) + "." + std::to_string(kFormatMinor) + ")");
  }
  if (LoadLe32(&b[12]) != kHeaderSize) return err(12, "header_size " + std::to_string(LoadLe32(&b[12])) + " (expected 64)");
  std::memcpy(h.file_id.data(), &b[16], 16);
  if (h.file_id == FileId{}) return err(16, "file_id is all zero");
  if (LoadLe32(&b[32]) != kPageSize) {
    return err(32, "page_size " + std::to_string(LoadLe32(&b[32])) + " (expected 4096)");
  }
  h.flags = LoadLe32(&b[36]);
  if (h.flags & ~kHeaderKnownFlags) return err(36, "unknown flags " + fmt::format("{:#x}", h.flags));
  if ((h.flags & kHeaderAuthenticated) && (h.flags & kHeaderEncrypted)) {
    return err(36, "AUTHENTICATED and ENCRYPTED are both set (an encrypted file is authenticated by its tags)");
  }
  if (h.encrypted()) {
    // 13.1: the key id names the key; an all-zero one names none.
    std::memcpy(h.key_id.data(), &b[kHeaderKeyIdOffset], h.key_id.size());
    if (h.key_id == std::array<uint8_t, 16>{}) return err(kHeaderKeyIdOffset, "key_id is all zero in an encrypted file");
    return h;
  }
  for (int i = 40; i < 56; ++i) {
    if (b[i] != 0) return err(i, "reserved byte is not zero");
  }
  return h;
}

std::array<uint8_t, kFooterSize> EncodeFooter(const Footer& f) {
  std::array<uint8_t, kFooterSize> b{};
  StoreLe64(&b[0], f.index_offset);
  StoreLe64(&b[8], f.index_length);
  StoreLe64(&b[16], f.file_size);
  std::memcpy(&b[24], f.file_id.data(), 16);
  StoreLe64(&b[40], f.index_checksum);
  StoreLe64(&b[48], codec::Xxh3_64(std::span(b.data(), 48), FileSeed(f.file_id)));
  std::memcpy(&b[56], kFooterMagic, 8);
  return b;
}

Result<Footer> DecodeFooter(std::span<const uint8_t> b, uint64_t actual_file_size, const std::string& name) {
  uint64_t base = actual_file_size >= kFooterSize ? actual_file_size - kFooterSize : 0;
  auto err = [&](uint64_t off, const std::string& what) {
    return Status::Corrupt(name + ": footer at offset " + fmt::format("{:#x}", base + off) + ": " + what);
  };
  if (actual_file_size < kHeaderSize + kFooterSize) {
    return Status::Corrupt(name + ": file is " + std::to_string(actual_file_size) +
                           " bytes (a checkpoint has at least 128: truncated or not a checkpoint)");
  }
  if (b.size() != kFooterSize) return err(0, "expected 64 bytes");
  if (std::memcmp(&b[56], kFooterMagic, 8) != 0) {
    return err(56, "bad magic (expected \"HLTFOOT\\0\"): truncated or not a checkpoint");
  }
  Footer f;
  f.index_offset = LoadLe64(&b[0]);
  f.index_length = LoadLe64(&b[8]);
  f.file_size = LoadLe64(&b[16]);
  std::memcpy(f.file_id.data(), &b[24], 16);
  f.index_checksum = LoadLe64(&b[40]);
  uint64_t stored = LoadLe64(&b[48]);
  uint64_t computed = codec::Xxh3_64(b.first(48), FileSeed(f.file_id));
  if (stored != computed) {
    return err(48, "checksum mismatch (stored " + fmt::format("{:#x}", stored) + ", computed " + fmt::format("{:#x}", computed) + ")");
  }
  if (f.file_size != actual_file_size) {
    return err(16, "file_size " + std::to_string(f.file_size) + " but the file has " +
                       std::to_string(actual_file_size) + " bytes");
  }
  uint64_t max_index = actual_file_size - kHeaderSize - kFooterSize;
  if (f.index_length < kSectionHeaderSize || f.index_length > max_index || f.index_length % 8 != 0) {
    return err(8, "index_length " + std::to_string(f.index_length) + " (expected a multiple of 8 in 16.." +
                      std::to_string(max_index) + ")");
  }
  if (f.index_offset != actual_file_size - kFooterSize - f.index_length) {
    return err(0, "index_offset " + fmt::format("{:#x}", f.index_offset) + " (expected " +
                      fmt::format("{:#x}", actual_file_size - kFooterSize - f.index_length) + ": the index ends at the footer)");
  }
  return f;
}

}  // namespace halite::format
