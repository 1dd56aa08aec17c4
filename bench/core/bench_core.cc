// bench_core: save throughput, block read latency and compression ratio per block size and zstd level, on
// generated images. Baseline, in the same run: zstd at the same level over the whole raw image (one frame),
// which sees all cross-page redundancy but cannot be read lazily.
//
//   bench_core [--mib N] [--csv FILE] [--json FILE] [--quick] [--encryption] [--runs R]
// --encryption: only the cost of encrypted checkpoints (encryption_cost.h), R runs a variant (default 5).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "codec/zstd_codec.h"
#include "encryption_cost.h"
#include "halite/checkpoint_reader.h"
#include "halite/latency_histogram.h"
#include "halite/checkpoint_writer.h"
#include "support/synthetic_memory.h"
#include "support/temp_dir.h"

using namespace halite;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Row {
  std::string table;
  std::string config;
  double value1 = 0, value2 = 0, value3 = 0, value4 = 0;
};

struct SaveResult {
  uint64_t bytes = 0;
  double seconds = 0;
  uint64_t dict = 0;
};

SaveResult Save(const std::string& image, const std::string& out, uint64_t raw, uint32_t block_pages, int level,
                DictionaryMode dict, unsigned threads) {
  WriterOptions o;
  o.block_pages = block_pages;
  o.level = level;
  o.dictionary = dict;
  o.threads = threads;
  o.sink.sync = false;
  auto w = CheckpointWriter::Create(out, o);
  auto r = (*w)->AddRegion("ram", 0, raw);
  (void)(*w)->AttachImage(*r, image);
  auto t0 = Clock::now();
  auto s = (*w)->Finish();
  auto t1 = Clock::now();
  if (!s) {
    std::fprintf(stderr, "save failed: %s\n", s.error().ToString().c_str());
    std::exit(1);
  }
  return {s->file_bytes, Seconds(t0, t1), s->dictionary_bytes};
}

void DropCaches() {
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (f) f << "3\n";
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 256;
  std::string csv, json;
  bool quick = false, encryption_only = false;
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) mib = std::stoull(argv[++i]);
    else if (a == "--encryption") encryption_only = true;
    else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: bench_core [--mib N] [--csv FILE] [--json FILE] [--quick] [--encryption] [--runs R]\n");
      return 2;
    }
  }
  testing::TempDir dir;
  std::string image = dir.File("image");
  uint64_t raw = mib << 20;
  if (!testing::WriteSyntheticImage(image, raw, 7).ok()) return 1;
  std::vector<uint8_t> mem(raw);
  {
    FILE* f = std::fopen(image.c_str(), "rb");
    if (std::fread(mem.data(), 1, raw, f) != raw) return 1;
    std::fclose(f);
  }
  std::vector<Row> rows;
  std::printf("bench_core: %llu MiB synthetic image (zero, text, code, pointers, sparse, duplicates, random), %u CPUs\n\n",
              (unsigned long long)mib, std::thread::hardware_concurrency());

  auto encryption = [&] {
    for (const auto& r : bench::RunEncryptionCost(image, mem, dir.path(), runs)) {
      rows.push_back({r.table, r.config, r.value1, r.value2, r.value3, r.value4});
    }
  };
  if (encryption_only) {
    encryption();
  } else {
  // 1. Baseline: whole-image zstd per level.
  std::vector<int> levels = quick ? std::vector<int>{1, 3} : std::vector<int>{1, 3, 6, 9};
  std::vector<uint32_t> block_sizes = quick ? std::vector<uint32_t>{1, 16, 64, 256}
                                            : std::vector<uint32_t>{1, 4, 16, 32, 64, 128, 256, 1024};
  std::map<int, uint64_t> whole;
  std::printf("Compression: checkpoint size / whole-image zstd at the same level (lower is better; <1 means the\n"
              "checkpoint is smaller thanks to zero-page elision and deduplication)\n");
  std::printf("%-8s %14s", "level", "whole-zstd MB");
  for (uint32_t bp : block_sizes) std::printf(" %8s", ("bp=" + std::to_string(bp)).c_str());
  std::printf(" %10s\n", "bp=64+dict");
  for (int level : levels) {
    codec::Compressor c;
    std::vector<uint8_t> out;
    auto t0 = Clock::now();
    (void)c.Compress(mem, level, nullptr, &out);
    double secs = Seconds(t0, Clock::now());
    whole[level] = out.size();
    rows.push_back({"whole_zstd", "level=" + std::to_string(level), double(out.size()), secs, 0, 0});
    std::printf("%-8d %14.1f", level, double(out.size()) / 1e6);
    for (uint32_t bp : block_sizes) {
      SaveResult s = Save(image, dir.File("c.hlt"), raw, bp, level, DictionaryMode::kOff, 0);
      double r = double(s.bytes) / double(out.size());
      rows.push_back({"ratio_vs_whole", "level=" + std::to_string(level) + " block_pages=" + std::to_string(bp), r,
                      double(s.bytes), 0, 0});
      std::printf(" %8.3f", r);
    }
    SaveResult sd = Save(image, dir.File("c.hlt"), raw, 64, level, DictionaryMode::kOn, 0);
    rows.push_back({"ratio_vs_whole", "level=" + std::to_string(level) + " block_pages=64 dictionary=on",
                    double(sd.bytes) / double(out.size()), double(sd.bytes), 0, 0});
    std::printf(" %10.3f\n", double(sd.bytes) / double(out.size()));
  }

  // 2. Save throughput (raw bytes in per second) by threads and dictionary mode, level 3, 64-page blocks.
  std::printf("\nSave throughput, level 3, 64-page blocks (raw GB/s in; baseline: whole-image zstd -3 single thread)\n");
  std::printf("%-28s %10s %10s %12s\n", "config", "seconds", "GB/s", "vs baseline");
  double base_secs = 0;
  for (auto& r : rows) {
    if (r.table == "whole_zstd" && r.config == "level=3") base_secs = r.value2;
  }
  std::printf("%-28s %10.3f %10.3f %12s\n", "whole-image zstd -3", base_secs, double(raw) / base_secs / 1e9, "1.00x");
  for (unsigned threads : {1u, 2u}) {
    for (auto dict : {DictionaryMode::kOff, DictionaryMode::kAuto}) {
      SaveResult s = Save(image, dir.File("c.hlt"), raw, 64, 3, dict, threads);
      std::string cfg = "threads=" + std::to_string(threads) + (dict == DictionaryMode::kOff ? " dict=off" : " dict=auto");
      rows.push_back({"save_throughput", cfg, double(raw) / s.seconds / 1e9, s.seconds, double(s.dict), 0});
      std::printf("%-28s %10.3f %10.3f %11.2fx\n", cfg.c_str(), s.seconds, double(raw) / s.seconds / 1e9,
                  base_secs / s.seconds);
    }
  }

  // 3. Block read + verify + decompress latency per block size (one thread, random blocks), warm and cold.
  std::printf("\nBlock read+verify+decompress latency, level 3 (us per block; p50/p99), random blocks\n");
  std::printf("%-12s %10s %10s %10s %10s %12s %12s\n", "block_pages", "warm p50", "warm p99", "cold p50", "cold p99",
              "warm us/page", "stored KiB");
  for (uint32_t bp : block_sizes) {
    std::string path = dir.File("lat.hlt");
    Save(image, path, raw, bp, 3, DictionaryMode::kOff, 0);
    for (int cold = 0; cold < 2; ++cold) {
      if (cold) DropCaches();
      auto reader = CheckpointReader::Open(path);
      if (!reader) return 1;
      auto& r = **reader;
      std::mt19937 rng(5);
      LatencyHistogram latency;
      std::vector<uint8_t> buf;
      uint64_t stored = 0;
      int n = std::min<int>(int(r.blocks().size()), quick ? 300 : 1000);
      for (int i = 0; i < n; ++i) {
        uint32_t b = rng() % r.blocks().size();
        buf.resize(r.blocks()[b].raw_length());
        auto t0 = Clock::now();
        if (!r.ReadBlock(b, buf).ok()) return 1;
        latency.Record(uint64_t(Seconds(t0, Clock::now()) * 1e9));
        stored += r.blocks()[b].stored_length;
      }
      const LatencySummary lat = latency.Summary();
      const double p50 = double(lat.p50_ns) / 1e3, p99 = double(lat.p99_ns) / 1e3;
      rows.push_back({"block_latency", std::string(cold ? "cold" : "warm") + " block_pages=" + std::to_string(bp), p50,
                      p99, double(stored) / n, 0});
      if (!cold) {
        std::printf("%-12u %10.1f %10.1f", bp, p50, p99);
      } else {
        double warm_p50 = rows[rows.size() - 2].value1;
        std::printf(" %10.1f %10.1f %12.2f %12.1f\n", p50, p99, warm_p50 / bp, double(stored) / n / 1024);
      }
    }
  }

  encryption();
  }  // !encryption_only

  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "table,config,value1,value2,value3,value4\n";
    for (auto& r : rows) f << r.table << ",\"" << r.config << "\"," << r.value1 << "," << r.value2 << "," << r.value3 << "," << r.value4 << "\n";
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      auto& r = rows[i];
      f << (i ? "," : "") << "{\"table\":\"" << r.table << "\",\"config\":\"" << r.config << "\",\"value1\":" << r.value1
        << ",\"value2\":" << r.value2 << ",\"value3\":" << r.value3 << "}";
    }
    f << "]\n";
  }
  return 0;
}
