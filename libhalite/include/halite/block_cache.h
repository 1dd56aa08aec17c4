// BlockCache: a host-wide cache of locality-block payloads fetched from an object store, in a directory.
//
// A restore from s3:// or rados:// reads its blocks over the network; a second restore of the same checkpoint on
// the same host, a clone, or an incremental child whose blocks still live in a parent would read the same bytes
// again. With a cache (ReaderOptions::block_cache, the tools' --block-cache DIR or HALITE_BLOCK_CACHE), each
// block's stored payload (compressed, as in the checkpoint) is kept in a file named after what identifies its
// content: the checkpoint's file_id, the block's index in that file and its stored checksum (format-spec 5.4;
// the checksum is seeded with both, so a payload cannot pass for another block's). Every file of a chain uses
// its own file_id, so a child and its parent share the parent's entries.
//
// Nothing read from the cache is trusted: the reader verifies each payload with the block's checksum (and MAC,
// with a key) as if it came from storage, and an entry that fails (torn by a crash, damaged on disk, planted) is
// deleted and the block read from storage instead; it never reaches a guest. So an entry is written without
// fsync: a temporary file, renamed into place, which other processes see whole or not at all.
//
// Size: the directory holds at most `max_bytes` of entries (their file sizes), least recently used first out.
// Every process using the directory keeps one shared count in DIR/state under an flock(2); when an insert takes
// it past the bound, that process lists the entries and deletes the least recently used (by modification time,
// set on every hit) until 90% of the bound is left. Several processes (concurrent restores) may share a
// directory: inserts of the same entry by two of them leave one; a reader whose entry is evicted meanwhile still
// reads the file it opened. A process killed at any moment leaves at worst a temporary file (removed by the next
// eviction once an hour old) or an entry the count misses (counted again by the next eviction's listing).
//
// Thread-safety: every method may be called from several threads at once. Errors of the cache itself (a full
// disk, a directory gone) never fail a read: Lookup misses, Insert is skipped, and both are counted.
#ifndef HALITE_BLOCK_CACHE_H_
#define HALITE_BLOCK_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halite/checkpoint_types.h"
#include "halite/export.h"
#include "halite/status.h"

namespace halite {

struct HALITE_EXPORT BlockCacheOptions {
  // Bytes of entries the directory may hold (each entry: the stored payload plus a 64-byte header).
  uint64_t max_bytes = uint64_t{8} << 30;
};

// What identifies one block payload, whatever file or checkpoint names it.
struct HALITE_EXPORT BlockCacheKey {
  FileId file_id{};
  uint32_t block = 0;         // index of the block in that file (not in a chain's view)
  uint64_t checksum = 0;      // the block's stored checksum
  uint32_t stored_length = 0;
};

// Counters of one BlockCache object (this process's use of the directory). Only grow.
struct HALITE_EXPORT BlockCacheStats {
  uint64_t hits = 0;             // lookups that found an entry
  uint64_t misses = 0;           // lookups that did not (or could not read it)
  uint64_t inserts = 0;          // entries written
  uint64_t insert_failures = 0;  // entries not written (no space, no permission, ...): the reads went on
  uint64_t dropped = 0;          // entries deleted because they failed verification or were malformed
  uint64_t evicted = 0;          // entries deleted by this process to stay within the bound
  uint64_t hit_bytes = 0;        // payload bytes served
  uint64_t inserted_bytes = 0;   // payload bytes written
};

class HALITE_EXPORT BlockCache {
 public:
  // Opens (creating it and its parents when missing) the cache in `dir`. Errors: kInvalidArgument (max_bytes 0),
  // kIoError naming the directory when it cannot be created, written or locked.
  static Result<std::shared_ptr<BlockCache>> Open(const std::string& dir, BlockCacheOptions options = {});
  // The cache the environment asks for: HALITE_BLOCK_CACHE=DIR, HALITE_BLOCK_CACHE_SIZE=BYTES (K/M/G suffixes;
  // default 8G). Null when HALITE_BLOCK_CACHE is unset or empty. Errors: as Open, and kInvalidArgument for a bad
  // size.
  static Result<std::shared_ptr<BlockCache>> FromEnvironment();
  // The cache a program's settings choose (the tools' --block-cache DIR and --block-cache-size BYTES; moved here
  // from tools/common so that an embedder honours the same settings and environment): `dir`, or when empty the one
  // HALITE_BLOCK_CACHE names (null when unset); bounded by `max_bytes`, or when 0 by HALITE_BLOCK_CACHE_SIZE, else
  // 8G. Errors: as Open and FromEnvironment.
  static Result<std::shared_ptr<BlockCache>> OpenChosen(const std::string& dir, uint64_t max_bytes);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  const std::string& dir() const;
  uint64_t max_bytes() const;
  // The flags that open this cache in another process of ours (the image server, which OpenChosen opens it in):
  // --block-cache DIR (absolute) --block-cache-size BYTES.
  std::vector<std::string> CommandLineFlags() const;

  // Fills `payload` (exactly key.stored_length bytes) from the entry for `key` and marks it used. True on a hit.
  // The bytes are NOT verified: the caller checks them against the block's checksum and calls Drop when they fail.
  // An entry whose header does not match `key` or whose size is wrong is dropped here and is a miss.
  bool Lookup(const BlockCacheKey& key, std::span<uint8_t> payload);
  // Stores a verified payload for `key` (nothing happens when an entry exists already). May evict. Best effort:
  // a failure is counted (insert_failures) and returned, and the cache stays consistent.
  Status Insert(const BlockCacheKey& key, std::span<const uint8_t> payload);
  // Deletes the entry for `key` (it failed verification).
  void Drop(const BlockCacheKey& key);

  BlockCacheStats stats() const;
  // Bytes of entries in the directory according to the shared count (all processes). Errors: kIoError.
  Result<uint64_t> SizeBytes() const;

  class Impl;

 private:
  explicit BlockCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite

#endif  // HALITE_BLOCK_CACHE_H_
