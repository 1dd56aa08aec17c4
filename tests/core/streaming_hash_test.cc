// The public streaming hash (what the libvirt integration fingerprints frozen disks with) is XXH3-128, the
// format's content hash, whatever the pieces it is fed in.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "codec/hashing.h"
#include "halite/streaming_hash.h"

using halite::Hash128Digest;
using halite::StreamingHash128;

TEST_CASE("streaming hash: nothing hashed is XXH3-128 of the empty input, printed as xxhsum -H2 does",
          "[hash]") {
  StreamingHash128 hash;
  CHECK(hash.Digest().Hex() == "99aa06d3014798d86001c324468d497f");
}

TEST_CASE("streaming hash: pieces of any size hash as the whole", "[hash]") {
  std::vector<uint8_t> data(300000);
  uint32_t x = 12345;
  for (auto& b : data) b = uint8_t((x = x * 1103515245 + 12345) >> 16);
  const auto whole = halite::codec::Xxh3_128(data);
  for (size_t piece : {size_t{1}, size_t{7}, size_t{4096}, size_t{65537}, data.size()}) {
    StreamingHash128 hash;
    for (size_t at = 0; at < data.size(); at += piece) {
      hash.Update(std::span(data).subspan(at, std::min(piece, data.size() - at)));
    }
    INFO("piece " << piece);
    CHECK(hash.Digest() == Hash128Digest{whole.low, whole.high});
  }
}
