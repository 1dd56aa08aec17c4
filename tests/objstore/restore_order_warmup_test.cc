// RestoreOrderWarmup: the head of the restore order read ahead of a restore. Through a block cache, a remote
// checkpoint's warmed blocks are served from the cache afterwards (no storage read), the blocks past the budget
// are not; a local file reads its blocks and leaves the cache alone; Stop() ends it early. Storage here is a local
// file that says it is remote and counts what is read from it (as in cached_reader_test.cc).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "halite/block_cache.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/restore_order_warmup.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::testing;

namespace {

class CountingRemoteFile : public RandomAccessFile {
 public:
  CountingRemoteFile(std::unique_ptr<RandomAccessFile> base, std::atomic<uint64_t>* reads, bool remote,
                     int read_delay_ms)
      : base_(std::move(base)), reads_(reads), remote_(remote), read_delay_ms_(read_delay_ms) {}
  const std::string& name() const override { return base_->name(); }
  uint64_t size() const override { return base_->size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    reads_->fetch_add(1);
    if (read_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(read_delay_ms_));
    return base_->ReadAt(offset, buffer);
  }
  ReadHints hints() const override { return ReadHints{1 << 20, remote_}; }
  ReadCounters counters() const override { return base_->counters(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::atomic<uint64_t>* reads_;
  bool remote_;
  int read_delay_ms_;
};

constexpr uint64_t kPages = 1024;

void Write(const std::string& path, const std::vector<uint8_t>& content) {
  WriterOptions o;
  o.threads = 2;
  o.block_pages = 16;
  o.sink.sync = false;
  auto w = CheckpointWriter::Create(path, o);
  REQUIRE(w.has_value());
  REQUIRE((*w)->AddRegion("ram", 0, content.size()).has_value());
  for (uint64_t p = 0; p < kPages; ++p) {
    REQUIRE((*w)->PutPage(0, p, std::span<const uint8_t>(content.data() + p * 4096, 4096)).ok());
  }
  REQUIRE((*w)->Finish().has_value());
}

std::unique_ptr<CheckpointReader> Open(const std::string& path, std::atomic<uint64_t>* reads, bool remote,
                                       std::shared_ptr<BlockCache> cache, int read_delay_ms = 0) {
  ReaderOptions o;
  o.block_cache = std::move(cache);
  auto f = OpenLocalFile(path);
  REQUIRE(f.has_value());
  auto opened = CheckpointReader::Open(std::make_unique<CountingRemoteFile>(std::move(*f), reads, remote, read_delay_ms), o);
  INFO((opened ? std::string() : opened.error().ToString()));
  REQUIRE(opened.has_value());
  return std::move(*opened);
}

// Stored bytes of the first n blocks of the restore order.
uint64_t HeadBytes(const CheckpointReader& r, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += r.blocks()[r.restore_order()[i]].stored_length;
  return sum;
}

}  // namespace

TEST_CASE("a warmed remote checkpoint serves the head of its restore order from the block cache, and only that",
          "[objstore][cache][warmup]") {
  TempDir tmp;
  const auto content = SyntheticBytes(kPages * 4096, 7);
  Write(tmp.File("c.hlt"), content);
  auto cache = BlockCache::Open(tmp.File("cache"), {uint64_t(64) << 20});
  REQUIRE(cache.has_value());

  std::atomic<uint64_t> reads{0};
  auto warmed = Open(tmp.File("c.hlt"), &reads, true, *cache);
  const size_t total = warmed->restore_order().size();
  REQUIRE(total >= 8);
  REQUIRE(WarmupUseful(*warmed, true));
  CHECK_FALSE(WarmupUseful(*warmed, false));  // remote without a cache: every block would be fetched twice
  const size_t head = total / 2;
  RestoreOrderWarmup warmup;
  // A budget that ends inside block `head`: the warmup reads that block too, and stops there.
  warmup.Start(*warmed, HeadBytes(*warmed, head) + 1, /*decode=*/true, /*batch_bytes=*/3 * 4096);
  const WarmupStats st = warmup.Wait();
  REQUIRE(st.status.ok());
  CHECK_FALSE(st.stopped_early);
  CHECK(st.blocks == head + 1);
  CHECK(st.stored_bytes == HeadBytes(*warmed, head + 1));
  CHECK(warmed->read_stats().cache_inserts == head + 1);

  // Another reader of the same checkpoint and cache: the warmed blocks come from the cache, the rest from storage.
  std::atomic<uint64_t> reads2{0};
  auto second = Open(tmp.File("c.hlt"), &reads2, true, *cache);
  const uint64_t at_open = reads2.load();
  for (size_t i = 0; i < total; ++i) {
    const uint32_t b = second->restore_order()[i];
    std::vector<uint8_t> raw(second->blocks()[b].raw_length());
    REQUIRE(second->ReadBlock(b, raw).ok());
    for (const BlockMember& m : second->BlockMembers(b)) {
      CHECK(std::memcmp(raw.data() + m.slot * 4096, content.data() + m.page * 4096, 4096) == 0);
    }
  }
  const ReaderStats rs = second->read_stats();
  CHECK(rs.cache_hits == head + 1);
  CHECK(rs.cache_misses == total - head - 1);
  CHECK(reads2.load() - at_open == total - head - 1);
}

TEST_CASE("warming a local checkpoint reads the head of its restore order and puts nothing in the block cache",
          "[objstore][cache][warmup]") {
  TempDir tmp;
  Write(tmp.File("c.hlt"), SyntheticBytes(kPages * 4096, 8));
  auto cache = BlockCache::Open(tmp.File("cache"), {uint64_t(64) << 20});
  REQUIRE(cache.has_value());
  std::atomic<uint64_t> reads{0};
  auto r = Open(tmp.File("c.hlt"), &reads, false, *cache);
  REQUIRE(WarmupUseful(*r, true));
  REQUIRE(WarmupUseful(*r, false));
  const uint64_t at_open = reads.load();
  const size_t total = r->restore_order().size();
  RestoreOrderWarmup warmup;
  warmup.Start(*r, HeadBytes(*r, total) * 2, /*decode=*/false);  // a budget past the end: every block once
  const WarmupStats st = warmup.Wait();
  REQUIRE(st.status.ok());
  CHECK_FALSE(st.stopped_early);
  CHECK(st.blocks == total);
  CHECK(st.stored_bytes == HeadBytes(*r, total));
  CHECK(reads.load() > at_open);  // the blocks were read from the file
  CHECK(r->read_stats().cache_inserts == 0);
  CHECK(r->read_stats().cache_hits == 0);
}

TEST_CASE("Stop() ends a warmup after its current batch", "[objstore][warmup]") {
  TempDir tmp;
  Write(tmp.File("c.hlt"), SyntheticBytes(kPages * 4096, 10));
  std::atomic<uint64_t> reads{0};
  auto r = Open(tmp.File("c.hlt"), &reads, false, nullptr, /*read_delay_ms=*/20);
  const size_t total = r->restore_order().size();
  RestoreOrderWarmup warmup;
  // One block a batch, 20 ms a read: the whole order would take over a second.
  warmup.Start(*r, HeadBytes(*r, total), false, /*batch_bytes=*/1);
  const WarmupStats st = warmup.Stop();
  CHECK(st.stopped_early);
  CHECK(st.blocks <= 1);
  CHECK(warmup.Stop().blocks == st.blocks);  // idempotent
}

TEST_CASE("a warmup with no budget reads nothing, and Stop() without Start() is harmless", "[objstore][warmup]") {
  TempDir tmp;
  Write(tmp.File("c.hlt"), SyntheticBytes(kPages * 4096, 9));
  std::atomic<uint64_t> reads{0};
  auto r = Open(tmp.File("c.hlt"), &reads, false, nullptr);
  const uint64_t at_open = reads.load();
  RestoreOrderWarmup idle;
  CHECK(idle.Stop().blocks == 0);
  RestoreOrderWarmup none;
  none.Start(*r, 0, false);
  const WarmupStats st = none.Stop();
  CHECK(st.blocks == 0);
  CHECK(reads.load() == at_open);
}
