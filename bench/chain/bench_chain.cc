// bench_chain: does an incremental chain restore as well as the same content saved flat (issue 12)?
//
// A generated fragmented guest (tests/support/fragmented_guest.h) is saved, then runs three times between saves:
// each run writes the pages its workload writes (the restore trace's writes), updates a share of the page cache
// and heap at random, frees some pages (they become zero) and allocates some free ones. After each run the guest
// is saved as a child of the previous save (--parent), so the last save is a chain of depth 3. The same final
// memory is also saved flat. The restore-time trace is then replayed (one thread, as one vCPU) on both, cold and
// warm, with and without the background loader, and every touched page is compared with the final memory.
//
// Baseline: the flat checkpoint of the same content. Goal (issue 12): the chain within 10% of it in blocking
// faults and time.
//
//   bench_chain [--pages N] [--runs R] [--seed S] [--churn F] [--no-cold] [--csv FILE] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "halite/checkpoint_reader.h"
#include "halite/lazy_memory.h"
#include "replay_run.h"
#include "support/fragmented_guest.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::bench;

namespace {

constexpr uint64_t kPage = 4096;

struct Churn {
  double random_update = 0.02;  // of the non-zero pages: rewritten (page cache, heaps)
  double freed = 0.01;          // of the non-zero pages: become zero
  double allocated = 0.01;      // of the zero pages: become non-zero
};

// New content for a page that keeps the page's character (and so its compressibility): a few words changed.
void Rewrite(uint8_t* page, std::mt19937_64& rng, uint64_t generation) {
  bool zero = std::all_of(page, page + kPage, [](uint8_t b) { return b == 0; });
  if (zero) {  // a fresh allocation: a small header, some text-like bytes
    for (uint64_t i = 0; i < 512; ++i) page[i] = uint8_t('a' + rng() % 26);
  }
  for (int i = 0; i < 16; ++i) {
    uint64_t word = rng() % (kPage / 8);
    uint64_t v = rng() ^ generation;
    std::memcpy(page + word * 8, &v, 8);
  }
}

// One run of the guest between two saves.
void RunGuest(std::vector<uint8_t>* image, const testing::FragmentedGuest& guest, const Churn& churn,
              uint64_t generation, std::mt19937_64& rng) {
  const uint64_t pages = image->size() / kPage;
  auto page = [&](uint64_t p) { return image->data() + p * kPage; };
  auto is_zero = [&](uint64_t p) { return std::all_of(page(p), page(p) + kPage, [](uint8_t b) { return b == 0; }); };
  for (const auto& a : guest.restore_trace) {
    if (a.write) Rewrite(page(a.page), rng, generation);
  }
  std::uniform_real_distribution<double> u(0, 1);
  for (uint64_t p = 0; p < pages; ++p) {
    if (is_zero(p)) {
      if (u(rng) < churn.allocated) Rewrite(page(p), rng, generation);
    } else if (u(rng) < churn.freed) {
      std::memset(page(p), 0, kPage);
    } else if (u(rng) < churn.random_update) {
      Rewrite(page(p), rng, generation);
    }
  }
}

void WriteImage(const std::string& path, const std::vector<uint8_t>& image) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(image.data()), std::streamsize(image.size()));
  if (!f) {
    std::fprintf(stderr, "bench_chain: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

std::shared_ptr<const CheckpointReader> OpenOrDie(const std::string& path) {
  auto r = CheckpointReader::Open(path);
  if (!r) {
    std::fprintf(stderr, "bench_chain: %s\n", r.error().ToString().c_str());
    std::exit(1);
  }
  return std::shared_ptr<const CheckpointReader>(std::move(*r));
}

ReplayResult Median(const std::string& ckpt, const std::vector<TraceAccess>& trace, const RestoreEngineOptions& o,
                    bool cold, int runs, const std::vector<uint8_t>& image) {
  std::vector<ReplayResult> rs;
  for (int i = 0; i < runs; ++i) rs.push_back(RunReplay(ckpt, trace, o, cold, image));
  for (const auto& r : rs) {
    if (r.mismatches) {
      std::fprintf(stderr, "bench_chain: %s: %llu touched pages differ from the guest's memory\n", ckpt.c_str(),
                   (unsigned long long)r.mismatches);
      std::exit(1);
    }
  }
  std::sort(rs.begin(), rs.end(), [](const ReplayResult& a, const ReplayResult& b) { return a.total_s < b.total_s; });
  return rs[rs.size() / 2];
}

struct Cell {
  std::string config, cache, layout;
  ReplayResult r;
};

}  // namespace

int main(int argc, char** argv) {
  uint64_t pages = 65536, seed = 1;
  int runs = 5;
  bool cold_too = true;
  double churn_scale = 1.0;
  std::string csv, json;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pages" && i + 1 < argc) {
      pages = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--churn" && i + 1 < argc) {
      churn_scale = std::strtod(argv[++i], nullptr);
    } else if (a == "--csv" && i + 1 < argc) {
      csv = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--no-cold") {
      cold_too = false;
    } else {
      std::fprintf(stderr,
                   "usage: bench_chain [--pages N] [--runs R] [--seed S] [--churn F] [--no-cold] [--csv FILE] "
                   "[--json FILE]\n");
      return 2;
    }
  }
  std::string mode;
  if (Status probe = LazyMemory::Probe(&mode); !probe.ok()) {
    std::fprintf(stderr, "bench_chain: SKIPPED, userfaultfd unavailable: %s\n", probe.ToString().c_str());
    return 77;
  }
  if (cold_too && !DropCaches()) {
    std::fprintf(stderr, "bench_chain: cannot drop the page cache (not root?): cold runs skipped\n");
    cold_too = false;
  }

  testing::TempDir dir;
  testing::FragmentedGuestOptions go;
  go.pages = pages;
  go.seed = seed;
  const testing::FragmentedGuest guest = testing::GenerateFragmentedGuest(go);
  const uint64_t bytes = pages * kPage;
  const std::string save_trace = guest.SaveTraceText(), va = guest.VaHintsText();
  std::vector<Region> regions = {Region{"ram", 0, bytes, 4096, 0}};
  auto trace = ParseReplayTrace(guest.RestoreTraceText(), "restore.trace", regions);
  if (!trace) return 1;
  Churn churn;
  churn.random_update *= churn_scale;
  churn.freed *= churn_scale;
  churn.allocated *= churn_scale;

  std::printf("bench_chain: fragmented guest, %s\n", guest.Describe().c_str());
  std::printf("between saves: the workload's writes, %.1f%% of non-zero pages rewritten, %.1f%% freed, %.1f%% of "
              "free pages allocated; %d run(s) per cell (median), one touching thread\n\n",
              churn.random_update * 100, churn.freed * 100, churn.allocated * 100, runs);

  // Generations 0..3: the base full, then three children, each of the one before; the children once with every
  // equal page a reference (--rewrite-fraction above 1) and once with the default (blocks of the flat layout
  // that mostly changed are stored whole).
  struct Chain {
    std::string name;
    double rewrite = 0;
    std::vector<SavedCheckpoint> files;
    uint64_t bytes = 0;
  };
  std::vector<Chain> chains = {{"chain, references only", 2.0, {}, 0}, {"chain, default", 0.25, {}, 0}};
  std::vector<uint8_t> image = guest.image;
  std::mt19937_64 rng(seed * 7919 + 1);
  for (uint64_t gen = 0; gen <= 3; ++gen) {
    if (gen > 0) RunGuest(&image, guest, churn, gen, rng);
    const std::string img = dir.File("gen" + std::to_string(gen) + ".img");
    WriteImage(img, image);
    for (size_t c = 0; c < chains.size(); ++c) {
      if (gen == 0 && c > 0) {  // one base for both
        chains[c].files.push_back(chains[0].files[0]);
        continue;
      }
      ChainSpec link;
      if (gen > 0) link.parent = OpenOrDie(chains[c].files.back().path);
      link.page_hashes = true;
      link.parent_rewrite_fraction = chains[c].rewrite;
      chains[c].files.push_back(SaveCheckpoint(img, bytes,
                                               dir.File("c" + std::to_string(c) + "-gen" + std::to_string(gen) + ".hlt"),
                                               SaveSpec{64, 3, LayoutPolicy::kHalite, true}, save_trace, va, link));
    }
  }
  SavedCheckpoint flat = SaveCheckpoint(dir.File("gen3.img"), bytes, dir.File("flat.hlt"),
                                        SaveSpec{64, 3, LayoutPolicy::kHalite, true}, save_trace, va);

  std::printf("| checkpoint | file | bytes | blocks | save s |\n| --- | --- | ---: | ---: | ---: |\n");
  for (Chain& c : chains) {
    for (size_t i = 0; i < c.files.size(); ++i) {
      c.bytes += c.files[i].file_bytes;
      std::printf("| %s | gen%zu%s | %llu | %llu | %.2f |\n", c.name.c_str(), i, i == 0 ? " (full)" : " (child)",
                  (unsigned long long)c.files[i].file_bytes, (unsigned long long)c.files[i].blocks,
                  c.files[i].save_seconds);
    }
  }
  std::printf("| flat | gen3 | %llu | %llu | %.2f |\n\n", (unsigned long long)flat.file_bytes,
              (unsigned long long)flat.blocks, flat.save_seconds);

  std::vector<Cell> cells;
  std::vector<std::pair<std::string, RestoreEngineOptions>> configs;
  RestoreEngineOptions no_loader;
  no_loader.background_loader = false;
  RestoreEngineOptions loader;
  loader.background_loader = true;
  configs.push_back({"loader off", no_loader});
  configs.push_back({"loader on", loader});
  std::vector<bool> colds = {false};
  if (cold_too) colds.insert(colds.begin(), true);
  for (bool cold : colds) {
    for (const auto& [name, eo] : configs) {
      cells.push_back({name, cold ? "cold" : "warm", "flat", Median(flat.path, *trace, eo, cold, runs, image)});
      for (const Chain& c : chains) {
        cells.push_back({name, cold ? "cold" : "warm", c.name + " (depth 3)",
                         Median(c.files.back().path, *trace, eo, cold, runs, image)});
      }
    }
  }

  std::printf("| config | cache | layout | first ms | total ms | blocking faults | blocks read | read MiB | "
              "p50 us | p99 us |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Cell& c : cells) {
    const auto& s = c.r.stats;
    std::printf("| %s | %s | %s | %.1f | %.1f | %llu | %llu | %.1f | %llu | %llu |\n", c.config.c_str(),
                c.cache.c_str(), c.layout.c_str(), c.r.first_access_us / 1000, c.r.total_s * 1000,
                (unsigned long long)s.faults_blocking, (unsigned long long)s.blocks_read, s.bytes_read / 1048576.0,
                (unsigned long long)(s.fault_latency.p50_ns / 1000), (unsigned long long)(s.fault_latency.p99_ns / 1000));
  }
  std::printf("\nchain / flat of the same content (goal: <= 1.10 in blocking faults and time):\n");
  std::printf("| config | cache | chain | blocking faults | blocks read | total time |\n"
              "| --- | --- | --- | ---: | ---: | ---: |\n");
  nlohmann::ordered_json out = {{"pages", pages}, {"seed", seed}, {"runs", runs}, {"churn", churn_scale},
                                {"flat_bytes", flat.file_bytes}, {"chains", nlohmann::ordered_json::array()},
                                {"cells", nlohmann::ordered_json::array()}};
  for (const Chain& c : chains) out["chains"].push_back({{"name", c.name}, {"rewrite_fraction", c.rewrite},
                                                          {"bytes", c.bytes}});
  std::string csv_text = "config,cache,layout,first_ms,total_ms,blocking_faults,blocks_read,bytes_read,p50_us,p99_us\n";
  const size_t group = 1 + chains.size();
  for (size_t i = 0; i + group <= cells.size(); i += group) {
    const Cell& f = cells[i];
    for (size_t k = 1; k < group; ++k) {
      const Cell& c = cells[i + k];
      auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
      std::printf("| %s | %s | %s | %.3f | %.3f | %.3f |\n", f.config.c_str(), f.cache.c_str(), c.layout.c_str(),
                  ratio(double(c.r.stats.faults_blocking), double(f.r.stats.faults_blocking)),
                  ratio(double(c.r.stats.blocks_read), double(f.r.stats.blocks_read)), ratio(c.r.total_s, f.r.total_s));
    }
  }
  for (const Cell& c : cells) {
    const auto& s = c.r.stats;
    out["cells"].push_back({{"config", c.config},
                            {"cache", c.cache},
                            {"layout", c.layout},
                            {"first_ms", c.r.first_access_us / 1000},
                            {"total_ms", c.r.total_s * 1000},
                            {"blocking_faults", s.faults_blocking},
                            {"blocks_read", s.blocks_read},
                            {"bytes_read", s.bytes_read},
                            {"p50_us", s.fault_latency.p50_ns / 1000},
                            {"p99_us", s.fault_latency.p99_ns / 1000}});
    csv_text += c.config + "," + c.cache + "," + c.layout + "," + std::to_string(c.r.first_access_us / 1000) + "," +
                std::to_string(c.r.total_s * 1000) + "," + std::to_string(s.faults_blocking) + "," +
                std::to_string(s.blocks_read) + "," + std::to_string(s.bytes_read) + "," +
                std::to_string(s.fault_latency.p50_ns / 1000) + "," + std::to_string(s.fault_latency.p99_ns / 1000) + "\n";
  }
  std::printf("\nsizes: flat %llu bytes", (unsigned long long)flat.file_bytes);
  for (const Chain& c : chains) {
    std::printf("; %s %llu bytes in 4 files (children %llu)", c.name.c_str(), (unsigned long long)c.bytes,
                (unsigned long long)(c.bytes - c.files[0].file_bytes));
  }
  std::printf("\n");
  if (!csv.empty()) std::ofstream(csv) << csv_text;
  if (!json.empty()) std::ofstream(json) << out.dump(2) << "\n";
  return 0;
}
