// The cross-structure rules of a checkpoint that are not a single structure's own (format-spec 4, 5.8), and the
// MAC inputs of section 5.8. Pure: no I/O. The reader and the writer both use these, and so do the fuzzers, so
// the checks production runs are the checks that are fuzzed.
#ifndef HALITE_FORMAT_INTEGRITY_CHECKS_H_
#define HALITE_FORMAT_INTEGRITY_CHECKS_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "codec/mac.h"
#include "format/envelope_codec.h"
#include "format/index_codec.h"
#include "halite/status.h"

namespace halite::format {

using IndexMac = std::array<uint8_t, 32>;
using PayloadMac = std::array<uint8_t, 16>;
using IndexFingerprint = std::array<uint8_t, 16>;

// Section 4: the footer's file_id equals the header's. kCorrupt naming the footer field's offset otherwise.
Status CheckFileIdsAgree(const Header& header, const Footer& footer, const std::string& name);

// Sections 3 and 5.8: the header's AUTHENTICATED flag is set exactly when the index has a MAC section.
Status CheckAuthenticatedFlag(const Header& header, const IndexModel& index, const std::string& name);

// Sections 3 and 13.5: the header's ENCRYPTED flag is set exactly when the index has an ENCRYPTION section.
Status CheckEncryptedFlag(const Header& header, const IndexModel& index, const std::string& name);

// Section 9: a file uses no feature newer than the minor version its header declares (a skippable section in a
// file that claims 1.0 is corrupt: a 1.0 reader would have rejected it).
Status CheckMinorVersionCoversIndex(const Header& header, const IndexModel& index, const std::string& name);

// 5.10: a PARENT section never names the file itself.
Status CheckParentIsNotSelf(const Header& header, const IndexModel& index, const std::string& name);

// Section 12: the index fingerprint a child's PARENT section records: XXH3_128 (seed 0) of the header's 64 bytes,
// the whole index and the footer's 64 bytes, as read; stored low 64 bits first, each little-endian.
IndexFingerprint ComputeIndexFingerprint(std::span<const uint8_t> header_bytes, std::span<const uint8_t> index,
                                         std::span<const uint8_t> footer_bytes);

// 5.8: BLAKE2b-32(key, "HLT-INDEX-MAC-1" || header bytes || index bytes before the MAC section).
IndexMac ComputeIndexMac(const MacKey& key, std::span<const uint8_t> header_bytes,
                         std::span<const uint8_t> index_before_mac);
// 5.8: BLAKE2b-16(key, tag || file_id || u64le(position) || payload); tag is kBlockMacTag or kBlobMacTag.
PayloadMac ComputePayloadMac(const MacKey& key, const char* tag, const FileId& file_id, uint64_t position,
                             std::span<const uint8_t> payload);

// 5.8 with a key: the index must carry a MAC section and its index_mac must match. `index` is the whole index
// as read; the part before the MAC section is what the MAC covers. Failures are kAuthFailed.
Status CheckIndexMac(const MacKey& key, std::span<const uint8_t> header_bytes, std::span<const uint8_t> index,
                     const IndexModel& model, const std::string& name);
// 5.8 with a key: a block's or blob's stored MAC matches its payload. `where` names the payload in messages.
Status CheckPayloadMac(const MacKey& key, const char* tag, const FileId& file_id, uint64_t position,
                       std::span<const uint8_t> payload, const PayloadMac& stored, const std::string& where);

}  // namespace halite::format

#endif  // HALITE_FORMAT_INTEGRITY_CHECKS_H_
