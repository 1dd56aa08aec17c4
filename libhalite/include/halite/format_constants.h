// Constants of the checkpoint format. Each cites the section of format-spec/checkpoint-format.md that defines it;
// change them only together with the spec and the test vectors.
#ifndef HALITE_FORMAT_CONSTANTS_H_
#define HALITE_FORMAT_CONSTANTS_H_

#include <cstdint>

namespace halite::format {

// Section 9: versions. kFormatMinor is the highest minor this code reads; a writer writes the lowest minor whose
// features the file uses (a file without skippable sections is a 1.0 file).
inline constexpr uint16_t kFormatMajor = 1;
inline constexpr uint16_t kFormatMinor = 6;
inline constexpr uint16_t kFormatMinorSkippableSections = 1;  // 1.1 added skippable sections (5.9)
inline constexpr uint16_t kFormatMinorParent = 2;             // 1.2 added PARENT and IN_PARENT (5.10, 12)
inline constexpr uint16_t kFormatMinorFramedBlocks = 3;       // 1.3 added the block flag FRAMED (5.4)
inline constexpr uint16_t kFormatMinorBasedBlocks = 4;        // 1.4 added BASED blocks and block groups (5.4, 12)
inline constexpr uint16_t kFormatMinorEncrypted = 5;          // 1.5 added encrypted checkpoints (section 13)
inline constexpr uint16_t kFormatMinorPackedPageMap = 6;      // 1.6 added the PACKED (compressed) PAGE_MAP (5.3)

// Section 1: a format page is always 4096 bytes.
inline constexpr uint32_t kPageSize = 4096;
inline constexpr uint32_t kPageShift = 12;

// Section 3: header.
inline constexpr uint8_t kHeaderMagic[8] = {'H', 'L', 'T', 'C', 'K', 'P', 'T', 0};
inline constexpr uint32_t kHeaderSize = 64;
// Section 4: footer.
inline constexpr uint8_t kFooterMagic[8] = {'H', 'L', 'T', 'F', 'O', 'O', 'T', 0};
inline constexpr uint32_t kFooterSize = 64;
inline constexpr uint32_t kFileIdSize = 16;

// Section 5: index sections, in the order they must appear.
enum class SectionType : uint32_t {
  kMetadata = 1,
  kRegions = 2,
  kPageMap = 3,
  kBlocks = 4,
  kBlobs = 5,
  kRestoreOrder = 6,
  kDictionary = 7,
  kMac = 8,     // always the last section
  kParent = 9,  // since 1.2 (5.10): after DICTIONARY, before the skippable sections and MAC
  kEncryption = 16,  // since 1.5 (13.5): always last, like MAC; a file has one of them at most
};
// 5.9: a section type with this bit set is skippable: a reader that does not know it ignores it.
inline constexpr uint32_t kSkippableSectionBit = 0x80000000u;
inline constexpr uint32_t kSectionHeaderSize = 16;
// 5.3, since 1.2: section flag of PAGE_MAP in a file with PARENT: the body lists only the pages that are not
// IN_PARENT, as (page, value) pairs after a u64 count.
inline constexpr uint32_t kSectionFlagSparse = 1u << 0;
// 13.4, since 1.5: the body is sealed (AEAD ciphertext and tag) in an encrypted file.
inline constexpr uint32_t kSectionFlagSealed = 1u << 1;
// 5.3, since 1.6: section flag of PAGE_MAP: the body is the plain body (dense or sparse) delta-coded by u32 words
// and compressed as one zstd frame; sealed after packing in an encrypted file.
inline constexpr uint32_t kSectionFlagPacked = 1u << 2;
inline constexpr uint32_t kSparsePageMapFixedSize = 8;
inline constexpr uint32_t kSparsePageMapEntrySize = 8;
inline constexpr uint32_t kMetadataFixedSize = 40;      // 5.1
inline constexpr uint32_t kRegionEntryFixedSize = 24;   // 5.2
inline constexpr uint32_t kBlockEntrySize = 32;         // 5.4
inline constexpr uint32_t kBlobEntryFixedSize = 40;     // 5.5
inline constexpr uint32_t kParentFixedSize = 48;        // 5.10
// 5.10: PARENT's path hint, and section 12: the longest chain (parent links below a file) a reader opens.
inline constexpr uint32_t kMaxPathHintLength = 1024;
inline constexpr uint32_t kMaxChainDepth = 16;
// 5.11: the PAGE_HASHES skippable section (since 1.1 rules; assigned with 1.2) and its one algorithm.
inline constexpr uint32_t kPageHashesSectionType = 0x80000002u;
inline constexpr uint32_t kPageHashAlgorithmXxh3Low64 = 1;  // low 64 bits of XXH3_128 of each stored slot's page
inline constexpr uint32_t kPageHashesFixedSize = 8;
// 5.12: the CODING skippable section (assigned with 1.4): how the writer chose the coding of the blocks.
inline constexpr uint32_t kCodingSectionType = 0x80000003u;
inline constexpr uint32_t kCodingFixedSize = 32;
inline constexpr uint32_t kCodingTrialSize = 24;
inline constexpr uint32_t kMaxCodingTrials = 16;

// Section 3: header flags.
inline constexpr uint32_t kHeaderAuthenticated = 1u << 0;  // a MAC section is present (5.8)
inline constexpr uint32_t kHeaderEncrypted = 1u << 1;      // since 1.5: section 13; key id in bytes 40..55
inline constexpr uint32_t kHeaderKnownFlags = kHeaderAuthenticated | kHeaderEncrypted;
inline constexpr uint32_t kHeaderKeyIdOffset = 40;
// Section 13: encrypted checkpoints. 13.1: key ids, file keys, unit nonces and associated data.
inline constexpr char kKeyIdTag[] = "HLT-KEY-ID-1";
inline constexpr char kFileKeyTag[] = "HLT-FILE-KEY-1";
inline constexpr uint32_t kCipherAes256Gcm = 1;          // 13.5
inline constexpr uint32_t kCipherXChaCha20Poly1305 = 2;
inline constexpr uint32_t kSealTagSize = 16;             // every sealed unit ends with a 16-byte tag
inline constexpr uint32_t kUnitAdSize = 56;
enum class UnitKind : uint32_t { kBlock = 1, kBlob = 2, kSection = 3, kIndexTag = 4 };
// 13.2: an encrypted FRAMED block starts with a frame table: u32 count, then (u32 pages, u32 sealed_length) each.
inline constexpr uint32_t kFrameTableFixedSize = 4;
inline constexpr uint32_t kFrameTableEntrySize = 8;
inline constexpr uint32_t kEncryptionSectionSize = 24;  // 13.5
// 5.8: MAC section.
inline constexpr uint32_t kMacAlgorithmBlake2b = 1;
inline constexpr uint32_t kMacFixedSize = 40;
inline constexpr uint32_t kIndexMacSize = 32;
inline constexpr uint32_t kPayloadMacSize = 16;
inline constexpr char kIndexMacTag[] = "HLT-INDEX-MAC-1";
inline constexpr char kBlockMacTag[] = "HLT-BLOCK-MAC-1";
inline constexpr char kBlobMacTag[] = "HLT-BLOB-MAC-1";

// 5.3: page map values.
inline constexpr uint32_t kPageMapAbsent = 0;
inline constexpr uint32_t kPageMapZero = 1;
inline constexpr uint32_t kPageMapFirstSlot = 2;
// 5.3, since 1.2: the page is the parent's view of the same page number (section 12). Never a slot: slots are
// fewer than 2^31.
inline constexpr uint32_t kPageMapInParent = 0xFFFFFFFFu;

// 5.4: block flags.
inline constexpr uint32_t kBlockCompressed = 1u << 0;
inline constexpr uint32_t kBlockDictionary = 1u << 1;
inline constexpr uint32_t kBlockHot = 1u << 2;
// Since 1.3: a compressed block's payload is several independent zstd frames, each holding whole pages.
inline constexpr uint32_t kBlockFramed = 1u << 3;
// Since 1.4: a child's block compressed against the content of the parent's block group holding its base_page (a
// zstd raw-content prefix); read with that group (section 12).
inline constexpr uint32_t kBlockBased = 1u << 4;
inline constexpr uint32_t kBlockKnownFlags = kBlockCompressed | kBlockDictionary | kBlockHot | kBlockFramed | kBlockBased;
// 5.5: blob flags.
inline constexpr uint32_t kBlobCompressed = 1u << 0;

// Section 8: checksum seed multipliers.
inline constexpr uint64_t kBlockSeedMultiplier = 0x9E3779B97F4A7C15ull;
inline constexpr uint64_t kBlobSeedMultiplier = 0xC2B2AE3D27D4EB4Full;

// Section 6: limits a reader checks before allocating.
inline constexpr uint32_t kMaxRegions = 1024;
inline constexpr uint32_t kMaxNameLength = 255;
inline constexpr uint64_t kMaxTotalPages = 1ull << 31;
inline constexpr uint32_t kMaxBlockPages = 4096;
inline constexpr uint32_t kMaxGroupPages = 4096;  // section 12: a block group (a block and what is BASED on it)
inline constexpr uint32_t kMaxBlobs = 4096;
inline constexpr uint64_t kMaxBlobRawLength = 1ull << 30;
inline constexpr uint32_t kMaxDictionaryLength = 1u << 20;
inline constexpr uint32_t kMinDictionaryLength = 8;
inline constexpr uint32_t kMaxMetadataString = 256;
inline constexpr uint64_t kMinHostPageSize = 4096;
inline constexpr uint64_t kMaxHostPageSize = 1ull << 30;

}  // namespace halite::format

#endif  // HALITE_FORMAT_CONSTANTS_H_
