#include "cache/cache_entry.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "halite/bytes.h"

namespace halite::cache {

namespace {
constexpr char kMagic[8] = {'H', 'L', 'T', 'B', 'C', 'E', '0', '1'};
}  // namespace

std::string SubdirName(unsigned index) { return fmt::format("{:02x}", index & 0xff); }

std::string EntryPath(const BlockCacheKey& key) {
  std::string id;
  for (uint8_t b : key.file_id) id += fmt::format("{:02x}", b);
  return fmt::format("{}/{}-{:08x}-{:016x}", SubdirName(unsigned(key.checksum & 0xff)), id, key.block, key.checksum);
}

std::array<uint8_t, kEntryHeaderSize> EncodeEntryHeader(const BlockCacheKey& key) {
  std::array<uint8_t, kEntryHeaderSize> h{};
  std::memcpy(h.data(), kMagic, sizeof kMagic);
  std::copy(key.file_id.begin(), key.file_id.end(), h.begin() + 8);
  halite::StoreLe32(h.data() + 24, key.block);
  halite::StoreLe32(h.data() + 28, key.stored_length);
  halite::StoreLe64(h.data() + 32, key.checksum);
  return h;
}

bool EntryHeaderMatches(std::span<const uint8_t> header, const BlockCacheKey& key) {
  if (header.size() != kEntryHeaderSize) return false;
  const auto want = EncodeEntryHeader(key);
  return std::equal(want.begin(), want.end(), header.begin());
}

}  // namespace halite::cache
