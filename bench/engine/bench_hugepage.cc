// bench_hugepage: what it costs to restore hugetlbfs-backed memory (2 MiB host pages) from each layout.
//
// A restorer installs a 2 MiB host page only whole, so a fault on one page needs every stored page of its host
// page. The writer keeps each host page in one block (WriterOptions::keep_host_pages_whole); the alternative is
// to plan pages as if host pages were 4 KiB (64-page blocks) and let the engine gather a host page from every
// block that holds one of its pages. This replays the fragmented guest's restore-time trace (tests/support/
// fragmented_guest.h, one touching thread) through RestoreEngine into memory (no userfaultfd: the install is a
// memcpy, the same 2 MiB per host page for every layout) and counts what each layout reads and decodes.
//
// usage: bench_hugepage [--pages N] [--runs R] [--seed S] [--csv FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/hint_files.h"
#include "halite/page_sink.h"
#include "halite/restore_engine.h"
#include "replay_run.h"
#include "support/fragmented_guest.h"
#include "support/temp_dir.h"

namespace halite::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPage = 4096;
constexpr uint32_t kHuge = 2 << 20;

// Copies what it is given into one buffer per region (the cost of an install, without userfaultfd).
class MemorySink : public PageSink {
 public:
  explicit MemorySink(const std::vector<Region>& regions) {
    for (const Region& r : regions) memory_.emplace_back(r.size, 0xEE);
  }
  Status Install(std::span<const PageInstall> batch, InstallPriority, size_t* runs_installed) override {
    *runs_installed = 0;
    for (const PageInstall& run : batch) {
      uint8_t* dst = memory_[run.first.region].data() + run.first.page * kPage;
      if (run.zero()) {
        std::memset(dst, 0, run.count * kPage);
      } else {
        std::memcpy(dst, run.data.data(), run.data.size());
      }
      ++*runs_installed;
    }
    return Status::Ok();
  }
  bool IsPresent(PageRef) const override { return false; }
  const uint8_t* Page(PageRef p) const { return memory_[p.region].data() + p.page * kPage; }

 private:
  std::vector<std::vector<uint8_t>> memory_;
};

struct Layout {
  std::string name;
  SaveSpec spec;
};

struct ReplayOutcome {
  double total_ms = 0;
  RestoreEngineStats stats;
  uint64_t mismatches = 0;
};

ReplayOutcome Replay(const std::string& path, const std::vector<TraceAccess>& trace, const std::vector<uint8_t>& image) {
  auto reader = CheckpointReader::Open(path);
  if (!reader) {
    std::fprintf(stderr, "bench_hugepage: %s\n", reader.error().ToString().c_str());
    std::exit(1);
  }
  MemorySink sink((*reader)->regions());
  RestoreEngineOptions eo;
  eo.background_loader = false;
  auto engine = RestoreEngine::Create(**reader, sink, eo);
  if (!engine) std::exit(1);
  ReplayOutcome r;
  const auto t0 = Clock::now();
  for (const TraceAccess& a : trace) {
    if (!(*engine)->HandleFault(a.page).has_value()) std::exit(1);
  }
  r.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.stats = (*engine)->Stats();
  for (const TraceAccess& a : trace) {
    if (std::memcmp(sink.Page(a.page), image.data() + a.page.page * kPage, kPage) != 0) ++r.mismatches;
  }
  return r;
}

// Distinct blocks holding the stored pages of each host page that has any: mean and max.
std::pair<double, uint64_t> Spread(const std::string& path) {
  auto reader = CheckpointReader::Open(path);
  if (!reader) std::exit(1);
  const uint64_t unit = kHuge / kPage;
  uint64_t host_pages = 0, sum = 0, most = 0;
  for (uint64_t first = 0; first < (*reader)->total_pages(); first += unit) {
    std::set<uint32_t> blocks;
    for (uint64_t p = first; p < first + unit && p < (*reader)->total_pages(); ++p) {
      const PageLocation loc = (*reader)->Locate(p);
      if (loc.kind == PageKind::kStored) blocks.insert(loc.block);
    }
    if (blocks.empty()) continue;
    ++host_pages;
    sum += blocks.size();
    most = std::max<uint64_t>(most, blocks.size());
  }
  return {host_pages ? double(sum) / double(host_pages) : 0, most};
}

}  // namespace
}  // namespace halite::bench

int main(int argc, char** argv) {
  using namespace halite;
  using namespace halite::bench;
  uint64_t pages = 65536, seed = 1;
  int runs = 5;
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pages" && i + 1 < argc) {
      pages = std::stoull(argv[++i]) / 512 * 512;
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else if (a == "--csv" && i + 1 < argc) {
      csv = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_hugepage [--pages N] [--runs R] [--seed S] [--csv FILE]\n");
      return 2;
    }
  }
  testing::TempDir dir;
  testing::FragmentedGuestOptions go;
  go.pages = pages;
  go.seed = seed;
  auto guest = testing::GenerateFragmentedGuest(go);
  if (!guest.WriteFiles(dir.path()).ok()) return 1;
  const std::string image = dir.File("image");
  const uint64_t bytes = pages * kPage;
  std::vector<Region> regions = {Region{"ram", 0, bytes, kHuge, 0}};
  auto trace = ParseReplayTrace(guest.RestoreTraceText(), "restore.trace", regions);
  if (!trace) return 1;
  const std::string save_trace = guest.SaveTraceText(), va = guest.VaHintsText();
  std::printf("bench_hugepage: fragmented guest on 2 MiB host pages, %s\n", guest.Describe().c_str());
  std::printf("restore-time trace of %zu accesses replayed through the engine (loader off, one thread, warm page "
              "cache, installs are memcpy), median of %d runs\n\n",
              trace->size(), runs);

  std::vector<Layout> layouts = {
      {"whole host pages, halite order", {64, 3, LayoutPolicy::kHalite, true, 8, kHuge, true}},
      {"whole host pages, physical order", {64, 3, LayoutPolicy::kPhysical, false, 8, kHuge, true}},
      {"64-page blocks, halite order", {64, 3, LayoutPolicy::kHalite, true, 8, kHuge, false}},
      {"64-page blocks, physical order", {64, 3, LayoutPolicy::kPhysical, false, 8, kHuge, false}},
  };
  std::printf("%-34s %7s %8s %13s %8s %11s %9s %9s %9s %9s %5s\n", "layout", "blocks", "file MiB", "blocks/hp avg",
              "max", "block reads", "MiB read", "MiB dec", "total ms", "p50 us", "bad");
  FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (out) {
    std::fprintf(out, "layout,blocks,file_bytes,blocks_per_host_page,max_blocks_per_host_page,host_pages,"
                      "block_reads,extra_reads,bytes_read,bytes_decompressed,total_ms,blocking_p50_us,"
                      "blocking_p99_us,mismatches\n");
  }
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Layout& l = layouts[i];
    const std::string path = dir.File("l" + std::to_string(i) + ".hlt");
    SavedCheckpoint ck = SaveCheckpoint(image, bytes, path, l.spec, save_trace, va);
    const auto [mean, most] = Spread(path);
    std::vector<ReplayOutcome> rs;
    for (int r = 0; r < runs; ++r) rs.push_back(Replay(path, *trace, guest.image));
    std::sort(rs.begin(), rs.end(), [](const ReplayOutcome& a, const ReplayOutcome& b) { return a.total_ms < b.total_ms; });
    const ReplayOutcome& m = rs[rs.size() / 2];
    const auto& s = m.stats;
    const uint64_t reads = s.blocks_read + s.host_page_extra_reads;
    std::printf("%-34s %7llu %8.1f %13.2f %8llu %11llu %9.1f %9.1f %9.1f %9.0f %5llu\n", l.name.c_str(),
                (unsigned long long)ck.blocks, double(ck.file_bytes) / 1048576.0, mean, (unsigned long long)most,
                (unsigned long long)reads, double(s.bytes_read) / 1048576.0,
                double(s.bytes_decompressed) / 1048576.0, m.total_ms, double(s.blocking_latency.p50_ns) / 1e3,
                (unsigned long long)m.mismatches);
    if (out) {
      std::fprintf(out, "%s,%llu,%llu,%.3f,%llu,%llu,%llu,%llu,%llu,%llu,%.3f,%.1f,%.1f,%llu\n", l.name.c_str(),
                   (unsigned long long)ck.blocks, (unsigned long long)ck.file_bytes, mean, (unsigned long long)most,
                   (unsigned long long)s.host_pages_installed, (unsigned long long)reads,
                   (unsigned long long)s.host_page_extra_reads, (unsigned long long)s.bytes_read,
                   (unsigned long long)s.bytes_decompressed, m.total_ms, double(s.blocking_latency.p50_ns) / 1e3,
                   double(s.blocking_latency.p99_ns) / 1e3, (unsigned long long)m.mismatches);
    }
    if (m.mismatches != 0) {
      std::fprintf(stderr, "bench_hugepage: %s: %llu touched pages differ from the image\n", l.name.c_str(),
                   (unsigned long long)m.mismatches);
      return 1;
    }
  }
  if (out) std::fclose(out);
  return 0;
}
