// Regions whose host pages are larger than 4 KiB (hugetlbfs-backed guest memory): every host page goes to the sink
// whole, in one Install call, as runs in page order covering it exactly (zero and absent pages as zero runs),
// once; a fault on any page of it installs all of it.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "engine_test_util.h"
#include "halite/restore_engine.h"
#include "support/synthetic_memory.h"

using namespace halite;
using namespace halite::testing;

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint32_t k2M = 2 << 20;
constexpr uint64_t kUnit = k2M / kPage;  // 512

// Region 0 ("pc.ram", 2 MiB host pages, 4 of them):
//   host page 0: every page stored;
//   host page 1: 7 stored pages (one a duplicate of another in it), the rest zero;
//   host page 2: all zero;
//   host page 3: pages 0..99 stored, 100..199 absent, the rest zero.
// Region 1 ("rom", 4 KiB host pages, 32 pages), all stored.
struct Layout {
  MemCheckpoint m;
  std::set<uint64_t> stored_hp1;
};

Layout HugeCheckpoint(uint32_t block_pages = 64) {
  std::vector<uint8_t> ram = SyntheticBytes(4 * kUnit * kPage, 31);
  // Every page distinct and not zero to begin with (synthetic memory has zero pages and duplicates of its own).
  for (uint64_t p = 0; p < 4 * kUnit; ++p) {
    const uint64_t tag = p + 1;
    std::memcpy(ram.data() + p * kPage, &tag, sizeof tag);
  }
  Layout l;
  for (uint64_t p = kUnit; p < 2 * kUnit; ++p) {
    if (p % 70 != 3) std::memset(ram.data() + p * kPage, 0, kPage);
  }
  for (uint64_t p = kUnit; p < 2 * kUnit; ++p) {
    if (p % 70 == 3) l.stored_hp1.insert(p);
  }
  // Page 913 (in host page 1) duplicates page 563 (the same host page): one slot for both.
  std::memcpy(ram.data() + 913 * kPage, ram.data() + 563 * kPage, kPage);
  std::memset(ram.data() + 2 * kUnit * kPage, 0, kUnit * kPage);
  std::memset(ram.data() + (3 * kUnit + 200) * kPage, 0, (kUnit - 200) * kPage);
  std::set<uint64_t> absent;
  for (uint64_t p = 3 * kUnit + 100; p < 3 * kUnit + 200; ++p) absent.insert(p);
  WriterOptions o;
  o.block_pages = block_pages;
  o.dictionary = DictionaryMode::kOff;
  l.m = BuildCheckpoint({{"pc.ram", 4 * kUnit, k2M}, {"rom", 32}}, {std::move(ram), SyntheticBytes(32 * kPage, 32)},
                        o, {}, absent);
  return l;
}

// A RecordingSink that also checks the host-page rules on every Install call: in a region with large host pages,
// the call's runs of that region start at a host page's first page, follow each other page after page, and end
// at a host page's end, so that each host page it touches is covered exactly, in page order. Records each call's
// host pages.
class HostPageSink : public RecordingSink {
 public:
  explicit HostPageSink(const std::vector<Region>& regions) : RecordingSink(regions), regions_(regions) {}

  Status Install(std::span<const PageInstall> batch, InstallPriority priority, size_t* runs_installed) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<std::pair<uint32_t, uint64_t>> hps;  // (region, host page)
      uint64_t next = UINT64_MAX;                       // the page the open host page needs next
      uint32_t open_region = UINT32_MAX;
      for (const PageInstall& run : batch) {
        const uint64_t unit = regions_[run.first.region].host_page_size / kPage;
        if (unit == 1) {
          if (next != UINT64_MAX) ++violations_;  // another region inside an open host page
          continue;
        }
        if (next == UINT64_MAX) {
          if (run.first.page % unit != 0) ++violations_;
          hps.emplace_back(run.first.region, run.first.page / unit);
        } else if (run.first.region != open_region || run.first.page != next) {
          ++violations_;
        }
        open_region = run.first.region;
        next = run.first.page + run.count;
        if (run.zero()) zero_pages_ += run.count;
        if (next % unit == 0) next = UINT64_MAX;
      }
      if (next != UINT64_MAX) ++violations_;  // the call ended inside a host page
      if (!hps.empty()) calls_.push_back(std::move(hps));
    }
    // Fail the data run after the next `pass_data_runs_` data runs, installing the runs before it.
    if (fail_after_ >= 0) {
      int data_runs = 0;
      for (size_t i = 0; i < batch.size(); ++i) {
        if (batch[i].zero() || data_runs++ < fail_after_) continue;
        fail_after_ = -1;
        Status s = RecordingSink::Install(batch.first(i), priority, runs_installed);
        return s.ok() ? Status::IoError("injected failure after a host page's first runs") : s;
      }
      fail_after_ -= data_runs;
    }
    return RecordingSink::Install(batch, priority, runs_installed);
  }

  // The data run that comes after `n` more data runs fails (the runs before it in its call go in).
  void FailDataRunAfter(int n) { fail_after_ = n; }

  uint64_t violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  uint64_t zero_pages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return zero_pages_;
  }
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::vector<Region> regions_;
  int fail_after_ = -1;
  mutable std::mutex mu_;
  uint64_t violations_ = 0;
  uint64_t zero_pages_ = 0;
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> calls_;
};

RestoreEngineOptions Demand() {
  RestoreEngineOptions o;
  o.background_loader = false;
  return o;
}

bool SameAsContent(const RecordingSink& sink, const MemCheckpoint& m, uint32_t region, uint64_t first, uint64_t n) {
  return std::memcmp(sink.Page(PageRef{region, first}), m.content[region].data() + first * kPage, n * kPage) == 0;
}

}  // namespace

TEST_CASE("the writer keeps each 2 MiB host page in one block", "[engine][hugepage]") {
  Layout l = HugeCheckpoint();
  auto reader = OpenMem(l.m);
  REQUIRE(reader->regions()[0].host_page_size == k2M);
  for (uint64_t hp = 0; hp < 4; ++hp) {
    std::set<uint32_t> blocks;
    for (uint64_t p = hp * kUnit; p < (hp + 1) * kUnit; ++p) {
      const PageLocation loc = reader->Locate(p);
      if (loc.kind == PageKind::kStored) blocks.insert(loc.block);
    }
    INFO("host page " << hp);
    CHECK(blocks.size() == (hp == 2 ? 0u : 1u));
  }
  // Host page 0 has 512 stored pages: a block of its own, larger than block_pages.
  CHECK(reader->blocks()[reader->Locate(0).block].page_count == kUnit);
}

TEST_CASE("a fault anywhere in a large host page installs all of it at once, zeros explicit, once",
          "[engine][hugepage]") {
  Layout l = HugeCheckpoint();
  auto reader = OpenMem(l.m);
  HostPageSink sink(l.m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, Demand());
  REQUIRE(engine.has_value());

  SECTION("a sparse host page: stored pages with their bytes, the other 505 as zero runs") {
    auto out = (*engine)->HandleFault(PageRef{0, kUnit + 250});  // a zero page of host page 1
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kBlocking);
    auto calls = sink.calls();
    REQUIRE(!calls.empty());
    CHECK(calls[0] == std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}});  // the faulting host page alone, first
    for (uint64_t p = kUnit; p < 2 * kUnit; ++p) CHECK(sink.Installed(PageRef{0, p}));
    CHECK(SameAsContent(sink, l.m, 0, kUnit, kUnit));
    CHECK((*engine)->Stats().zero_pages_installed >= kUnit - l.stored_hp1.size());
    CHECK((*engine)->Stats().host_pages_installed >= 1);
  }
  SECTION("an all-zero host page: one fault, 512 zero pages, no read") {
    auto out = (*engine)->HandleFault(PageRef{0, 2 * kUnit + 17});
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kZero);
    CHECK((*engine)->Stats().blocks_read == 0);
    CHECK(sink.zero_pages() == kUnit);
    for (uint64_t p = 2 * kUnit; p < 3 * kUnit; ++p) CHECK(sink.Installed(PageRef{0, p}));
    // Any other page of it is present now.
    auto again = (*engine)->HandleFault(PageRef{0, 3 * kUnit - 1});
    REQUIRE(again.has_value());
    CHECK(again->kind == FaultKind::kPresent);
  }
  SECTION("absent pages inside a host page are sent as zero too") {
    auto out = (*engine)->HandleFault(PageRef{0, 3 * kUnit + 150});  // an absent page
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kBlocking);
    for (uint64_t p = 3 * kUnit; p < 4 * kUnit; ++p) CHECK(sink.Installed(PageRef{0, p}));
    CHECK(SameAsContent(sink, l.m, 0, 3 * kUnit, kUnit));
  }
  SECTION("every page, faulted in a random order") {
    std::vector<PageRef> pages;
    for (uint32_t r = 0; r < 2; ++r) {
      for (uint64_t p = 0; p < reader->regions()[r].page_count(); ++p) pages.push_back(PageRef{r, p});
    }
    std::shuffle(pages.begin(), pages.end(), std::mt19937(5));
    for (const PageRef& p : pages) REQUIRE((*engine)->HandleFault(p).has_value());
    CHECK(SameAsContent(sink, l.m, 0, 0, 4 * kUnit));
    CHECK(SameAsContent(sink, l.m, 1, 0, 32));
    CHECK((*engine)->Stats().host_pages_installed == 4);
    CHECK((*engine)->Stats().host_page_extra_reads == 0);
  }
  CHECK(sink.violations() == 0);
  CHECK(sink.double_installs() == 0);
}

TEST_CASE("the loader and concurrent faults install every large host page whole, once", "[engine][hugepage]") {
  Layout l = HugeCheckpoint(16);
  auto reader = OpenMem(l.m);
  HostPageSink sink(l.m.regions);
  RestoreEngineOptions o;
  o.loader_rate_bytes_per_s = 4 << 20;  // slow enough that faults race it
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 300; ++i) {
        const uint32_t region = rng() % 4 == 0 ? 1 : 0;
        const uint64_t page = rng() % reader->regions()[region].page_count();
        if (!(*engine)->HandleFault(PageRef{region, page}).has_value()) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE((*engine)->WaitForLoader().ok());
  CHECK(failures.load() == 0);
  CHECK(sink.violations() == 0);
  CHECK(sink.double_installs() == 0);
  // Every stored page is in; the zero host page only if a fault asked for it.
  for (uint64_t hp : {0u, 1u, 3u}) {
    for (uint64_t p = hp * kUnit; p < (hp + 1) * kUnit; ++p) REQUIRE(sink.Installed(PageRef{0, p}));
    CHECK(SameAsContent(sink, l.m, 0, hp * kUnit, kUnit));
  }
  CHECK(SameAsContent(sink, l.m, 1, 0, 32));
  CHECK((*engine)->Stats().host_page_extra_reads == 0);
}

TEST_CASE("a host page whose pages lie in several blocks is gathered from all of them", "[engine][hugepage]") {
  // A 32 MiB host page holds 8192 pages: more than a block may (4096), so the writer splits it in two blocks.
  constexpr uint32_t k32M = 32 << 20;
  constexpr uint64_t unit = k32M / kPage;
  WriterOptions o;
  o.dictionary = DictionaryMode::kOff;
  MemCheckpoint m = BuildCheckpoint({{"big", unit, k32M}}, {SyntheticBytes(unit * kPage, 41)}, o);
  auto reader = OpenMem(m);
  std::set<uint32_t> blocks;
  for (uint64_t p = 0; p < unit; ++p) {
    if (reader->Locate(p).kind == PageKind::kStored) blocks.insert(reader->Locate(p).block);
  }
  REQUIRE(blocks.size() == 2);
  for (bool loader : {false, true}) {
    INFO("loader " << loader);
    HostPageSink sink(m.regions);
    RestoreEngineOptions eo = Demand();
    eo.background_loader = loader;
    auto engine = RestoreEngine::Create(*reader, sink, eo);
    REQUIRE(engine.has_value());
    auto out = (*engine)->HandleFault(PageRef{0, 5});
    REQUIRE(out.has_value());
    CHECK(out->kind == FaultKind::kBlocking);
    CHECK(SameAsContent(sink, m, 0, 0, unit));
    const RestoreEngineStats st = (*engine)->Stats();
    CHECK(st.host_pages_installed == 1);
    CHECK(st.host_page_extra_reads == 1);  // the other block, read for the host page
    CHECK(st.blocks_read == 1);
    CHECK(sink.calls().size() == 1);
    // The other block's load, or a fault on a page of it, installs nothing again.
    REQUIRE((*engine)->Start().ok());
    REQUIRE((*engine)->WaitForLoader().ok());
    auto later = (*engine)->HandleFault(PageRef{0, unit - 1});
    REQUIRE(later.has_value());
    CHECK(later->kind == FaultKind::kPresent);
    CHECK(sink.double_installs() == 0);
    CHECK(sink.violations() == 0);
  }
}

TEST_CASE("a sink failure before a host page went in lets it go, and part way through breaks it", "[engine][hugepage]") {
  Layout l = HugeCheckpoint();
  auto reader = OpenMem(l.m);
  HostPageSink sink(l.m.regions);
  auto engine = RestoreEngine::Create(*reader, sink, Demand());
  REQUIRE(engine.has_value());
  // Host page 3's first run is its 100 stored pages: failing it fails before anything of the host page went in,
  // and a later fault installs it.
  sink.FailDataRunAfter(0);
  CHECK_FALSE((*engine)->HandleFault(PageRef{0, 3 * kUnit + 3}).has_value());
  CHECK_FALSE(sink.Installed(PageRef{0, 3 * kUnit}));
  auto retry = (*engine)->HandleFault(PageRef{0, 3 * kUnit + 3});
  REQUIRE(retry.has_value());
  CHECK(SameAsContent(sink, l.m, 0, 3 * kUnit, kUnit));
  // Host page 1 starts with a zero run, then its first stored page: failing that data run leaves the zero run in,
  // so the host page can never be offered again (its installed pages would go twice): its faults fail.
  sink.FailDataRunAfter(0);
  auto broken = (*engine)->HandleFault(PageRef{0, kUnit + 100});
  REQUIRE_FALSE(broken.has_value());
  auto again = (*engine)->HandleFault(PageRef{0, kUnit + 200});
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().message().find("went in only in part") != std::string::npos);
  CHECK(sink.double_installs() == 0);
  CHECK(sink.violations() == 0);
}

TEST_CASE("skip_present_at_start takes a host page with a present page as present, whole", "[engine][hugepage]") {
  Layout l = HugeCheckpoint();
  auto reader = OpenMem(l.m);
  HostPageSink sink(l.m.regions);
  sink.SetPresent(PageRef{0, 7});  // in host page 0
  RestoreEngineOptions o = Demand();
  o.skip_present_at_start = true;
  auto engine = RestoreEngine::Create(*reader, sink, o);
  REQUIRE(engine.has_value());
  REQUIRE((*engine)->Start().ok());
  CHECK((*engine)->Stats().pages_present_at_start == kUnit);
  CHECK((*engine)->Stats().blocks_present_at_start == 1);  // host page 0's block is never read
  auto out = (*engine)->HandleFault(PageRef{0, 300});
  REQUIRE(out.has_value());
  CHECK(out->kind == FaultKind::kPresent);
  CHECK_FALSE(sink.Installed(PageRef{0, 300}));
  CHECK(sink.double_installs() == 0);
}
