// Listing a block cache directory and deleting its least recently used entries (halite/block_cache.h). Called
// with the cache's lock held, so no other process inserts, drops or evicts meanwhile.
#ifndef HALITE_CACHE_CACHE_EVICTION_H_
#define HALITE_CACHE_CACHE_EVICTION_H_

#include <cstdint>
#include <string>

#include "halite/status.h"

namespace halite::cache {

struct EvictionResult {
  uint64_t bytes_before = 0;  // what the listing found (the count kept in DIR/state may have drifted)
  uint64_t bytes_after = 0;
  uint64_t entries_deleted = 0;
};

// Lists every entry of the 256 subdirectories of the cache open at `dir_fd` and deletes the least recently
// modified (a hit sets the modification time) until at most `target_bytes` of entries are left. Temporary files
// in DIR/tmp older than an hour (left by a process killed mid-insert) are deleted too. `name` (the directory)
// is named in errors. Errors: kIoError when a subdirectory cannot be listed; entries that vanish meanwhile are
// skipped.
Result<EvictionResult> EvictLeastRecentlyUsed(int dir_fd, uint64_t target_bytes, const std::string& name);

// The bytes of entries in the cache open at `dir_fd` (a listing, without deleting anything).
Result<uint64_t> CountEntryBytes(int dir_fd, const std::string& name);

}  // namespace halite::cache

#endif  // HALITE_CACHE_CACHE_EVICTION_H_
