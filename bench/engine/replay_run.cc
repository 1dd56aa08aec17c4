#include "replay_run.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "halite/checkpoint_reader.h"
#include "halite/lazy_memory.h"

namespace halite::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "bench_engine: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

}  // namespace

bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return bool(f);
}

SavedCheckpoint SaveCheckpoint(const std::string& image, uint64_t bytes, const std::string& path, const SaveSpec& spec,
                               const std::string& access_trace, const std::string& va_hints, const ChainSpec& chain) {
  WriterOptions o;
  o.block_pages = spec.block_pages;
  o.level = spec.level;
  o.policy = spec.policy;
  o.zstd_block_pages = spec.zstd_block_pages;
  o.frame_pages = spec.frame_pages;
  o.keep_host_pages_whole = spec.keep_host_pages_whole;
  // The dictionary is off so every checkpoint of the comparison is built the same way (on these images `auto`
  // measures no gain and turns it off anyway).
  o.dictionary = DictionaryMode::kOff;
  o.sink.sync = false;
  o.parent = chain.parent;
  o.page_hashes = chain.page_hashes;
  o.parent_rewrite_fraction = chain.parent_rewrite_fraction;
  auto t0 = Clock::now();
  auto w = CheckpointWriter::Create(path, o);
  if (!w) Die("create " + path, w.error());
  auto region = (*w)->AddRegion("ram", 0, bytes, spec.host_page_size);
  if (!region) Die("region", region.error());
  Status s = (*w)->AttachImage(*region, image);
  if (!s.ok()) Die("attach", s);
  if (spec.hints) {
    auto acc = ParseAccessTrace(access_trace, "save.trace", (*w)->regions());
    if (!acc) Die("access trace", acc.error());
    auto va = ParseVaHints(va_hints, "va.hints", (*w)->regions());
    if (!va) Die("va hints", va.error());
    if (!(s = (*w)->AddAccessedPages(*acc)).ok() || !(s = (*w)->AddVaRuns(*va)).ok()) Die("hints", s);
  }
  auto sum = (*w)->Finish();
  if (!sum) Die("save " + path, sum.error());
  return {path, sum->file_bytes, sum->blocks, std::chrono::duration<double>(Clock::now() - t0).count()};
}

ReplayResult RunReplay(const std::string& ckpt, const std::vector<TraceAccess>& trace, const RestoreEngineOptions& eo,
                       bool cold, const std::vector<uint8_t>& expected) {
  if (cold) DropCaches();
  ReplayResult res;
  auto t0 = Clock::now();
  auto reader = CheckpointReader::Open(ckpt);
  if (!reader) Die("open " + ckpt, reader.error());
  auto memory = LazyMemory::Create((*reader)->regions());
  if (!memory) Die("lazy memory", memory.error());
  auto engine = RestoreEngine::Create(**reader, (*memory)->sink(), eo);
  if (!engine) Die("engine", engine.error());
  Status s = (*engine)->Start();
  if (!s.ok()) Die("start", s);
  s = (*memory)->Serve(**engine);
  if (!s.ok()) Die("serve", s);
  uint8_t* base = (*memory)->base(0);
  std::vector<bool> seen((*reader)->total_pages());
  std::vector<float> touch_us(eo.record_timeline ? trace.size() : 0);
  for (size_t i = 0; i < trace.size(); ++i) {
    uint8_t* p = base + trace[i].page.page * 4096;
    const bool missing = !(*engine)->IsInstalled(trace[i].page);
    auto t_touch = Clock::now();
    if (trace[i].write) {
      __atomic_fetch_add(reinterpret_cast<uint64_t*>(p), 0, __ATOMIC_RELAXED);
    } else {
      (void)__atomic_load_n(reinterpret_cast<uint64_t*>(p), __ATOMIC_RELAXED);
    }
    const auto t_done = Clock::now();
    if (missing) {
      res.touch_stall_ms += std::chrono::duration<double, std::milli>(t_done - t_touch).count();
      ++res.missing_touches;
    }
    if (!touch_us.empty()) touch_us[i] = std::chrono::duration<float, std::micro>(t_done - t_touch).count();
    if (i == 0) res.first_access_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!seen[trace[i].page.page]) {
      seen[trace[i].page.page] = true;
      res.first_touches.push_back(trace[i].page);
    }
  }
  res.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i = 0; i < 1000; ++i) {  // the last fault's handler may still be counting
    auto ms = (*memory)->Stats();
    if (ms.faults_done == ms.faults) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  res.stats = (*engine)->Stats();
  if (eo.record_timeline) {
    // Per block, the first fault that needed it (the earliest blocking fault: the one that read it; later ones
    // joined), then that page's first touch.
    std::map<uint32_t, EngineEvent> reading;
    for (const EngineEvent& e : (*engine)->Timeline()) {
      if (e.kind != EngineEventKind::kFaultBlocking || e.page.region != 0) continue;
      auto [it, fresh] = reading.emplace(e.block, e);
      if (!fresh && e.time_ns < it->second.time_ns) it->second = e;
    }
    std::vector<bool> read_here((*reader)->total_pages());
    for (const auto& [b, e] : reading) {
      read_here[e.page.page] = true;
      res.blocking_slots.push_back((*reader)->Locate(e.page.page).slot_in_block);
    }
    std::vector<bool> touched((*reader)->total_pages());
    for (size_t i = 0; i < trace.size(); ++i) {
      uint64_t pg = trace[i].page.page;
      if (!touched[pg] && read_here[pg]) res.blocking_touch_us.push_back(touch_us[i]);
      touched[pg] = true;
    }
  }
  (*engine)->Stop();
  for (const PageRef& p : res.first_touches) {
    if (std::memcmp(base + p.page * 4096, expected.data() + p.page * 4096, 4096) != 0) ++res.mismatches;
  }
  (*memory)->Stop();
  if (!(*memory)->status().ok()) Die("replay of " + ckpt, (*memory)->status());
  return res;
}

}  // namespace halite::bench
