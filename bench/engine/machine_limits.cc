#include "machine_limits.h"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "codec/hashing.h"
#include "codec/zstd_codec.h"
#include "engine/userfaultfd.h"
#include "halite/checkpoint_reader.h"
#include "halite/lazy_memory.h"
#include "halite/restore_engine.h"
#include "replay_run.h"

namespace halite::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPage = 4096;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "bench_engine: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

// Touches `pages` missing pages one after another while a handler thread answers each fault; returns us/fault.
double FaultRoundTrip(uint64_t pages, bool zero) {
  auto u = engine::OpenUserfaultfd(false);
  if (!u) Die("userfaultfd", u.error());
  int fd = u->fd;
  uint64_t len = pages * kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  bool zp = false;
  Status s = engine::UffdRegister(fd, m, len, &zp);
  if (!s.ok()) Die("register", s);
  std::atomic<bool> stop{false};
  std::thread handler([&] {
    std::vector<uint8_t> src(kPage, 0x42);
    pollfd p{fd, POLLIN, 0};
    while (!stop.load()) {
      if (poll(&p, 1, 10) <= 0) continue;
      auto msg = engine::UffdRead(fd);
      if (!msg || msg->kind != engine::UffdMessage::kPageFault) continue;
      uint64_t a = msg->address & ~(kPage - 1);
      if (zero) {
        engine::UffdZeroPage(fd, a, kPage);
      } else {
        engine::UffdCopy(fd, a, src.data(), kPage);
      }
    }
  });
  auto* bytes = static_cast<volatile uint8_t*>(m);
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < pages; ++i) (void)bytes[i * kPage];
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(pages);
  stop = true;
  handler.join();
  engine::UffdUnregister(fd, m, len);
  munmap(m, len);
  close(fd);
  return us;
}

}  // namespace

UffdCosts MeasureUffd(uint64_t faults) {
  UffdCosts c;
  // Best of three: the cost when nothing else interferes (this machine may be shared).
  c.fault_copy_us = c.fault_zero_us = 1e18;
  for (int rep = 0; rep < 3; ++rep) {
    c.fault_copy_us = std::min(c.fault_copy_us, FaultRoundTrip(faults, false));
    c.fault_zero_us = std::min(c.fault_zero_us, FaultRoundTrip(faults, true));
  }
  auto u = engine::OpenUserfaultfd(false);
  if (!u) Die("userfaultfd", u.error());
  std::vector<uint8_t> src(256 * kPage, 0x17);
  for (uint32_t run : {1u, 4u, 16u, 64u, 256u}) {
    double best = 1e18;
    for (int rep = 0; rep < 3; ++rep) {
      const uint64_t pages = 16384;
      uint64_t len = pages * kPage;
      void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      bool zp = false;
      Status s = engine::UffdRegister(u->fd, m, len, &zp);
      if (!s.ok()) Die("register", s);
      auto t0 = Clock::now();
      for (uint64_t p = 0; p + run <= pages; p += run) {
        engine::UffdCopy(u->fd, reinterpret_cast<uint64_t>(m) + p * kPage, src.data(), run * kPage);
      }
      best = std::min(best,
                      std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(pages / run * run));
      engine::UffdUnregister(u->fd, m, len);
      munmap(m, len);
    }
    c.copy_us_per_page.emplace_back(run, best);
  }
  close(u->fd);
  return c;
}

BlockCosts MeasureBlockCosts(const std::string& ckpt, size_t sample) {
  BlockCosts c;
  auto reader = CheckpointReader::Open(ckpt);
  if (!reader) Die("open", reader.error());
  const CheckpointReader& r = **reader;
  auto file = OpenLocalFile(ckpt);
  if (!file) Die("open", file.error());
  std::vector<uint32_t> blocks(r.blocks().size());
  for (uint32_t b = 0; b < blocks.size(); ++b) blocks[b] = b;
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(3));
  blocks.resize(std::min(sample, blocks.size()));
  c.blocks = blocks.size();

  std::vector<std::vector<uint8_t>> payloads(blocks.size());
  std::vector<double> cold, warm, verify, decompress, install, first_piece, streamed;
  uint64_t pieces = 0;
  DropCaches();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockInfo& b = r.blocks()[blocks[i]];
    payloads[i].resize(b.stored_length);
    auto t0 = Clock::now();
    Status s = (*file)->ReadAt(b.offset, payloads[i]);
    if (!s.ok()) Die("read", s);
    cold.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  codec::Decompressor dec;
  std::vector<uint8_t> raw;
  uint64_t raw_total = 0, stored_total = 0;
  double verify_s = 0, decompress_s = 0;
  // Each step three times per block, keeping the fastest: what the step costs when nothing else interferes
  // (this machine may be shared), then the median over the blocks.
  using Us = std::chrono::duration<double, std::micro>;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockInfo& b = r.blocks()[blocks[i]];
    double best[3] = {1e18, 1e18, 1e18};
    raw.resize(b.raw_length());
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = Clock::now();
      Status s = (*file)->ReadAt(b.offset, payloads[i]);
      if (!s.ok()) Die("read", s);
      auto t1 = Clock::now();
      volatile uint64_t h = codec::Xxh3_64(payloads[i], blocks[i]);
      (void)h;
      auto t2 = Clock::now();
      if (b.framed()) {
        s = dec.DecompressFrames(payloads[i], nullptr, raw, 0, {});
        if (!s.ok()) Die("decompress", s);
      } else if (b.compressed()) {
        s = dec.DecompressExact(payloads[i], nullptr, raw);
        if (!s.ok()) Die("decompress", s);
      } else {
        std::memcpy(raw.data(), payloads[i].data(), raw.size());
      }
      auto t3 = Clock::now();
      best[0] = std::min(best[0], Us(t1 - t0).count());
      best[1] = std::min(best[1], Us(t2 - t1).count());
      best[2] = std::min(best[2], Us(t3 - t2).count());
    }
    // Block by block, as a streamed fault decodes: the first piece, and the whole frame.
    double best_first = 1e18, best_streamed = 1e18;
    for (int rep = 0; rep < 3 && b.compressed(); ++rep) {
      uint64_t n = 0;
      double first = 0;
      auto t0 = Clock::now();
      auto piece = [&] {
        if (n++ == 0) first = Us(Clock::now() - t0).count();
        return Status::Ok();
      };
      Status s = b.framed() ? dec.DecompressFrames(payloads[i], nullptr, raw, 0, [&](size_t, size_t) { return piece(); })
                            : dec.DecompressExact(payloads[i], nullptr, raw, [&](size_t) { return piece(); });
      double all = Us(Clock::now() - t0).count();
      if (!s.ok()) Die("decompress", s);
      best_first = std::min(best_first, first);
      best_streamed = std::min(best_streamed, all);
      if (rep == 0) pieces += n;
    }
    if (b.compressed()) {
      first_piece.push_back(best_first);
      streamed.push_back(best_streamed);
    }
    warm.push_back(best[0]);
    verify.push_back(best[1]);
    decompress.push_back(best[2]);
    verify_s += best[1] / 1e6;
    decompress_s += best[2] / 1e6;
    raw_total += b.raw_length();
    stored_total += b.stored_length;
  }
  // Install: the block's pages into fresh userfaultfd memory, in runs of adjacent pages, as the engine does.
  auto memory = LazyMemory::Create(r.regions());
  if (!memory) Die("lazy memory", memory.error());
  PageSink& sink = (*memory)->sink();
  uint64_t calls = 0, pages = 0;
  std::vector<uint8_t> staging;
  for (uint32_t blk : blocks) {
    auto members = r.BlockMembers(blk);
    std::vector<uint64_t> ps;
    for (const auto& m : members) ps.push_back(m.page);
    std::sort(ps.begin(), ps.end());
    raw.assign(r.blocks()[blk].raw_length(), 0x5a);
    auto t0 = Clock::now();
    std::vector<PageInstall> runs;
    size_t staged = 0;
    for (size_t i = 0; i < ps.size();) {
      size_t j = i + 1;
      while (j < ps.size() && ps[j] == ps[j - 1] + 1) ++j;
      runs.push_back(PageInstall{r.PageOf(ps[i]), j - i, {}});
      staged = std::max(staged, j - i);
      i = j;
    }
    staging.resize(staged * kPage);
    for (auto& run : runs) run.data = std::span<const uint8_t>(staging.data(), run.count * kPage);
    size_t done = 0;
    Status s = sink.Install(runs, InstallPriority::kUrgent, &done);
    if (!s.ok()) Die("install", s);
    calls += runs.size();
    install.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    pages += ps.size();
  }
  (*memory)->Stop();
  c.read_cold_us = Median(cold);
  c.read_warm_us = Median(warm);
  c.verify_us = Median(verify);
  c.decompress_us = Median(decompress);
  c.decompress_first_us = first_piece.empty() ? 0 : Median(first_piece);
  c.decompress_streamed_us = streamed.empty() ? 0 : Median(streamed);
  c.pieces = streamed.empty() ? 0 : double(pieces) / double(streamed.size());
  c.install_us = Median(install);
  c.pages_per_install_call = calls ? double(pages) / double(calls) : 0;
  c.stored_kib = double(stored_total) / double(blocks.size()) / 1024;
  c.raw_kib = double(raw_total) / double(blocks.size()) / 1024;
  c.decompress_gbps = decompress_s > 0 ? double(raw_total) / decompress_s / 1e9 : 0;
  c.verify_gbps = verify_s > 0 ? double(stored_total) / verify_s / 1e9 : 0;
  return c;
}

FaultToWake MeasureFaultToWake(const std::string& ckpt, size_t sample, bool stream, double slot_fraction) {
  auto reader = CheckpointReader::Open(ckpt);
  if (!reader) Die("open", reader.error());
  const CheckpointReader& r = **reader;
  std::vector<uint32_t> blocks;
  for (uint32_t b = 0; b < r.blocks().size(); ++b) {
    if (r.blocks()[b].compressed() && r.BlockMembers(b).size() == r.blocks()[b].page_count) blocks.push_back(b);
  }
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(5));
  blocks.resize(std::min(sample, blocks.size()));
  std::vector<double> touch, block;
  RestoreEngineOptions eo;
  eo.background_loader = false;
  eo.stream_faults = stream;
  eo.record_timeline = true;
  for (uint32_t b : blocks) {
    const auto members = r.BlockMembers(b);
    const uint64_t g = members[std::min(members.size() - 1, size_t(slot_fraction * double(members.size())))].page;
    const PageRef ref = r.PageOf(g);
    double best_touch = 1e18, best_block = 1e18;
    // Another block's fault first, so the one handler thread has its buffers and zstd context (a restore's
    // handlers live long; a fresh thread's first block pays for allocating them).
    const uint32_t other = b == blocks[0] ? blocks.back() : blocks[0];
    const PageRef warm = r.PageOf(r.BlockMembers(other)[0].page);
    LazyMemoryOptions mo;
    mo.handler_threads = 1;
    for (int rep = 0; rep < 3; ++rep) {
      auto memory = LazyMemory::Create(r.regions(), mo);
      if (!memory) Die("lazy memory", memory.error());
      auto engine = RestoreEngine::Create(r, (*memory)->sink(), eo);
      if (!engine) Die("engine", engine.error());
      Status s = (*engine)->Start();
      if (s.ok()) s = (*memory)->Serve(**engine);
      if (!s.ok()) Die("serve", s);
      (void)*static_cast<volatile uint8_t*>((*memory)->base(warm.region) + warm.page * kPage);
      for (int i = 0; i < 10000; ++i) {
        auto ms = (*memory)->Stats();
        if (ms.faults_done == ms.faults) break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      volatile uint8_t* p = (*memory)->base(ref.region) + ref.page * kPage;
      auto t0 = Clock::now();
      (void)*p;
      best_touch = std::min(best_touch, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      for (int i = 0; i < 10000; ++i) {  // the handler may still be installing the rest of the block
        auto ms = (*memory)->Stats();
        if (ms.faults_done == ms.faults) break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      // The measured fault's own service time, from the timeline (the warm-up fault is in it too).
      double this_block = 0;
      for (const EngineEvent& e : (*engine)->Timeline()) {
        if (e.kind == EngineEventKind::kFaultBlocking && e.page == ref) this_block = double(e.latency_ns) / 1e3;
      }
      best_block = std::min(best_block, this_block);
      (*memory)->Stop();
    }
    touch.push_back(best_touch);
    block.push_back(best_block);
  }
  return {Median(touch), Median(block)};
}

}  // namespace halite::bench
