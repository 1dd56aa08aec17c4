#include "format/integrity_checks.h"

#include <fmt/format.h>

#include "codec/hashing.h"
#include "halite/bytes.h"
#include "halite/format_constants.h"

namespace halite::format {

// Byte offsets of the fields these checks name, inside the header and the footer (sections 3 and 4).
constexpr uint64_t kHeaderFlagsOffset = 36;
constexpr uint64_t kFooterFileIdOffset = 24;

Status CheckFileIdsAgree(const Header& header, const Footer& footer, const std::string& name) {
  if (header.file_id == footer.file_id) return Status::Ok();
  return Status::Corrupt(fmt::format("{}: footer at offset {:#x}: file_id differs from the header's (footer of "
                                     "another checkpoint?)",
                                     name, footer.file_size - kFooterSize + kFooterFileIdOffset));
}

Status CheckAuthenticatedFlag(const Header& header, const IndexModel& index, const std::string& name) {
  const bool flagged = (header.flags & kHeaderAuthenticated) != 0;
  if (flagged == index.mac.present) return Status::Ok();
  return Status::Corrupt(fmt::format("{}: header at offset {:#x}: AUTHENTICATED flag is {} but the index {} "
                                     "MAC section",
                                     name, kHeaderFlagsOffset, flagged ? "set" : "clear",
                                     index.mac.present ? "has a" : "has no"));
}

Status CheckEncryptedFlag(const Header& header, const IndexModel& index, const std::string& name) {
  if (header.encrypted() == index.encryption.present) return Status::Ok();
  return Status::Corrupt(fmt::format("{}: header at offset {:#x}: ENCRYPTED flag is {} but the index {} "
                                     "ENCRYPTION section",
                                     name, kHeaderFlagsOffset, header.encrypted() ? "set" : "clear",
                                     index.encryption.present ? "has an" : "has no"));
}

Status CheckMinorVersionCoversIndex(const Header& header, const IndexModel& index, const std::string& name) {
  const uint16_t needed = MinimumMinorVersion(index);
  if (header.minor >= needed) return Status::Ok();
  std::string features;  // every feature newer than the header says, newest first
  for (const VersionedFeature& f : VersionedFeatures(index)) {
    if (f.minor > header.minor) features += (features.empty() ? "" : "; ") + std::string(f.name);
  }
  return Status::Corrupt(fmt::format("{}: header at offset 0xa: format version {}.{} but the index uses version {}.{} "
                                     "features ({})",
                                     name, header.major, header.minor, header.major, needed, features));
}

Status CheckParentIsNotSelf(const Header& header, const IndexModel& index, const std::string& name) {
  if (!index.parent || index.parent->file_id != header.file_id) return Status::Ok();
  return Status::Corrupt(name + ": index PARENT: parent_file_id is this file's own file_id (a file cannot be its "
                                "own parent)");
}

IndexFingerprint ComputeIndexFingerprint(std::span<const uint8_t> header_bytes, std::span<const uint8_t> index,
                                         std::span<const uint8_t> footer_bytes) {
  codec::Hash128 h = codec::Xxh3_128Concat({header_bytes, index, footer_bytes});
  IndexFingerprint out;
  StoreLe64(&out[0], h.low);
  StoreLe64(&out[8], h.high);
  return out;
}

IndexMac ComputeIndexMac(const MacKey& key, std::span<const uint8_t> header_bytes,
                         std::span<const uint8_t> index_before_mac) {
  IndexMac mac;
  std::span<const uint8_t> parts[] = {header_bytes, index_before_mac};
  codec::Mac(key, kIndexMacTag, parts, mac);
  return mac;
}

PayloadMac ComputePayloadMac(const MacKey& key, const char* tag, const FileId& file_id, uint64_t position,
                             std::span<const uint8_t> payload) {
  uint8_t le[8];
  StoreLe64(le, position);
  PayloadMac mac;
  std::span<const uint8_t> parts[] = {file_id, le, payload};
  codec::Mac(key, tag, parts, mac);
  return mac;
}

Status CheckIndexMac(const MacKey& key, std::span<const uint8_t> header_bytes, std::span<const uint8_t> index,
                     const IndexModel& model, const std::string& name) {
  if (!model.mac.present) {
    return Status::AuthFailed(name + ": a key was given but the checkpoint is not authenticated (no MAC)");
  }
  IndexMac mac = ComputeIndexMac(key, header_bytes, index.first(model.mac_section_offset));
  if (!codec::MacEqual(mac, model.mac.index_mac)) {
    return Status::AuthFailed(name + ": header and index MAC mismatch (tampered, or made with another key)");
  }
  return Status::Ok();
}

Status CheckPayloadMac(const MacKey& key, const char* tag, const FileId& file_id, uint64_t position,
                       std::span<const uint8_t> payload, const PayloadMac& stored, const std::string& where) {
  PayloadMac mac = ComputePayloadMac(key, tag, file_id, position, payload);
  if (!codec::MacEqual(mac, stored)) return Status::AuthFailed(where + ": MAC mismatch (tampered or misplaced)");
  return Status::Ok();
}

}  // namespace halite::format
