// CheckpointReader with a host block cache (ReaderOptions::block_cache): a second reader of the same checkpoint,
// and a child reading blocks that live in its parent, fetch nothing from storage; a damaged entry is dropped and
// the block read from storage, never served; local files leave the cache alone; VerifyAll reads storage.
// Storage here is a local file that says it is remote and counts what is read from it.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "halite/block_cache.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::testing;

namespace {

// A local file that says it is an object store, counting the block-sized reads (anything but the open's).
class RemoteLookingFile : public RandomAccessFile {
 public:
  RemoteLookingFile(std::unique_ptr<RandomAccessFile> base, std::atomic<uint64_t>* reads)
      : base_(std::move(base)), reads_(reads) {}
  const std::string& name() const override { return base_->name(); }
  uint64_t size() const override { return base_->size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    reads_->fetch_add(1);
    return base_->ReadAt(offset, buffer);
  }
  ReadHints hints() const override { return ReadHints{1 << 20, true}; }
  ReadCounters counters() const override { return base_->counters(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::atomic<uint64_t>* reads_;
};

constexpr uint64_t kPages = 512;

std::vector<uint8_t> Content(uint32_t seed) { return SyntheticBytes(kPages * 4096, seed); }

void Write(const std::string& path, const std::vector<uint8_t>& content,
           std::shared_ptr<const CheckpointReader> parent = nullptr, std::optional<EncryptionKey> key = std::nullopt) {
  WriterOptions o;
  o.encryption_key = key;
  o.threads = 2;
  o.block_pages = 16;
  o.sink.sync = false;
  o.parent = std::move(parent);
  auto w = CheckpointWriter::Create(path, o);
  REQUIRE(w.has_value());
  REQUIRE((*w)->AddRegion("ram", 0, content.size()).has_value());
  for (uint64_t p = 0; p < kPages; ++p) {
    REQUIRE((*w)->PutPage(0, p, std::span<const uint8_t>(content.data() + p * 4096, 4096)).ok());
  }
  REQUIRE((*w)->Finish().has_value());
}

struct Remote {
  std::atomic<uint64_t> reads{0};
  std::unique_ptr<CheckpointReader> reader;
  uint64_t reads_at_open = 0;
  uint64_t block_reads() const { return reads.load() - reads_at_open; }
};

// Opens `path` (and its parents) as remote-looking files sharing one read counter, with `cache`.
void OpenRemote(Remote* r, const std::string& path, std::shared_ptr<BlockCache> cache,
                std::shared_ptr<Keyring> keyring = nullptr) {
  ReaderOptions o;
  o.block_cache = std::move(cache);
  o.keyring = std::move(keyring);
  o.open_parent = [r](const std::string& p) -> Result<std::unique_ptr<RandomAccessFile>> {
    HLT_ASSIGN_OR_RETURN(auto f, OpenLocalFile(p));
    return std::unique_ptr<RandomAccessFile>(new RemoteLookingFile(std::move(f), &r->reads));
  };
  auto f = OpenLocalFile(path);
  REQUIRE(f.has_value());
  auto opened = CheckpointReader::Open(std::make_unique<RemoteLookingFile>(std::move(*f), &r->reads), o);
  INFO((opened ? std::string() : opened.error().ToString()));
  REQUIRE(opened.has_value());
  r->reader = std::move(*opened);
  r->reads_at_open = r->reads.load();
}

// Every page of the view through ReadBlock, compared with `content`.
void CheckAllBlocks(const CheckpointReader& r, const std::vector<uint8_t>& content) {
  for (uint32_t b = 0; b < r.blocks().size(); ++b) {
    std::vector<uint8_t> raw(r.blocks()[b].raw_length());
    REQUIRE(r.ReadBlock(b, raw).ok());
    for (const BlockMember& m : r.BlockMembers(b)) {
      CHECK(std::memcmp(raw.data() + m.slot * 4096, content.data() + m.page * 4096, 4096) == 0);
    }
  }
}

std::string OnlyEntry(const std::string& dir, uint32_t block) {
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "-%08x-", block);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string().find(suffix) != std::string::npos) return e.path();
  }
  return {};
}

}  // namespace

TEST_CASE("a second reader of a remote checkpoint gets every block from the cache and none from storage",
          "[objstore][cache]") {
  TempDir tmp;
  const auto content = Content(41);
  Write(tmp.File("c.hlt"), content);
  auto cache = BlockCache::Open(tmp.File("cache"), {uint64_t(64) << 20});
  REQUIRE(cache.has_value());

  Remote first;
  OpenRemote(&first, tmp.File("c.hlt"), *cache);
  const uint64_t blocks = first.reader->blocks().size();
  CheckAllBlocks(*first.reader, content);
  CHECK(first.block_reads() == blocks);
  ReaderStats st = first.reader->read_stats();
  CHECK(st.blocks_fetched == blocks);
  CHECK(st.cache_misses == blocks);
  CHECK(st.cache_inserts == blocks);
  CHECK(st.cache_hits == 0);

  // ReadBlock, ReadBlocks and FetchBlocks/DecodeBlock all go through the cache.
  Remote second;
  OpenRemote(&second, tmp.File("c.hlt"), *cache);
  CheckAllBlocks(*second.reader, content);
  std::vector<uint32_t> all(blocks);
  for (uint32_t b = 0; b < blocks; ++b) all[b] = b;
  std::vector<std::vector<uint8_t>> raws(blocks);
  std::vector<std::span<uint8_t>> outs;
  for (uint32_t b = 0; b < blocks; ++b) {
    raws[b].resize(second.reader->blocks()[b].raw_length());
    outs.push_back(raws[b]);
  }
  std::vector<Status> statuses(blocks);
  REQUIRE(second.reader->ReadBlocks(all, outs, statuses).ok());
  std::vector<FetchedBlock> fetched;
  REQUIRE(second.reader->FetchBlocks(all, &fetched).ok());
  for (auto& f : fetched) {
    CHECK(f.from_cache);
    std::vector<uint8_t> raw(second.reader->blocks()[f.block].raw_length());
    REQUIRE(second.reader->DecodeBlock(f, raw, nullptr).ok());
    CHECK(raw == raws[f.block]);
  }
  CHECK(second.block_reads() == 0);
  st = second.reader->read_stats();
  CHECK(st.blocks_fetched == 0);
  CHECK(st.cache_hits == 3 * blocks);
  CHECK(st.cache_inserts == 0);
  CHECK(st.storage_requests == 0);  // the local backend counts its preads: none since open

  // VerifyAll checks storage, not the cache.
  REQUIRE(second.reader->VerifyAll().ok());
  CHECK(second.block_reads() == blocks);
}

TEST_CASE("a damaged cache entry is dropped and its block read from storage: never served", "[objstore][cache]") {
  TempDir tmp;
  const auto content = Content(42);
  Write(tmp.File("c.hlt"), content);
  auto cache = BlockCache::Open(tmp.File("cache"), {uint64_t(64) << 20});
  REQUIRE(cache.has_value());
  {
    Remote fill;
    OpenRemote(&fill, tmp.File("c.hlt"), *cache);
    CheckAllBlocks(*fill.reader, content);
  }
  for (bool two_step : {false, true}) {
    INFO("FetchBlocks/DecodeBlock: " << two_step);
    const uint32_t victim = two_step ? 5 : 3;
    const std::string entry = OnlyEntry((*cache)->dir(), victim);
    REQUIRE_FALSE(entry.empty());
    {
      std::vector<uint8_t> bytes = ReadWholeFile(entry);
      REQUIRE(bytes.size() > 64 + 100);
      bytes[64 + 100] ^= 0x20;  // one bit of the payload; the header still names the block
      std::ofstream(entry, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                                      std::streamsize(bytes.size()));
    }
    Remote r;
    OpenRemote(&r, tmp.File("c.hlt"), *cache);
    std::vector<uint8_t> raw(r.reader->blocks()[victim].raw_length());
    if (two_step) {
      std::vector<FetchedBlock> fetched;
      const uint32_t one[] = {victim};
      REQUIRE(r.reader->FetchBlocks(one, &fetched).ok());
      REQUIRE(fetched[0].from_cache);
      bool reread = false;
      REQUIRE(r.reader->DecodeBlock(fetched[0], raw, &reread).ok());
      CHECK_FALSE(reread);  // the cache's damage is not storage's
    } else {
      bool reread = false;
      REQUIRE(r.reader->ReadBlock(victim, raw, &reread).ok());
      CHECK_FALSE(reread);
    }
    for (const BlockMember& m : r.reader->BlockMembers(victim)) {
      CHECK(std::memcmp(raw.data() + m.slot * 4096, content.data() + m.page * 4096, 4096) == 0);
    }
    CHECK(r.block_reads() == 1);
    const ReaderStats st = r.reader->read_stats();
    CHECK(st.cache_dropped == 1);
    CHECK(st.cache_hits == 0);
    CHECK(st.blocks_fetched == 1);
    CHECK(st.cache_inserts == 1);  // the good payload replaces the damaged one
    CHECK(r.reader->blocks_reread() == 0);
    Remote after;
    OpenRemote(&after, tmp.File("c.hlt"), *cache);
    CheckAllBlocks(*after.reader, content);
    CHECK(after.block_reads() == 0);
  }
  CHECK((*cache)->stats().dropped == 2);
}

TEST_CASE("a child checkpoint reads the blocks it shares with its parent from the parent's cache entries",
          "[objstore][cache][chain]") {
  TempDir tmp;
  const auto base = Content(43);
  Write(tmp.File("parent.hlt"), base);
  auto child_content = base;
  for (uint64_t p = 0; p < 64; ++p) std::memset(child_content.data() + p * 4096, int(p + 1), 4096);  // 4 blocks
  {
    auto parent = CheckpointReader::Open(tmp.File("parent.hlt"));
    REQUIRE(parent.has_value());
    Write(tmp.File("child.hlt"), child_content, std::shared_ptr<const CheckpointReader>(std::move(*parent)));
  }
  auto cache = BlockCache::Open(tmp.File("cache"), {uint64_t(64) << 20});
  REQUIRE(cache.has_value());
  Remote parent;
  OpenRemote(&parent, tmp.File("parent.hlt"), *cache);
  CheckAllBlocks(*parent.reader, base);  // a restore of the parent fills the cache

  Remote child;
  OpenRemote(&child, tmp.File("child.hlt"), *cache);
  REQUIRE(child.reader->chain().size() == 2);
  const auto& view = child.reader->blocks();
  uint64_t own = 0, in_parent = 0;
  for (const auto& b : view) (b.chain_level == 0 ? own : in_parent) += 1;
  REQUIRE(own > 0);
  REQUIRE(in_parent > 0);
  CheckAllBlocks(*child.reader, child_content);
  // Only the child's own blocks came from storage.
  CHECK(child.block_reads() == own);
  const ReaderStats st = child.reader->read_stats();
  CHECK(st.cache_hits == in_parent);
  CHECK(st.blocks_fetched == own);
}

TEST_CASE("a local checkpoint never uses the block cache", "[objstore][cache]") {
  TempDir tmp;
  const auto content = Content(44);
  Write(tmp.File("c.hlt"), content);
  auto cache = BlockCache::Open(tmp.File("cache"), {uint64_t(64) << 20});
  REQUIRE(cache.has_value());
  ReaderOptions o;
  o.block_cache = *cache;
  auto r = CheckpointReader::Open(tmp.File("c.hlt"), o);
  REQUIRE(r.has_value());
  CheckAllBlocks(**r, content);
  const ReaderStats st = (*r)->read_stats();
  CHECK(st.cache_inserts == 0);
  CHECK(st.cache_misses == 0);
  CHECK(st.blocks_fetched == (*r)->blocks().size());
  CHECK(st.storage_requests == (*r)->blocks().size());  // one pread a block
  CHECK(*(*cache)->SizeBytes() == 0);
  CHECK((*r)->read_hints().batch_bytes == 0);
  CHECK_FALSE((*r)->read_hints().remote);
}

TEST_CASE("the cache of an encrypted checkpoint holds its ciphertext, never a plaintext page", "[objstore][cache]") {
  TempDir tmp;
  auto content = Content(47);
  const std::string marker = "CACHED-TENANT-SECRET";
  for (uint64_t p = 0; p < kPages; ++p) std::memcpy(content.data() + p * 4096 + 2000, marker.data(), marker.size());
  EncryptionKey key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = uint8_t(7 * i + 1);
  Write(tmp.File("c.hlt"), content, nullptr, key);
  auto cache = BlockCache::Open(tmp.File("cache"), {uint64_t(64) << 20});
  REQUIRE(cache.has_value());
  auto ring = std::make_shared<Keyring>();
  REQUIRE(ring->Add(key).ok());
  Remote first, second;
  OpenRemote(&first, tmp.File("c.hlt"), *cache, ring);
  CheckAllBlocks(*first.reader, content);
  CHECK(first.reader->read_stats().cache_inserts == first.reader->blocks().size());
  // Every entry is the stored payload: sealed. The marker (in every page) is in none of them.
  uint64_t entries = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.File("cache"))) {
    if (!e.is_regular_file()) continue;
    ++entries;
    const std::vector<uint8_t> bytes = ReadWholeFile(e.path().string());
    CHECK(std::search(bytes.begin(), bytes.end(), marker.begin(), marker.end()) == bytes.end());
  }
  CHECK(entries >= first.reader->blocks().size());
  // And the next reader decrypts them from there, with the key, in memory.
  OpenRemote(&second, tmp.File("c.hlt"), *cache, ring);
  CheckAllBlocks(*second.reader, content);
  CHECK(second.block_reads() == 0);
  CHECK(second.reader->read_stats().cache_hits == second.reader->blocks().size());
  // The engine's path (FetchBlocks, then DecodeBlock, which decrypts a payload in place unless the cache gets it
  // next): into another cache, ciphertext only again, then served from there.
  auto cache2 = BlockCache::Open(tmp.File("cache2"), {uint64_t(64) << 20});
  REQUIRE(cache2.has_value());
  for (int pass = 0; pass < 2; ++pass) {
    INFO("pass " << pass);
    Remote r;
    OpenRemote(&r, tmp.File("c.hlt"), *cache2, ring);
    std::vector<uint32_t> all(r.reader->blocks().size());
    for (uint32_t b = 0; b < all.size(); ++b) all[b] = b;
    std::vector<FetchedBlock> fetched;
    REQUIRE(r.reader->FetchBlocks(all, &fetched).ok());
    for (uint32_t b = 0; b < all.size(); ++b) {
      CHECK(fetched[b].from_cache == (pass == 1));
      std::vector<uint8_t> raw(r.reader->blocks()[b].raw_length());
      REQUIRE(r.reader->DecodeBlock(fetched[b], raw, nullptr).ok());
      for (const BlockMember& m : r.reader->BlockMembers(b)) {
        CHECK(std::memcmp(raw.data() + m.slot * 4096, content.data() + m.page * 4096, 4096) == 0);
      }
    }
    CHECK(r.reader->read_stats().cache_inserts == (pass == 0 ? all.size() : 0));
    for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.File("cache2"))) {
      if (!e.is_regular_file()) continue;
      const std::vector<uint8_t> bytes = ReadWholeFile(e.path().string());
      CHECK(std::search(bytes.begin(), bytes.end(), marker.begin(), marker.end()) == bytes.end());
    }
  }
}
