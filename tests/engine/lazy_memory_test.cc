// LazyMemory + RestoreEngine on real userfaultfd memory. Its own main: when userfaultfd is unavailable it says
// so loudly and exits 77, which ctest reports as skipped (never as passed).
#define CATCH_CONFIG_RUNNER
#include "halite/lazy_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "engine_test_util.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::testing;

namespace {

constexpr uint64_t kPage = 4096;

// A checkpoint on disk (the production read path: pread or io_uring), with its content.
struct DiskCheckpoint {
  TempDir dir;
  std::string path;
  std::vector<uint8_t> content;
  std::unique_ptr<CheckpointReader> reader;
};

std::unique_ptr<DiskCheckpoint> SaveToDisk(uint64_t bytes, uint64_t seed, uint32_t block_pages = 64) {
  auto d = std::make_unique<DiskCheckpoint>();
  d->path = d->dir.File("ckpt.hlt");
  d->content = SyntheticBytes(bytes, seed);
  WriterOptions wo;
  wo.block_pages = block_pages;
  wo.sink.sync = false;
  wo.threads = 2;
  wo.dictionary = DictionaryMode::kOff;
  auto w = CheckpointWriter::Create(d->path, wo);
  REQUIRE(w.has_value());
  REQUIRE((*w)->AddRegion("ram", 0, bytes).has_value());
  for (uint64_t p = 0; p < bytes / kPage; ++p) {
    REQUIRE((*w)->PutPage(0, p, std::span<const uint8_t>(d->content).subspan(p * kPage, kPage)).ok());
  }
  auto sum = (*w)->Finish();
  REQUIRE(sum.has_value());
  auto r = CheckpointReader::Open(d->path);
  REQUIRE(r.has_value());
  d->reader = std::move(*r);
  return d;
}

// Compares a page of lazy memory with the expected bytes, word by word with atomic loads: other threads may be
// doing content-keeping atomic writes on the same page at the same time.
bool SamePage(const uint8_t* page, const uint8_t* want) {
  for (size_t i = 0; i < kPage; i += 8) {
    uint64_t got = __atomic_load_n(reinterpret_cast<const uint64_t*>(page + i), __ATOMIC_RELAXED), w;
    std::memcpy(&w, want + i, 8);
    if (got != w) return false;
  }
  return true;
}

// Stops the handlers before the engine is destroyed, whatever way a test leaves.
struct Restore {
  std::unique_ptr<LazyMemory> memory;
  std::unique_ptr<RestoreEngine> engine;
  ~Restore() {
    if (memory) memory->Stop();
    engine.reset();
    memory.reset();
  }
};

std::unique_ptr<Restore> StartRestore(const CheckpointReader& reader, RestoreEngineOptions eo,
                                      LazyMemoryOptions mo = {}) {
  auto r = std::make_unique<Restore>();
  auto m = LazyMemory::Create(reader.regions(), mo);
  INFO((m ? std::string() : m.error().ToString()));
  REQUIRE(m.has_value());
  r->memory = std::move(*m);
  auto e = RestoreEngine::Create(reader, r->memory->sink(), eo);
  REQUIRE(e.has_value());
  r->engine = std::move(*e);
  REQUIRE(r->engine->Start().ok());
  REQUIRE(r->memory->Serve(*r->engine).ok());
  return r;
}

}  // namespace

TEST_CASE("8 threads touch a lazily restored 256 MiB region while the loader runs", "[uffd][concurrency]") {
  // Under ThreadSanitizer everything is several times slower; the region stays 256 MiB, the touches fewer.
#if defined(__SANITIZE_THREAD__)
  const int touches = 1000;
#else
  const int touches = 3000;
#endif
  const uint64_t bytes = 256ull << 20, pages = bytes / kPage;
  auto ckpt = SaveToDisk(bytes, 42);
  RestoreEngineOptions eo;
  // Slow enough that the guest threads fault while the loader is still streaming (about 2 s for the file).
  eo.loader_rate_bytes_per_s = ckpt->reader->file_size() / 2;
  auto r = StartRestore(*ckpt->reader, eo);
  uint8_t* mem = r->memory->base(0);
  std::atomic<uint64_t> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(uint64_t(t) + 1);
      uint64_t seq = uint64_t(t) * (pages / 8);
      for (int i = 0; i < touches; ++i) {
        // Half the threads scan sequentially through their eighth; the others jump around everywhere.
        uint64_t p = (t % 2 == 0) ? (seq++ % pages) : rng() % pages;
        uint8_t* page = mem + p * kPage;
        if (i % 4 == 0) {
          __atomic_fetch_add(reinterpret_cast<uint64_t*>(page), 0, __ATOMIC_RELAXED);  // a write fault
        }
        if (!SamePage(page, ckpt->content.data() + p * kPage)) mismatches++;
      }
    });
  }
  for (auto& t : threads) t.join();
  auto during = r->engine->Stats();
  REQUIRE(r->engine->WaitForLoader().ok());
  CHECK(mismatches == 0);
  CHECK(r->memory->status().ok());
  // Every byte, including pages nobody touched (stored ones from the loader, zero ones faulted in here).
  CHECK(std::memcmp(mem, ckpt->content.data(), bytes) == 0);
  auto st = r->engine->Stats();
  INFO("blocking " << during.faults_blocking << ", loader blocks then " << during.blocks_read_loader);
  CHECK(during.faults_blocking > 0);         // faults were served while the loader ran ...
  CHECK(during.blocks_read_loader > 0);      // ... and the loader did run meanwhile
  CHECK(st.blocks_read == st.blocks_total);  // each block read exactly once
  CHECK(st.faults_failed == 0);
  auto ms = r->memory->Stats();
  CHECK(ms.errors == 0);
  CHECK(ms.faults >= st.faults_zero + st.faults_blocking);
}

TEST_CASE("memfd-backed lazy memory is visible through a second mapping", "[uffd]") {
  auto ckpt = SaveToDisk(8 << 20, 5);
  RestoreEngineOptions eo;
  eo.background_loader = false;
  LazyMemoryOptions mo;
  mo.backing = LazyBacking::kMemfd;
  auto r = StartRestore(*ckpt->reader, eo, mo);
  int fd = r->memory->memfd(0);
  REQUIRE(fd >= 0);
  uint8_t* mem = r->memory->base(0);
  for (uint64_t p = 0; p < 2048; p += 7) {
    REQUIRE(std::memcmp(mem + p * kPage, ckpt->content.data() + p * kPage, kPage) == 0);
  }
  // The same pages through another (unregistered) mapping of the memfd: what was installed is there.
  void* other = mmap(nullptr, 8 << 20, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(other != MAP_FAILED);
  CHECK(std::memcmp(static_cast<uint8_t*>(other) + 7 * kPage, ckpt->content.data() + 7 * kPage, kPage) == 0);
  munmap(other, 8 << 20);
  CHECK(r->memory->status().ok());
}

TEST_CASE("pages populated before Attach are kept and the rest restored", "[uffd]") {
  auto ckpt = SaveToDisk(4 << 20, 6, 16);
  const uint64_t size = 4 << 20;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* mem = static_cast<uint8_t*>(p);
  std::memset(mem + 3 * kPage, 0x77, kPage);  // the VMM wrote page 3 before the restore
  {
    auto m = LazyMemory::Attach(ckpt->reader->regions(), std::vector<void*>{p});
    REQUIRE(m.has_value());
    Restore r;
    r.memory = std::move(*m);
    RestoreEngineOptions eo;
    auto e = RestoreEngine::Create(*ckpt->reader, r.memory->sink(), eo);
    REQUIRE(e.has_value());
    r.engine = std::move(*e);
    REQUIRE(r.engine->Start().ok());
    REQUIRE(r.memory->Serve(*r.engine).ok());
    REQUIRE(r.engine->WaitForLoader().ok());
    for (uint64_t pg = 0; pg < size / kPage; ++pg) {
      INFO("page " << pg);
      if (pg == 3) {
        CHECK(mem[pg * kPage] == 0x77);
        CHECK(mem[pg * kPage + 4095] == 0x77);
      } else {
        CHECK(std::memcmp(mem + pg * kPage, ckpt->content.data() + pg * kPage, kPage) == 0);
      }
    }
    CHECK(r.memory->status().ok());
    CHECK(r.engine->Stats().pages_skipped_present >= 1);
  }
  munmap(p, size);
}

TEST_CASE("discarded and unmapped memory is never refilled from the checkpoint", "[uffd]") {
  auto ckpt = SaveToDisk(4 << 20, 9, 16);
  const uint64_t size = 4 << 20;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* mem = static_cast<uint8_t*>(p);
  auto m = LazyMemory::Attach(ckpt->reader->regions(), std::vector<void*>{p});
  REQUIRE(m.has_value());
  Restore r;
  r.memory = std::move(*m);
  RestoreEngineOptions eo;
  eo.background_loader = false;
  auto e = RestoreEngine::Create(*ckpt->reader, r.memory->sink(), eo);
  REQUIRE(e.has_value());
  r.engine = std::move(*e);
  REQUIRE(r.engine->Start().ok());
  REQUIRE(r.memory->Serve(*r.engine).ok());
  // The guest's balloon gives pages 100..163 back before touching them: they read as zeros afterwards.
  REQUIRE(madvise(mem + 100 * kPage, 64 * kPage, MADV_DONTNEED) == 0);
  for (uint64_t pg = 100; pg < 164; ++pg) {
    bool zero = true;
    for (uint64_t i = 0; i < kPage && zero; ++i) zero = mem[pg * kPage + i] == 0;
    INFO("page " << pg);
    CHECK(zero);
  }
  // The tail of the region goes away entirely; faults in the rest must not trip over it.
  REQUIRE(munmap(mem + size / 2, size / 2) == 0);
  CHECK(std::memcmp(mem + 5 * kPage, ckpt->content.data() + 5 * kPage, kPage) == 0);
  auto e2 = r.engine->Stats();
  CHECK(e2.faults_failed == 0);
  // The faulting thread resumes a little before its handler has counted the fault: wait for the handlers to
  // finish (faults_done) before reading their counters, or the counts race the check on a loaded machine.
  auto ms = r.memory->Stats();
  WaitFor([&] {
    ms = r.memory->Stats();
    return ms.faults_done >= ms.faults;
  });
  CHECK(ms.faults_done == ms.faults);
  CHECK(ms.remove_events >= 1);
  CHECK(ms.unmap_events >= 1);
  CHECK(ms.discarded_faults >= 64);
  // The rest of the first half still restores (blocks reaching into the unmapped half skip those pages).
  for (uint64_t pg = 0; pg < size / kPage / 2; ++pg) {
    if (pg >= 100 && pg < 164) continue;
    REQUIRE(std::memcmp(mem + pg * kPage, ckpt->content.data() + pg * kPage, kPage) == 0);
  }
  CHECK(r.memory->status().ok());
  r.memory->Stop();
  munmap(mem, size / 2);
}

TEST_CASE("a corrupt block reaches the error policy and never the guest", "[uffd][errors]") {
  auto ckpt = SaveToDisk(2 << 20, 13, 16);
  // Damage block 3's payload on disk.
  const BlockInfo b = ckpt->reader->blocks()[3];
  {
    FILE* f = std::fopen(ckpt->path.c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, long(b.offset + b.stored_length / 2), SEEK_SET);
    int c = std::fgetc(f);
    std::fseek(f, long(b.offset + b.stored_length / 2), SEEK_SET);
    std::fputc(c ^ 0x10, f);
    std::fclose(f);
  }
  auto reader = CheckpointReader::Open(ckpt->path);
  REQUIRE(reader.has_value());
  std::atomic<int> calls{0};
  LazyMemoryOptions mo;
  mo.on_fault_error = [&](PageRef, const Status& s) {
    calls++;
    return FaultErrorAction::kZeroFill;
  };
  RestoreEngineOptions eo;
  eo.background_loader = false;
  auto r = StartRestore(**reader, eo, mo);
  uint64_t victim = (*reader)->BlockMembers(3)[0].page;
  uint8_t* page = r->memory->base(0) + victim * kPage;
  CHECK(page[0] == 0);  // filled with zeros by the policy, not with the corrupt block's content
  CHECK(calls == 1);
  Status s = r->memory->status();
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("block 3"));
  CHECK_THAT(s.message(), Catch::Contains("page " + std::to_string(victim)));
  CHECK_THAT(s.message(), Catch::Contains("page filled with zeros"));
  // Other blocks are fine.
  uint64_t ok_page = (*reader)->BlockMembers(4)[0].page;
  CHECK(std::memcmp(r->memory->base(0) + ok_page * kPage, ckpt->content.data() + ok_page * kPage, kPage) == 0);
}

TEST_CASE("a streamed fault wakes its thread with its page at any slot", "[uffd][stream]") {
  // 64-page blocks cut every 4 pages: the faulting page goes in (and the thread resumes) before its block is.
  auto ckpt = SaveToDisk(4 << 20, 17, 64);
  const CheckpointReader& reader = *ckpt->reader;
  RestoreEngineOptions eo;
  eo.background_loader = false;
  eo.zero_window_pages = 1;
  REQUIRE(eo.stream_faults);
  auto r = StartRestore(reader, eo);
  const uint8_t* base = r->memory->base(0);
  // One page per block first, at a different slot each time, checked the moment the touch returns; then every
  // page of every block (the rest came piece by piece while the thread ran on).
  uint64_t touched_blocks = 0;
  for (uint32_t b = 0; b < reader.blocks().size(); ++b) {
    const auto members = reader.BlockMembers(b);
    const uint64_t g = members[(b * 23 + 7) % members.size()].page;
    INFO("block " << b << " page " << g);
    REQUIRE(SamePage(base + g * kPage, ckpt->content.data() + g * kPage));
    ++touched_blocks;
  }
  for (uint64_t p = 0; p < reader.total_pages(); ++p) {
    INFO("page " << p);
    REQUIRE(SamePage(base + p * kPage, ckpt->content.data() + p * kPage));
  }
  REQUIRE(r->memory->status().ok());
  auto st = r->engine->Stats();
  CHECK(st.blocks_read == touched_blocks);
  CHECK(st.faults_failed == 0);
  CHECK(st.wake_latency.max_ns > 0);
}

int main(int argc, char** argv) {
  std::string mode;
  Status s = LazyMemory::Probe(&mode);
  if (!s.ok()) {
    std::fprintf(stderr,
                 "\n*** SKIPPED: engine_uffd_tests need userfaultfd, which this process cannot use:\n***   %s\n"
                 "*** These tests did not run; they are reported as skipped (exit 77), not passed.\n\n",
                 s.ToString().c_str());
    return 77;
  }
  std::fprintf(stderr, "engine_uffd_tests: userfaultfd available (%s)\n", mode.c_str());
  return Catch::Session().run(argc, argv);
}
