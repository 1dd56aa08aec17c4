// The image server mounted for real (FUSE): QEMU-like private mappings share the page cache, one block decode
// serves every clone, writes and hole punching are refused, corrupt blocks never reach memory.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "halite/image_server/fuse_image_server.h"
#include "image_test_support.h"
#include "support/wait_for.h"

using namespace halite;
using namespace halite::image_server;
using namespace halite::image_server::testing;

namespace {

struct Mounted {
  halite::testing::TempDir dir;
  std::string mountpoint;
  std::unique_ptr<FuseImageServer> server;
  std::string File(const std::string& name) const { return mountpoint + "/" + name; }
};

std::unique_ptr<Mounted> Mount(const TestCheckpoint& t, uint64_t prefetch = 0, bool pin = true) {
  auto m = std::make_unique<Mounted>();
  m->mountpoint = m->dir.File("mnt");
  REQUIRE(::mkdir(m->mountpoint.c_str(), 0755) == 0);
  std::vector<ServedImage> images;
  images.push_back({"desk.ram", std::shared_ptr<CheckpointImage>(CheckpointImage::Open(t.reader, "ram").value())});
  images.push_back({"desk.rom", std::shared_ptr<CheckpointImage>(CheckpointImage::Open(t.reader, "rom").value())});
  ImageServerOptions o;
  o.mountpoint = m->mountpoint;
  o.prefetch_bytes_per_s = prefetch;
  o.pin_page_cache = pin;
  auto s = FuseImageServer::Start(std::move(images), o);
  if (!s) {
    std::printf("SKIP: cannot mount a FUSE file system here (%s): the image server's mount tests need /dev/fuse "
                "and the right to mount (root, or fuse3's fusermount3)\n",
                s.error().ToString().c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  m->server = std::move(*s);
  return m;
}

ServedImageStats RamStats(const FuseImageServer& s) { return s.Stats()[0]; }

// Waits until the server's page-cache stores have caught up (nothing decoded is still queued).
void SettleStores(const FuseImageServer& s) {
  halite::testing::WaitFor([&] { return RamStats(s).blocks_to_store == 0; }, std::chrono::seconds(5));
  INFO(s.StatsJson());
  REQUIRE(RamStats(s).blocks_to_store == 0);
}

}  // namespace

TEST_CASE("the mount lists the images and .stats, the files read as the regions", "[fuse]") {
  auto t = MakeCheckpoint(4 << 20, 23);
  auto m = Mount(*t);
  auto names = halite::testing::ListDirectory(m->mountpoint);
  CHECK(names == std::vector<std::string>{".stats", "desk.ram", "desk.rom"});
  struct stat st;
  REQUIRE(::stat(m->File("desk.ram").c_str(), &st) == 0);
  CHECK(uint64_t(st.st_size) == t->ram.size());
  std::ifstream f(m->File("desk.ram"), std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(all == t->ram);
  std::ifstream js(m->File(".stats"));
  std::stringstream text;
  text << js.rdbuf();
  auto j = nlohmann::json::parse(text.str());
  CHECK(j["files"][0]["name"] == "desk.ram");
  INFO(text.str());
  CHECK(j["files"][0]["bytes_read"].get<uint64_t>() + j["files"][0]["pages_stored"].get<uint64_t>() * 4096 >=
        t->ram.size());
}

TEST_CASE("two private mappings (two clones): the second decodes no block the first brought in, writes stay "
          "private", "[fuse]") {
  auto t = MakeCheckpoint(8 << 20, 29);
  auto m = Mount(*t);
  const size_t size = t->ram.size();
  int fa = ::open(m->File("desk.ram").c_str(), O_RDWR);  // as QEMU opens a memory-backend-file
  REQUIRE(fa >= 0);
  auto* a = static_cast<uint8_t*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fa, 0));
  REQUIRE(a != MAP_FAILED);
  // Clone A touches one page of a block: the server stores the block's other pages in the page cache.
  uint32_t block = 0;
  const uint64_t page = StoredRamPage(*t, &block, 4);
  REQUIRE(std::memcmp(a + page * 4096, t->ram.data() + page * 4096, 4096) == 0);
  SettleStores(*m->server);
  auto after_one = RamStats(*m->server);
  CHECK(after_one.image.blocks_decoded >= 1);
  CHECK(after_one.pages_stored >= 1);
  // The block's other pages are minor faults now: reading them asks the server nothing.
  for (const auto& mem : t->reader->BlockMembers(block)) {
    if (mem.page >= size / 4096) continue;
    REQUIRE(std::memcmp(a + mem.page * 4096, t->ram.data() + mem.page * 4096, 4096) == 0);
  }
  CHECK(RamStats(*m->server).image.reads == after_one.image.reads);
  // Clone A reads everything and writes a page of its own.
  REQUIRE(std::memcmp(a, t->ram.data(), size) == 0);
  a[page * 4096] ^= 0xff;
  SettleStores(*m->server);
  auto after_a = RamStats(*m->server);
  // Clone B maps the same file: every page from the page cache, no block decoded again.
  int fb = ::open(m->File("desk.ram").c_str(), O_RDWR);
  REQUIRE(fb >= 0);
  auto* b = static_cast<uint8_t*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fb, 0));
  REQUIRE(b != MAP_FAILED);
  CHECK(std::memcmp(b, t->ram.data(), size) == 0);  // A's write is A's alone
  auto after_b = RamStats(*m->server);
  CHECK(after_b.image.blocks_decoded == after_a.image.blocks_decoded);
  CHECK(after_b.image.distinct_blocks == after_a.image.distinct_blocks);
  CHECK(after_b.open_handles == 2);
  // The server will not stop under its clones.
  auto refused = m->server->Stop();
  CHECK(refused.code() == StatusCode::kAborted);
  ::munmap(a, size);
  ::munmap(b, size);
  ::close(fa);
  ::close(fb);
  halite::testing::WaitFor([&] { return m->server->open_handles() == 0; }, std::chrono::seconds(1));
  CHECK(m->server->Stop().ok());
}

// A lazy unmount ends the kernel's connection only once nobody holds the mount any more, and the session's
// threads sleep in read() of /dev/fuse until then: a stop that waited for that hung for as long as anything held a
// file or a directory of the mount (a clone at a forced stop, a process's working directory). The stop must end on
// its own; what still holds the mount then gets an error instead of a wait for a server that is gone.
TEST_CASE("a stop ends while something still holds the mount; what holds it then gets ENOTCONN", "[fuse]") {
  auto t = MakeCheckpoint(1 << 20, 31);
  auto check = [&](bool forced) {
    // Neither prefetcher nor pins: the server's own closes at its stop send no request that would wake a thread
    // of the session by chance.
    auto m = Mount(*t, /*prefetch=*/0, /*pin=*/false);
    // Forced: a clone's open file (an open handle: only a forced stop goes past it). Otherwise a directory held
    // by path only (O_PATH), which the server does not count as open.
    const int held = forced ? ::open(m->File("desk.ram").c_str(), O_RDONLY)
                            : ::open(m->mountpoint.c_str(), O_PATH | O_DIRECTORY);
    REQUIRE(held >= 0);
    CHECK(m->server->open_handles() == (forced ? 1u : 0u));
    auto stopped = std::async(std::launch::async, [&] { return m->server->Stop(/*force=*/forced); });
    const bool in_time = stopped.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
    if (!in_time) ::close(held);  // the last reference: the kernel ends the connection, so the stop returns
    REQUIRE(in_time);
    CHECK(stopped.get().ok());
    // The held file's reads go to a connection that is over: an error at once.
    struct statx stx;
    errno = 0;
    CHECK(::statx(held, forced ? "" : "desk.ram", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC, STATX_SIZE, &stx) != 0);
    CHECK(errno == ENOTCONN);
    if (forced) {
      char c;
      errno = 0;
      CHECK(::pread(held, &c, 1, 0) < 0);
      CHECK(errno == ENOTCONN);
    }
    ::close(held);
  };
  SECTION("a clone's open file at a forced stop") { check(true); }
  SECTION("a directory held by path") { check(false); }
}

TEST_CASE("writes, truncation and hole punching are refused", "[fuse]") {
  auto t = MakeCheckpoint(1 << 20, 31);
  auto m = Mount(*t);
  int fd = ::open(m->File("desk.ram").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t byte = 1;
  CHECK(::pwrite(fd, &byte, 1, 0) < 0);
  CHECK(errno == EROFS);
  CHECK(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) < 0);
  CHECK(errno == EOPNOTSUPP);
  CHECK(::ftruncate(fd, 4096) < 0);
  ::close(fd);
  CHECK(::open(m->File("desk.ram").c_str(), O_RDWR | O_TRUNC) < 0);
  std::ifstream f(m->File("desk.ram"), std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(all == t->ram);
  CHECK(RamStats(*m->server).refused_writes >= 3);
}

TEST_CASE("a corrupt block fails the read with EIO and never reaches the page cache", "[fuse]") {
  auto t = MakeCheckpoint(4 << 20, 37);
  uint32_t block = 0;
  const uint64_t page = StoredRamPage(*t, &block);
  DamageBlock(*t, block);
  auto m = Mount(*t);
  int fd = ::open(m->File("desk.ram").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  std::vector<uint8_t> buf(4096);
  for (int i = 0; i < 2; ++i) {
    errno = 0;
    CHECK(::pread(fd, buf.data(), 4096, static_cast<off_t>(page * 4096)) < 0);
    CHECK(errno == EIO);
  }
  // Other blocks are served.
  for (uint64_t p = 0; p < t->ram.size() / 4096; ++p) {
    const PageLocation loc = t->reader->Locate(p);
    if (loc.kind == PageKind::kStored && loc.block == block) continue;
    REQUIRE(::pread(fd, buf.data(), 4096, static_cast<off_t>(p * 4096)) == 4096);
    REQUIRE(std::memcmp(buf.data(), t->ram.data() + p * 4096, 4096) == 0);
  }
  ::close(fd);
  CHECK(RamStats(*m->server).image.read_errors >= 2);
}

TEST_CASE("the prefetcher brings every block in, in restore order, without a read", "[fuse]") {
  auto t = MakeCheckpoint(4 << 20, 41);
  auto m = Mount(*t, 64ull << 20);
  const size_t blocks = CheckpointImage::Open(t->reader, "ram").value()->RestoreOrder().size();
  halite::testing::WaitFor([&] { return RamStats(*m->server).blocks_prefetched >= blocks; }, std::chrono::seconds(5));
  SettleStores(*m->server);
  auto s = RamStats(*m->server);
  CHECK(s.blocks_prefetched == blocks);
  CHECK(s.image.reads == 0);
  CHECK(s.pages_stored > 0);
  // Reading the whole file now is answered by the page cache (a few reads at most, for pages whose store the
  // kernel dropped).
  std::ifstream f(m->File("desk.ram"), std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(all == t->ram);
  CHECK(RamStats(*m->server).image.blocks_decoded == blocks);
}

TEST_CASE("stored pages stay in memory when the kernel drops the file's cache, unpinned ones are decoded again",
          "[fuse]") {
  auto t = MakeCheckpoint(4 << 20, 43);
  uint32_t block = 0;
  const uint64_t page = StoredRamPage(*t, &block, 4);
  for (bool pin : {true, false}) {
    INFO("pin_page_cache " << pin);
    auto m = Mount(*t, 0, pin);
    int fd = ::open(m->File("desk.ram").c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    std::vector<uint8_t> buf(4096);
    REQUIRE(::pread(fd, buf.data(), 4096, static_cast<off_t>(page * 4096)) == 4096);
    SettleStores(*m->server);
    const auto before = RamStats(*m->server);
    CHECK(before.pin_errors == 0);
    CHECK((before.pages_pinned > 0) == pin);
    // Pinning reads nothing more than the stores brought in (no readahead through the server's own mapping).
    CHECK(before.image.reads == 1);
    // What proactive reclaim does to pages no process maps: drop them from the page cache.
    REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    for (const auto& mem : t->reader->BlockMembers(block)) {
      if (mem.page >= t->ram.size() / 4096) continue;
      REQUIRE(::pread(fd, buf.data(), 4096, static_cast<off_t>(mem.page * 4096)) == 4096);
      REQUIRE(std::memcmp(buf.data(), t->ram.data() + mem.page * 4096, 4096) == 0);
    }
    const auto after = RamStats(*m->server);
    if (pin) {
      CHECK(after.image.blocks_decoded == before.image.blocks_decoded);
      CHECK(after.image.reads == before.image.reads);
    } else {
      // Proof that the step above drops what is not pinned: the kernel asks the server again (which may still
      // hold the block decoded in memory, so this counts reads, not decodes).
      CHECK(after.image.reads > before.image.reads);
    }
    ::close(fd);
    halite::testing::WaitFor([&] { return m->server->open_handles() == 0; }, std::chrono::seconds(1));
    CHECK(m->server->Stop().ok());
  }
}
