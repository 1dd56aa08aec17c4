// bench_engine: lazy restore of a generated fragmented guest (tests/support/fragmented_guest.h), replaying its
// restore-time trace with one thread (one vCPU), for several restore policies, cold and warm page cache; then a
// per-fault cost breakdown against the machine's limits, and block-size and zstd-level sweeps.
//
// Baselines in the same run: "eager" (read everything, then start) and "demand" (one page per fault, no loader:
// what a plain postcopy restore of a page-granular image does).
//
//   bench_engine [--pages N] [--runs R] [--seed S] [--quick] [--no-cold] [--fault-only] [--csv FILE] [--json FILE]
// --fault-only: the per-fault table and the machine limits only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "halite/lazy_memory.h"
#include "machine_limits.h"
#include "replay_run.h"
#include "support/fragmented_guest.h"
#include "support/temp_dir.h"

using namespace halite;
using namespace halite::bench;

namespace {

struct Row {
  std::string table, config;
  std::vector<std::pair<std::string, double>> values;
};

struct Policy {
  std::string name;
  std::string ckpt_key;  // which checkpoint
  RestoreEngineOptions options;
};

RestoreEngineOptions Options(bool loader, bool preload_ws = false, bool eager = false) {
  RestoreEngineOptions o;
  o.background_loader = loader;
  o.preload_working_set = preload_ws;
  o.preload_all = eager;
  return o;
}

// Runs `runs` replays and keeps the one with the median total time (its numbers hang together).
ReplayResult MedianReplay(const std::string& ckpt, const std::vector<TraceAccess>& trace, const RestoreEngineOptions& o,
                          bool cold, int runs, const std::vector<uint8_t>& image) {
  std::vector<ReplayResult> rs;
  for (int i = 0; i < runs; ++i) rs.push_back(RunReplay(ckpt, trace, o, cold, image));
  std::sort(rs.begin(), rs.end(), [](const ReplayResult& a, const ReplayResult& b) { return a.total_s < b.total_s; });
  ReplayResult r = rs[rs.size() / 2];
  for (const auto& x : rs) {
    if (x.mismatches) {
      std::fprintf(stderr, "bench_engine: %s: %llu pages differ from the image\n", ckpt.c_str(),
                   (unsigned long long)x.mismatches);
      std::exit(1);
    }
  }
  return r;
}

std::string TraceText(const std::vector<PageRef>& pages) {
  std::string s;
  for (const auto& p : pages) s += std::to_string(p.page) + "\n";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t pages = 65536, seed = 1;
  int runs = 3;
  bool quick = false, cold_too = true, fault_only = false;
  std::string csv, json;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pages" && i + 1 < argc)
      pages = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--seed" && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--runs" && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--csv" && i + 1 < argc)
      csv = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--quick")
      quick = true;
    else if (a == "--no-cold")
      cold_too = false;
    else if (a == "--fault-only")
      fault_only = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_engine [--pages N] [--runs R] [--seed S] [--quick] [--no-cold] [--fault-only] "
                   "[--csv FILE] [--json FILE]\n");
      return 2;
    }
  }
  std::string mode;
  Status probe = LazyMemory::Probe(&mode);
  if (!probe.ok()) {
    std::fprintf(stderr, "bench_engine: SKIPPED, userfaultfd unavailable: %s\n", probe.ToString().c_str());
    return 77;
  }
  if (quick) runs = 1;
  if (cold_too && !DropCaches()) {
    std::fprintf(stderr, "bench_engine: cannot drop the page cache (not root?): cold runs skipped\n");
    cold_too = false;
  }

  testing::TempDir dir;
  testing::FragmentedGuestOptions go;
  go.pages = pages;
  go.seed = seed;
  auto guest = testing::GenerateFragmentedGuest(go);
  std::string image = dir.File("image");
  if (!guest.WriteFiles(dir.path()).ok()) return 1;
  const uint64_t bytes = pages * 4096;
  std::vector<Region> regions = {Region{"ram", 0, bytes, 4096, 0}};
  auto trace = ParseReplayTrace(guest.RestoreTraceText(), "restore.trace", regions);
  if (!trace) return 1;
  std::string save_trace = guest.SaveTraceText(), va = guest.VaHintsText();
  std::vector<Row> rows;
  std::printf("bench_engine: fragmented guest, %s\n", guest.Describe().c_str());
  std::printf("userfaultfd via %s, %u CPUs, %d run(s) per cell (median), one touching thread, dictionary off\n\n",
              mode.c_str(), std::thread::hardware_concurrency(), runs);

  // Checkpoints.
  std::map<std::string, SavedCheckpoint> ck;
  ck["halite"] =
      SaveCheckpoint(image, bytes, dir.File("halite.hlt"), {64, 3, LayoutPolicy::kHalite, true}, save_trace, va);
  if (!fault_only) {
    ck["physical"] =
        SaveCheckpoint(image, bytes, dir.File("physical.hlt"), {64, 3, LayoutPolicy::kPhysical, false}, "", "");
    ck["page"] = SaveCheckpoint(image, bytes, dir.File("page.hlt"), {1, 3, LayoutPolicy::kHalite, true}, save_trace, va);
    {
      // Learned layout: what `hlt-save relayout` does with the trace a replay of the halite checkpoint records.
      ReplayResult rec = RunReplay(ck["halite"].path, *trace, Options(false), false, guest.image);
      ck["learned"] = SaveCheckpoint(image, bytes, dir.File("learned.hlt"), {64, 3, LayoutPolicy::kHalite, true},
                                     TraceText(rec.first_touches) + save_trace, va);
    }
  }

  // Twinkle's demand prediction parameters from the paper: 1024-page segments, 30% threshold.
  RestoreEngineOptions twinkle = Options(false, true);
  twinkle.predict_segment_pages = 1024;
  twinkle.predict_threshold = 307;
  std::vector<Policy> policies = {
      {"eager (read all, then run)", "halite", Options(false, false, true)},
      {"demand (1 page/fault)", "page", Options(false)},
      {"twinkle (ws+predict, 1 page)", "page", twinkle},
      {"physical blocks", "physical", Options(false)},
      {"physical blocks + loader", "physical", Options(true)},
      {"halite", "halite", Options(false)},
      {"halite + loader", "halite", Options(true)},
      {"halite + ws preload + loader", "halite", Options(true, true)},
      {"learned (relayout) + loader", "learned", Options(true)},
  };
  std::printf(
      "Replay of the restore-time trace (%zu accesses). time to first access and total time run from opening "
      "the checkpoint;\nbytes read are those read by the time the trace is done; latency is per fault, all "
      "kinds.\n",
      trace->size());
  std::printf("%-30s %-5s %9s %9s %8s %7s %9s %8s %8s %9s %9s %9s\n", "policy", "cache", "first ms", "total ms",
              "blocking", "zero", "read MiB", "p50 us", "p99 us", "file MiB", "stall ms", "thread ms");
  if (fault_only) policies.clear();
  for (int cold = cold_too ? 1 : 0; cold >= 0; --cold) {
    for (const auto& p : policies) {
      const SavedCheckpoint& c = ck[p.ckpt_key];
      // Warm: read the file once so it is in the page cache.
      if (!cold) (void)RunReplay(c.path, *trace, Options(false, false, true), false, guest.image);
      ReplayResult r = MedianReplay(c.path, *trace, p.options, cold, runs, guest.image);
      const auto& s = r.stats;
      std::printf("%-30s %-5s %9.2f %9.2f %8llu %7llu %9.2f %8.1f %8.1f %9.1f %9.2f %9.2f\n", p.name.c_str(),
                  cold ? "cold" : "warm", r.first_access_us / 1e3, r.total_s * 1e3,
                  (unsigned long long)s.faults_blocking, (unsigned long long)s.faults_zero,
                  double(s.bytes_read) / 1048576.0, double(s.fault_latency.p50_ns) / 1e3,
                  double(s.fault_latency.p99_ns) / 1e3, double(c.file_bytes) / 1048576.0, double(s.stall_ns) / 1e6,
                  r.touch_stall_ms);
      rows.push_back({"policy",
                      p.name + (cold ? " cold" : " warm"),
                      {{"first_access_ms", r.first_access_us / 1e3},
                       {"total_ms", r.total_s * 1e3},
                       {"faults_blocking", double(s.faults_blocking)},
                       {"faults_zero", double(s.faults_zero)},
                       {"faults_present", double(s.faults_present)},
                       {"bytes_read", double(s.bytes_read)},
                       {"fault_p50_us", double(s.fault_latency.p50_ns) / 1e3},
                       {"fault_p99_us", double(s.fault_latency.p99_ns) / 1e3},
                       {"blocking_p50_us", double(s.blocking_latency.p50_ns) / 1e3},
                       {"blocking_p99_us", double(s.blocking_latency.p99_ns) / 1e3},
                       {"file_bytes", double(c.file_bytes)},
                       {"faults_joined", double(s.faults_joined)},
                       {"stall_ms", double(s.stall_ns) / 1e6},
                       {"stall_blocking_ms", double(s.stall_blocking_ns) / 1e6},
                       {"stall_joined_ms", double(s.stall_joined_ns) / 1e6},
                       {"touch_stall_ms", r.touch_stall_ms},
                       {"missing_touches", double(r.missing_touches)}}});
    }
  }

  // Per-fault cost of a 64-page block: the old path (frames uncut, the whole block decoded, then installed in one
  // call that wakes the faulting thread) against streamed faults (the faulting page installed alone as soon as
  // its zstd block is decoded, then each further piece), for frames cut every 16, 8 and 4 pages and uncut (files
  // written before the cut), same image, same trace, same run.
  struct FaultPath {
    std::string name;
    uint32_t cut;  // WriterOptions::zstd_block_pages
    uint32_t frames;  // WriterOptions::frame_pages
    bool stream;
    SavedCheckpoint ck;
    BlockCosts bc;
    ReplayResult eng;
    std::vector<FaultToWake> wake;  // isolated faults at slots 0, 24, 32, 63 of 64
  };
  std::vector<FaultPath> paths = {{"old", 0, 0, false, {}, {}, {}, {}},
                                  {"uncut,stream", 0, 0, true, {}, {}, {}, {}},
                                  {"cut16,stream", 16, 0, true, {}, {}, {}, {}},
                                  {"cut8,stream", 8, 0, true, {}, {}, {}, {}},
                                  {"cut4,stream", 4, 0, true, {}, {}, {}, {}},
                                  {"f16cut8,stream", 8, 16, true, {}, {}, {}, {}},
                                  {"f8cut4,stream", 4, 8, true, {}, {}, {}, {}}};
  for (FaultPath& fp : paths) {
    const WriterOptions defaults;
    fp.ck = fp.cut == defaults.zstd_block_pages && fp.frames == defaults.frame_pages
                ? ck["halite"]
                : SaveCheckpoint(image, bytes,
                                 dir.File("cut" + std::to_string(fp.cut) + "f" + std::to_string(fp.frames) + ".hlt"),
                                 {64, 3, LayoutPolicy::kHalite, true, fp.cut, fp.frames}, save_trace, va);
    RestoreEngineOptions o = Options(false);
    o.stream_faults = fp.stream;
    o.record_timeline = true;
    (void)RunReplay(fp.ck.path, *trace, Options(false, false, true), false, guest.image);
    fp.eng = MedianReplay(fp.ck.path, *trace, o, false, runs, guest.image);
  }
  // Step costs and isolated faults: the paths in turn, three rounds, the best round of each: a shared machine's
  // load drifts over a run, and measuring one path after the other would charge the drift to the later ones.
  auto keep_min = [](double& have, double now) { have = have > 0 ? std::min(have, now) : now; };
  const std::vector<double> slots = {0.0, 0.375, 0.5, 1.0};
  for (FaultPath& fp : paths) fp.wake.assign(slots.size(), FaultToWake{});
  for (int round = 0; round < 3; ++round) {
    for (FaultPath& fp : paths) {
      BlockCosts k = MeasureBlockCosts(fp.ck.path, quick ? 60 : 200);
      if (round == 0) {
        fp.bc = k;
      } else {
        for (auto f : {&BlockCosts::read_cold_us, &BlockCosts::read_warm_us, &BlockCosts::verify_us,
                       &BlockCosts::decompress_us, &BlockCosts::decompress_first_us,
                       &BlockCosts::decompress_streamed_us, &BlockCosts::install_us}) {
          keep_min(fp.bc.*f, k.*f);
        }
        fp.bc.decompress_gbps = std::max(fp.bc.decompress_gbps, k.decompress_gbps);
        fp.bc.verify_gbps = std::max(fp.bc.verify_gbps, k.verify_gbps);
      }
      for (size_t i = 0; i < slots.size(); ++i) {
        FaultToWake w = MeasureFaultToWake(fp.ck.path, quick ? 20 : 50, fp.stream, slots[i]);
        keep_min(fp.wake[i].touch_us, w.touch_us);
        keep_min(fp.wake[i].block_us, w.block_us);
      }
    }
  }
  UffdCosts uc = MeasureUffd(quick ? 5000 : 20000);
  const BlockCosts& bc = paths.back().bc;
  auto pct = [](auto v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return double(v[std::min(v.size() - 1, size_t(q * double(v.size())))]);
  };
  std::printf("\nPer-fault cost, halite layout, 64-page blocks, zstd 3, loader off, warm cache, microseconds unless "
              "named\n(steps and isolated faults: best of 3 per block, median over blocks, best of 3 rounds taken in "
              "turn; engine and thread: the median replay)\n");
  std::printf("  %-46s", "path (fN: frames of N pages; cutN: zstd blocks)");
  for (const FaultPath& fp : paths) std::printf(" %13s", fp.name.c_str());
  std::printf("\n");
  auto line = [&](const char* what, const std::function<double(const FaultPath&)>& f) {
    std::printf("  %-46s", what);
    for (const FaultPath& fp : paths) std::printf(" %13.1f", f(fp));
    std::printf("\n");
  };
  auto per_block = [](const FaultPath& fp, uint64_t v) {
    return double(v) / double(std::max<uint64_t>(1, fp.eng.stats.blocks_read));
  };
  line("file MiB", [](const FaultPath& fp) { return double(fp.ck.file_bytes) / 1048576.0; });
  line("block stored KiB (mean)", [](const FaultPath& fp) { return fp.bc.stored_kib; });
  line("zstd blocks per frame (mean)", [](const FaultPath& fp) { return fp.bc.pieces; });
  line("read (pread), cold cache", [](const FaultPath& fp) { return fp.bc.read_cold_us; });
  line("read (pread), warm cache", [](const FaultPath& fp) { return fp.bc.read_warm_us; });
  line("verify (XXH3)", [](const FaultPath& fp) { return fp.bc.verify_us; });
  line("decompress whole frame, one call", [](const FaultPath& fp) { return fp.bc.decompress_us; });
  line("decompress by zstd block: first piece out", [](const FaultPath& fp) { return fp.bc.decompress_first_us; });
  line("decompress by zstd block: whole frame", [](const FaultPath& fp) { return fp.bc.decompress_streamed_us; });
  line("install all pages (UFFDIO_COPY runs, no waiter)", [](const FaultPath& fp) { return fp.bc.install_us; });
  // Isolated: one fault at a time, best of three per block, so a shared machine's noise stays out.
  line("isolated fault, page in slot 0: touch (wake)", [](const FaultPath& fp) { return fp.wake[0].touch_us; });
  line("isolated fault, slot 24: touch (wake)", [](const FaultPath& fp) { return fp.wake[1].touch_us; });
  line("isolated fault, slot 32: touch (wake)", [](const FaultPath& fp) { return fp.wake[2].touch_us; });
  line("isolated fault, slot 63: touch (wake)", [](const FaultPath& fp) { return fp.wake[3].touch_us; });
  line("isolated fault, slot 32: whole block in", [](const FaultPath& fp) { return fp.wake[2].block_us; });
  line("faulting page's slot in its block, p50 (replay)", [&](const FaultPath& fp) { return pct(fp.eng.blocking_slots, 0.5); });
  line("engine: fault -> page in, thread woken  p50",
       [](const FaultPath& fp) { return double(fp.eng.stats.wake_latency.p50_ns) / 1e3; });
  line("engine: fault -> page in, thread woken  p90",
       [](const FaultPath& fp) { return double(fp.eng.stats.wake_latency.p90_ns) / 1e3; });
  line("thread: touch that read a block          p50", [&](const FaultPath& fp) { return pct(fp.eng.blocking_touch_us, 0.5); });
  line("thread: touch that read a block          p90", [&](const FaultPath& fp) { return pct(fp.eng.blocking_touch_us, 0.9); });
  // HandleFault's own time: the whole block for the faults that read it, the faulting page for the joins.
  line("engine: fault served (reads: block in)   p50",
       [](const FaultPath& fp) { return double(fp.eng.stats.blocking_latency.p50_ns) / 1e3; });
  line("engine: read+verify+decompress per block", [&](const FaultPath& fp) { return per_block(fp, fp.eng.stats.read_ns) / 1e3; });
  line("engine: install per block", [&](const FaultPath& fp) { return per_block(fp, fp.eng.stats.install_ns) / 1e3; });
  line("engine: install calls per block", [&](const FaultPath& fp) { return per_block(fp, fp.eng.stats.install_calls); });
  line("blocks read by faults", [](const FaultPath& fp) { return double(fp.eng.stats.blocks_read_demand); });
  line("blocking faults (reads and joins)", [](const FaultPath& fp) { return double(fp.eng.stats.faults_blocking); });
  line("  of which joined a block in flight", [](const FaultPath& fp) { return double(fp.eng.stats.faults_joined); });
  line("stall, all faults (engine), ms", [](const FaultPath& fp) { return double(fp.eng.stats.stall_ns) / 1e6; });
  line("stall, blocking faults (engine), ms",
       [](const FaultPath& fp) { return double(fp.eng.stats.stall_blocking_ns) / 1e6; });
  line("stall, joined faults (engine), ms",
       [](const FaultPath& fp) { return double(fp.eng.stats.stall_joined_ns) / 1e6; });
  line("stall, touching thread (round trips too), ms", [](const FaultPath& fp) { return fp.eng.touch_stall_ms; });
  line("replay total, warm, ms", [](const FaultPath& fp) { return fp.eng.total_s * 1e3; });
  for (const FaultPath& fp : paths) {
    const BlockCosts& k = fp.bc;
    const RestoreEngineStats& e = fp.eng.stats;
    rows.push_back({"fault_path",
                    fp.name,
                    {{"zstd_block_pages", double(fp.cut)},
                     {"frame_pages", double(fp.frames)},
                     {"stream_faults", double(fp.stream)},
                     {"file_bytes", double(fp.ck.file_bytes)},
                     {"stored_kib", k.stored_kib},
                     {"pieces", k.pieces},
                     {"read_cold_us", k.read_cold_us},
                     {"read_warm_us", k.read_warm_us},
                     {"verify_us", k.verify_us},
                     {"decompress_us", k.decompress_us},
                     {"decompress_first_us", k.decompress_first_us},
                     {"decompress_streamed_us", k.decompress_streamed_us},
                     {"install_us", k.install_us},
                     {"slot_p50", pct(fp.eng.blocking_slots, 0.5)},
                     {"isolated_touch_slot0_us", fp.wake[0].touch_us},
                     {"isolated_touch_slot24_us", fp.wake[1].touch_us},
                     {"isolated_touch_slot32_us", fp.wake[2].touch_us},
                     {"isolated_touch_slot63_us", fp.wake[3].touch_us},
                     {"isolated_block_slot32_us", fp.wake[2].block_us},
                     {"wake_p50_us", double(e.wake_latency.p50_ns) / 1e3},
                     {"wake_p90_us", double(e.wake_latency.p90_ns) / 1e3},
                     {"touch_p50_us", pct(fp.eng.blocking_touch_us, 0.5)},
                     {"touch_p90_us", pct(fp.eng.blocking_touch_us, 0.9)},
                     {"block_done_p50_us", double(e.blocking_latency.p50_ns) / 1e3},
                     {"engine_read_us", per_block(fp, e.read_ns) / 1e3},
                     {"engine_install_us", per_block(fp, e.install_ns) / 1e3},
                     {"install_calls_per_block", per_block(fp, e.install_calls)},
                     {"blocks_read_demand", double(e.blocks_read_demand)},
                     {"faults_blocking", double(e.faults_blocking)},
                     {"faults_joined", double(e.faults_joined)},
                     {"stall_ms", double(e.stall_ns) / 1e6},
                     {"stall_blocking_ms", double(e.stall_blocking_ns) / 1e6},
                     {"stall_joined_ms", double(e.stall_joined_ns) / 1e6},
                     {"touch_stall_ms", fp.eng.touch_stall_ms},
                     {"warm_ms", fp.eng.total_s * 1e3}}});
  }
  std::printf("Machine limits\n");
  std::printf("  %-34s %10.2f us\n", "userfaultfd fault, UFFDIO_COPY", uc.fault_copy_us);
  std::printf("  %-34s %10.2f us\n", "userfaultfd fault, UFFDIO_ZEROPAGE", uc.fault_zero_us);
  for (auto [run, us] : uc.copy_us_per_page) {
    std::printf("  UFFDIO_COPY of %3u-page runs         %10.2f us/page\n", run, us);
  }
  std::printf("  %-34s %10.2f GB/s\n", "zstd decompression (raw out)", bc.decompress_gbps);
  std::printf("  %-34s %10.2f GB/s\n", "XXH3 (payload in)", bc.verify_gbps);
  Row limits{"limits",
             "machine",
             {{"fault_copy_us", uc.fault_copy_us},
              {"fault_zero_us", uc.fault_zero_us},
              {"decompress_gbps", bc.decompress_gbps},
              {"xxh3_gbps", bc.verify_gbps}}};
  for (auto [run, us] : uc.copy_us_per_page)
    limits.values.push_back({"copy_us_per_page_run" + std::to_string(run), us});
  rows.push_back(limits);

  // Block size sweep (halite, zstd 3, loader off: every blocking fault is one block the trace needed).
  std::vector<uint32_t> sizes =
      quick ? std::vector<uint32_t>{16, 64, 256} : std::vector<uint32_t>{8, 16, 32, 64, 128, 256};
  if (fault_only) sizes.clear();
  std::printf(
      "\nBlock size (halite layout, zstd 3, loader off). Measured end to end, and modelled from the best-of-3\n"
      "step costs: fault us = uffd round trip + read + verify + decompress + install of one block (warm);\n"
      "model ms = blocking faults x fault us + zero faults x zero-page round trip.\n");
  std::printf("%-6s %8s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "pages", "blocks", "file MiB",
              "blocking", "read MiB", "warm ms", "cold ms", "blk p50", "blk p99", "eager ms", "fault us", "model ms",
              "model cold", "stall ms");
  for (uint32_t bp : sizes) {
    SavedCheckpoint c =
        SaveCheckpoint(image, bytes, dir.File("bp.hlt"), {bp, 3, LayoutPolicy::kHalite, true}, save_trace, va);
    (void)RunReplay(c.path, *trace, Options(false, false, true), false, guest.image);
    ReplayResult w = MedianReplay(c.path, *trace, Options(false), false, runs, guest.image);
    ReplayResult e = MedianReplay(c.path, *trace, Options(false, false, true), false, runs, guest.image);
    double cold_ms = cold_too ? MedianReplay(c.path, *trace, Options(false), true, runs, guest.image).total_s * 1e3 : 0;
    BlockCosts k = MeasureBlockCosts(c.path, quick ? 60 : 150);
    double steps = k.verify_us + k.decompress_us + k.install_us + uc.fault_copy_us;
    double fault_us = k.read_warm_us + steps, fault_cold_us = k.read_cold_us + steps;
    double zero_ms = double(w.stats.faults_zero) * uc.fault_zero_us / 1e3;
    double model_ms = double(w.stats.faults_blocking) * fault_us / 1e3 + zero_ms;
    double model_cold_ms = double(w.stats.faults_blocking) * fault_cold_us / 1e3 + zero_ms;
    std::printf("%-6u %8llu %9.1f %8llu %9.2f %9.2f %9.2f %9.1f %9.1f %9.1f %9.1f %9.2f %9.2f %9.2f\n", bp,
                (unsigned long long)c.blocks, double(c.file_bytes) / 1048576.0,
                (unsigned long long)w.stats.faults_blocking, double(w.stats.bytes_read) / 1048576.0, w.total_s * 1e3,
                cold_ms, double(w.stats.blocking_latency.p50_ns) / 1e3, double(w.stats.blocking_latency.p99_ns) / 1e3,
                e.total_s * 1e3, fault_us, model_ms, model_cold_ms, double(w.stats.stall_ns) / 1e6);
    rows.push_back({"block_size",
                    "block_pages=" + std::to_string(bp),
                    {{"blocks", double(c.blocks)},
                     {"file_bytes", double(c.file_bytes)},
                     {"faults_blocking", double(w.stats.faults_blocking)},
                     {"bytes_read", double(w.stats.bytes_read)},
                     {"warm_ms", w.total_s * 1e3},
                     {"cold_ms", cold_ms},
                     {"blocking_p50_us", double(w.stats.blocking_latency.p50_ns) / 1e3},
                     {"blocking_p99_us", double(w.stats.blocking_latency.p99_ns) / 1e3},
                     {"eager_ms", e.total_s * 1e3},
                     {"fault_us_model", fault_us},
                     {"model_ms", model_ms},
                     {"model_cold_ms", model_cold_ms},
                     {"stall_ms", double(w.stats.stall_ns) / 1e6},
                     {"touch_stall_ms", w.touch_stall_ms}}});
  }

  // zstd level sweep at 64-page blocks.
  std::vector<int> levels = quick ? std::vector<int>{1, 3} : std::vector<int>{1, 3, 6, 9};
  if (fault_only) levels.clear();
  std::printf("\nzstd level (halite layout, 64-page blocks, loader off)\n");
  std::printf("%-6s %9s %9s %10s %9s %9s %9s %10s\n", "level", "file MiB", "save s", "decomp GB/s", "blk p50",
              "warm ms", "cold ms", "eager ms");
  for (int level : levels) {
    SavedCheckpoint c =
        SaveCheckpoint(image, bytes, dir.File("lv.hlt"), {64, level, LayoutPolicy::kHalite, true}, save_trace, va);
    BlockCosts lc = MeasureBlockCosts(c.path, quick ? 50 : 200);
    (void)RunReplay(c.path, *trace, Options(false, false, true), false, guest.image);
    ReplayResult w = MedianReplay(c.path, *trace, Options(false), false, runs, guest.image);
    ReplayResult e = MedianReplay(c.path, *trace, Options(false, false, true), false, runs, guest.image);
    double cold_ms = cold_too ? MedianReplay(c.path, *trace, Options(false), true, runs, guest.image).total_s * 1e3 : 0;
    std::printf("%-6d %9.1f %9.2f %10.2f %9.1f %9.2f %9.2f %10.1f\n", level, double(c.file_bytes) / 1048576.0,
                c.save_seconds, lc.decompress_gbps, double(w.stats.blocking_latency.p50_ns) / 1e3, w.total_s * 1e3,
                cold_ms, e.total_s * 1e3);
    rows.push_back({"level",
                    "level=" + std::to_string(level),
                    {{"file_bytes", double(c.file_bytes)},
                     {"save_s", c.save_seconds},
                     {"decompress_gbps", lc.decompress_gbps},
                     {"blocking_p50_us", double(w.stats.blocking_latency.p50_ns) / 1e3},
                     {"warm_ms", w.total_s * 1e3},
                     {"cold_ms", cold_ms},
                     {"eager_ms", e.total_s * 1e3}}});
  }

  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "table,config,key,value\n";
    for (const auto& r : rows) {
      for (const auto& [k, v] : r.values) f << r.table << ",\"" << r.config << "\"," << k << "," << v << "\n";
    }
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "[\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      f << (i ? ",\n" : "") << "  {\"table\": \"" << rows[i].table << "\", \"config\": \"" << rows[i].config << "\"";
      for (const auto& [k, v] : rows[i].values) f << ", \"" << k << "\": " << v;
      f << "}";
    }
    f << "\n]\n";
  }
  return 0;
}
