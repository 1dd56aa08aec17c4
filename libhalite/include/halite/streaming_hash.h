// XXH3-128 of a stream of bytes that does not fit in memory at once (a disk image frozen at save time, whose
// fingerprint a restore compares). The same function as the format's content hashes, so callers outside the
// library never include xxhash.h themselves: the library is the one place that links a hash implementation.
#ifndef HALITE_STREAMING_HASH_H_
#define HALITE_STREAMING_HASH_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "halite/export.h"

namespace halite {

struct HALITE_EXPORT Hash128Digest {
  uint64_t low = 0, high = 0;
  bool operator==(const Hash128Digest&) const = default;
  // 32 lowercase hex digits, the high half first (as xxhsum -H2 prints it).
  std::string Hex() const;
};

class HALITE_EXPORT StreamingHash128 {
 public:
  StreamingHash128();
  ~StreamingHash128();
  StreamingHash128(const StreamingHash128&) = delete;
  StreamingHash128& operator=(const StreamingHash128&) = delete;

  void Update(std::span<const uint8_t> bytes);
  // The hash of everything passed to Update so far; more may be added after.
  Hash128Digest Digest() const;

 private:
  struct HALITE_HIDDEN State;
  std::unique_ptr<State> state_;
};

}  // namespace halite

#endif  // HALITE_STREAMING_HASH_H_
