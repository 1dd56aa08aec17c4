// The files of a block cache directory (halite/block_cache.h): where an entry lives and the header that says
// which block it holds. Pure computation, no I/O.
//
// An entry is DIR/XX/FILEID-BLOCK-CHECKSUM (lower-case hex; XX is the checksum's low byte, spreading entries over
// 256 subdirectories) holding a 64-byte header, then the stored payload:
//   0  8  magic "HLTBCE01"
//   8  16 file_id
//   24 4  block index (little-endian)
//   28 4  stored length
//   32 8  stored checksum
//   40 24 zero
// The header repeats the name so that a file put under the wrong name is never taken for the block; the
// payload itself is verified by the reader with the block's checksum.
#ifndef HALITE_CACHE_CACHE_ENTRY_H_
#define HALITE_CACHE_CACHE_ENTRY_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "halite/block_cache.h"

namespace halite::cache {

inline constexpr size_t kEntryHeaderSize = 64;

// "XX/FILEID-BLOCK-CHECKSUM", relative to the cache directory.
std::string EntryPath(const BlockCacheKey& key);
// The 256 subdirectory names, "00" to "ff".
std::string SubdirName(unsigned index);
std::array<uint8_t, kEntryHeaderSize> EncodeEntryHeader(const BlockCacheKey& key);
// True when `header` (kEntryHeaderSize bytes) is the header of `key`'s entry.
bool EntryHeaderMatches(std::span<const uint8_t> header, const BlockCacheKey& key);
// The file size of `key`'s entry.
inline uint64_t EntrySize(const BlockCacheKey& key) { return kEntryHeaderSize + key.stored_length; }

}  // namespace halite::cache

#endif  // HALITE_CACHE_CACHE_ENTRY_H_
