// The host block cache on its own (halite/block_cache.h): entries found by key, least recently used out when the
// bound is reached, torn and misnamed entries never served, and the shared count kept exact by concurrent writers
// in two processes. The reader's side (verification, re-reads, chains) is in cached_reader_test.cc.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "halite/block_cache.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::testing;

namespace {

constexpr uint32_t kLen = 1000;
constexpr uint64_t kEntry = 64 + kLen;  // header + payload

BlockCacheKey Key(uint32_t block, uint8_t file = 1) {
  BlockCacheKey k;
  k.file_id.fill(file);
  k.block = block;
  k.checksum = 0x9E3779B97F4A7C15ull * (block + 1) + file;
  k.stored_length = kLen;
  return k;
}

std::vector<uint8_t> Payload(uint32_t block, uint8_t file = 1) {
  std::vector<uint8_t> p(kLen);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(block * 7 + file * 13 + i);
  return p;
}

bool Has(BlockCache& c, uint32_t block, uint8_t file = 1) {
  std::vector<uint8_t> got(kLen);
  return c.Lookup(Key(block, file), got) && got == Payload(block, file);
}

// The bytes of every entry file under `dir` (what the shared count must agree with), and whether tmp/ is empty.
uint64_t ListedBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name != "state" && e.path().parent_path().filename() != "tmp") total += e.file_size();
  }
  return total;
}

std::string EntryFile(const std::string& dir, const BlockCacheKey& k) {
  std::string id;
  char hex[3];
  for (uint8_t b : k.file_id) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    id += hex;
  }
  char rest[64];
  std::snprintf(rest, sizeof rest, "%02x/%s-%08x-%016llx", unsigned(k.checksum & 0xff), id.c_str(), k.block,
                (unsigned long long)k.checksum);
  return dir + "/" + rest;
}

}  // namespace

TEST_CASE("a block cache finds what was inserted by file and block and checksum", "[objstore][cache]") {
  TempDir tmp;
  auto c = BlockCache::Open(tmp.File("cache"), {uint64_t(1) << 20});
  REQUIRE(c.has_value());
  BlockCache& cache = **c;
  CHECK_FALSE(Has(cache, 3));
  REQUIRE(cache.Insert(Key(3), Payload(3)).ok());
  CHECK(Has(cache, 3));
  CHECK_FALSE(Has(cache, 3, 2));  // same block of another file
  BlockCacheKey other = Key(3);
  other.checksum ^= 1;  // the same block of a file rewritten with other content
  std::vector<uint8_t> got(kLen);
  CHECK_FALSE(cache.Lookup(other, got));
  // Inserting again changes nothing.
  REQUIRE(cache.Insert(Key(3), Payload(3)).ok());
  auto st = cache.stats();
  CHECK(st.inserts == 1);
  CHECK(st.hits == 1);
  CHECK(st.misses == 3);
  CHECK(st.hit_bytes == kLen);
  CHECK(*cache.SizeBytes() == kEntry);
  CHECK(ListedBytes(cache.dir()) == kEntry);
  // A payload of the wrong length is refused.
  CHECK_FALSE(cache.Insert(Key(4), std::vector<uint8_t>(10)).ok());
  CHECK(cache.stats().insert_failures == 1);
  // Another process (here: another object) opening the directory sees the entries and the count.
  auto again = BlockCache::Open(tmp.File("cache"), {uint64_t(1) << 20});
  REQUIRE(again.has_value());
  CHECK(Has(**again, 3));
  CHECK(*(*again)->SizeBytes() == kEntry);
}

TEST_CASE("a full block cache drops its least recently used entries down to 90% of its bound", "[objstore][cache]") {
  TempDir tmp;
  auto c = BlockCache::Open(tmp.File("cache"), {10 * kEntry});
  REQUIRE(c.has_value());
  BlockCache& cache = **c;
  for (uint32_t b = 0; b < 10; ++b) REQUIRE(cache.Insert(Key(b), Payload(b)).ok());
  CHECK(*cache.SizeBytes() == 10 * kEntry);  // exactly the bound: nothing evicted yet
  CHECK(Has(cache, 0));                      // 0 is now the most recently used
  REQUIRE(cache.Insert(Key(100), Payload(100)).ok());  // 11 entries: down to 9, the oldest two out (1 and 2)
  CHECK(*cache.SizeBytes() == 9 * kEntry);
  REQUIRE(cache.Insert(Key(101), Payload(101)).ok());
  REQUIRE(cache.Insert(Key(102), Payload(102)).ok());  // 11 again: 3 and 4 out
  CHECK(cache.stats().evicted == 4);
  for (uint32_t b : {1u, 2u, 3u, 4u}) {
    INFO("block " << b);
    CHECK_FALSE(Has(cache, b));
  }
  for (uint32_t b : {0u, 5u, 6u, 7u, 8u, 9u, 100u, 101u, 102u}) {
    INFO("block " << b);
    CHECK(Has(cache, b));
  }
  CHECK(*cache.SizeBytes() == 9 * kEntry);
  CHECK(ListedBytes(cache.dir()) == 9 * kEntry);
}

TEST_CASE("a torn or misnamed cache entry is never served and is deleted", "[objstore][cache]") {
  TempDir tmp;
  auto c = BlockCache::Open(tmp.File("cache"), {uint64_t(1) << 20});
  REQUIRE(c.has_value());
  BlockCache& cache = **c;
  REQUIRE(cache.Insert(Key(1), Payload(1)).ok());
  REQUIRE(cache.Insert(Key(2), Payload(2)).ok());
  REQUIRE(cache.Insert(Key(3), Payload(3)).ok());
  // Torn: a crash after the rename but before the data reached the disk leaves a short file.
  const std::string torn = EntryFile(cache.dir(), Key(1));
  REQUIRE(std::filesystem::exists(torn));
  std::filesystem::resize_file(torn, 64 + kLen / 2);
  std::vector<uint8_t> got(kLen);
  CHECK_FALSE(cache.Lookup(Key(1), got));
  CHECK_FALSE(std::filesystem::exists(torn));
  // Misnamed: block 2's entry under block 3's name (its header says block 2).
  std::filesystem::copy_file(EntryFile(cache.dir(), Key(2)), EntryFile(cache.dir(), Key(3)),
                             std::filesystem::copy_options::overwrite_existing);
  CHECK_FALSE(cache.Lookup(Key(3), got));
  CHECK_FALSE(std::filesystem::exists(EntryFile(cache.dir(), Key(3))));
  CHECK(Has(cache, 2));
  CHECK(cache.stats().dropped == 2);
  CHECK(*cache.SizeBytes() == ListedBytes(cache.dir()));
  CHECK(*cache.SizeBytes() == kEntry);
  // A damaged payload with an intact header is the reader's to catch (the block checksum): the cache returns the
  // bytes unverified, and Drop deletes the entry.
  const std::string damaged = EntryFile(cache.dir(), Key(2));
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 10);
    f.put(char(0xFF));
  }
  REQUIRE(cache.Lookup(Key(2), got));
  CHECK(got != Payload(2));
  cache.Drop(Key(2));
  CHECK_FALSE(std::filesystem::exists(damaged));
  CHECK(*cache.SizeBytes() == 0);
}

TEST_CASE("two processes filling one block cache at once keep it within its bound with an exact count",
          "[objstore][cache][concurrency]") {
  TempDir tmp;
  const std::string dir = tmp.File("cache");
  const uint64_t bound = 40 * kEntry;
  REQUIRE(BlockCache::Open(dir, {bound}).has_value());
  // Each process: 200 entries of its own and 50 shared ones, looked up as they go, from two threads each.
  auto work = [&](uint8_t file) -> bool {
    auto c = BlockCache::Open(dir, {bound});
    if (!c) return false;
    bool ok = true;
    auto half = [&](uint32_t from) {
      for (uint32_t b = from; b < from + 100; ++b) {
        if (!(*c)->Insert(Key(b, file), Payload(b, file)).ok()) ok = false;
        if (!(*c)->Insert(Key(b % 50, 9), Payload(b % 50, 9)).ok()) ok = false;
        std::vector<uint8_t> got(kLen);
        // A hit must be the right bytes; a miss is fine (evicted by the other process).
        if ((*c)->Lookup(Key(b % 50, 9), got) && got != Payload(b % 50, 9)) ok = false;
        if ((*c)->Lookup(Key(b, file), got) && got != Payload(b, file)) ok = false;
      }
    };
    std::thread t(half, 0);
    half(100);
    t.join();
    return ok;
  };
  std::vector<pid_t> children;
  for (uint8_t file : {1, 2}) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) ::_exit(work(file) ? 0 : 1);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  auto c = BlockCache::Open(dir, {bound});
  REQUIRE(c.has_value());
  const uint64_t listed = ListedBytes(dir);
  CHECK(*(*c)->SizeBytes() == listed);
  CHECK(listed <= bound);
  CHECK(listed >= bound / 2);
  CHECK(ListDirectory(dir + "/tmp").empty());
  // Whatever is left is whole and right.
  uint64_t entries = 0;
  for (uint8_t file : {1, 2, 9}) {
    for (uint32_t b = 0; b < 200; ++b) {
      std::vector<uint8_t> got(kLen);
      if ((*c)->Lookup(Key(b, file), got)) {
        ++entries;
        CHECK(got == Payload(b, file));
      }
    }
  }
  CHECK(entries * kEntry == listed);
}

TEST_CASE("HALITE_BLOCK_CACHE and HALITE_BLOCK_CACHE_SIZE open a cache", "[objstore][cache]") {
  TempDir tmp;
  ::unsetenv("HALITE_BLOCK_CACHE");
  auto none = BlockCache::FromEnvironment();
  REQUIRE(none.has_value());
  CHECK(*none == nullptr);
  ::setenv("HALITE_BLOCK_CACHE", tmp.File("env-cache").c_str(), 1);
  ::setenv("HALITE_BLOCK_CACHE_SIZE", "3M", 1);
  auto c = BlockCache::FromEnvironment();
  REQUIRE(c.has_value());
  REQUIRE(*c != nullptr);
  CHECK((*c)->max_bytes() == (uint64_t(3) << 20));
  CHECK((*c)->dir() == tmp.File("env-cache"));
  ::setenv("HALITE_BLOCK_CACHE_SIZE", "lots", 1);
  auto bad = BlockCache::FromEnvironment();
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.error().message(), Catch::Contains("HALITE_BLOCK_CACHE_SIZE"));
  ::unsetenv("HALITE_BLOCK_CACHE");
  ::unsetenv("HALITE_BLOCK_CACHE_SIZE");
}
