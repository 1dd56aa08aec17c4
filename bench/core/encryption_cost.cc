#include "encryption_cost.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include <sodium.h>

#include "codec/aead.h"
#include "halite/checkpoint_reader.h"
#include "halite/checkpoint_writer.h"
#include "halite/encryption.h"
#include "halite/latency_histogram.h"
#include "halite/lazy_memory.h"
#include "halite/restore_engine.h"

namespace halite::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// CPU seconds of the whole process (every thread: compression workers, engine threads, fault handlers).
double CpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "bench_core --encryption: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

struct Variant {
  std::string name;
  std::optional<Cipher> cipher;  // none: unencrypted, the baseline
};

// One variant's measurements in one run.
struct Sample {
  double save_s = 0, save_cpu = 0;
  double staged_s = 0, staged_cpu = 0;  // pages given one by one (PutPage), staged on disk: a live save's path
  double eager_s = 0, eager_cpu = 0;
  double lazy_s = 0, lazy_cpu = 0;
  double fault_p50_us = 0, fault_p99_us = 0;  // to the faulting page's frame (first range reported)
  double block_p50_us = 0;                    // the whole block
  uint64_t file_bytes = 0;
};

const EncryptionKey kKey = [] {
  EncryptionKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(0x26 + 3 * i);
  return k;
}();

ReaderOptions Keys() {
  ReaderOptions o;
  o.keyring = std::make_shared<Keyring>();
  (void)o.keyring->Add(kKey);
  return o;
}

void Save(const Variant& v, const std::string& image, uint64_t raw, const std::string& out, Sample* s) {
  WriterOptions o;  // the defaults: 64-page blocks of 16-page frames, level 3; one worker per CPU
  o.sink.sync = false;
  o.dictionary = DictionaryMode::kOff;
  if (v.cipher) {
    o.encryption_key = kKey;
    o.cipher = *v.cipher;
  }
  auto w = CheckpointWriter::Create(out, o);
  if (!w) Die("create " + out, w.error());
  auto r = (*w)->AddRegion("ram", 0, raw);
  if (!r) Die("region", r.error());
  if (Status st = (*w)->AttachImage(*r, image); !st.ok()) Die("attach", st);
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  auto sum = (*w)->Finish();
  s->save_s = Seconds(t0, Clock::now());
  s->save_cpu = CpuSeconds() - c0;
  if (!sum) Die("save " + out, sum.error());
  s->file_bytes = sum->file_bytes;
}

// A save whose pages come one by one (PutPage), as a live save's do: they are staged on disk first (encrypted,
// for an encrypted checkpoint), then read back to be compressed.
void SaveStaged(const Variant& v, const std::vector<uint8_t>& mem, const std::string& out, Sample* s) {
  WriterOptions o;
  o.sink.sync = false;
  o.dictionary = DictionaryMode::kOff;
  if (v.cipher) {
    o.encryption_key = kKey;
    o.cipher = *v.cipher;
  }
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  auto w = CheckpointWriter::Create(out, o);
  if (!w) Die("create " + out, w.error());
  auto r = (*w)->AddRegion("ram", 0, mem.size());
  if (!r) Die("region", r.error());
  for (uint64_t p = 0; p < mem.size() / 4096; ++p) {
    if (Status st = (*w)->PutPage(*r, p, std::span(mem.data() + p * 4096, 4096)); !st.ok()) Die("put", st);
  }
  auto sum = (*w)->Finish();
  s->staged_s = Seconds(t0, Clock::now());
  s->staged_cpu = CpuSeconds() - c0;
  if (!sum) Die("save " + out, sum.error());
}

// An eager restore without a VMM: open, then every block in restore order read, verified (and decrypted) and
// decompressed, on one thread. Checks the content on request.
void Eager(const std::string& path, const std::vector<uint8_t>* mem, Sample* s) {
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  auto r = CheckpointReader::Open(path, Keys());
  if (!r) Die("open " + path, r.error());
  std::vector<uint8_t> buf;
  for (uint32_t b : (*r)->restore_order()) {
    buf.resize((*r)->blocks()[b].raw_length());
    if (Status st = (*r)->ReadBlock(b, buf); !st.ok()) Die("read", st);
    if (mem) {
      for (const BlockMember& m : (*r)->BlockMembers(b)) {
        if (std::memcmp(buf.data() + size_t(m.slot) * 4096, mem->data() + size_t(m.page) * 4096, 4096) != 0) {
          Die(path, Status::Internal("page " + std::to_string(m.page) + " differs"));
        }
      }
    }
  }
  s->eager_s = Seconds(t0, Clock::now());
  s->eager_cpu = CpuSeconds() - c0;
}

// A lazy restore as a VMM does it: userfaultfd memory, the engine with its loader, one thread touching `trace`.
void Lazy(const std::string& path, const std::vector<uint64_t>& trace, const std::vector<uint8_t>& mem, Sample* s) {
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  auto r = CheckpointReader::Open(path, Keys());
  if (!r) Die("open " + path, r.error());
  auto memory = LazyMemory::Create((*r)->regions());
  if (!memory) Die("lazy memory", memory.error());
  auto engine = RestoreEngine::Create(**r, (*memory)->sink(), RestoreEngineOptions{});
  if (!engine) Die("engine", engine.error());
  if (Status st = (*engine)->Start(); !st.ok()) Die("start", st);
  if (Status st = (*memory)->Serve(**engine); !st.ok()) Die("serve", st);
  const uint8_t* base = (*memory)->base(0);
  uint64_t sum = 0;
  for (uint64_t page : trace) sum += __atomic_load_n(reinterpret_cast<const uint64_t*>(base + page * 4096), __ATOMIC_RELAXED);
  if (Status st = (*engine)->WaitForLoader(); !st.ok()) Die("loader", st);  // every page in: the restore is over
  s->lazy_s = Seconds(t0, Clock::now());
  s->lazy_cpu = CpuSeconds() - c0;
  (*engine)->Stop();
  if (std::memcmp(base, mem.data(), mem.size()) != 0) Die(path, Status::Internal("lazy restore differs"));
  (*memory)->Stop();
  (void)sum;
}

// Faults as the engine serves them: a block read whose progress reports the faulting page's frame first.
void Faults(const std::string& path, Sample* s) {
  auto r = CheckpointReader::Open(path, Keys());
  if (!r) Die("open " + path, r.error());
  std::mt19937 rng(26);
  LatencyHistogram first, whole;
  std::vector<uint8_t> buf;
  for (int i = 0; i < 2000; ++i) {
    const uint32_t b = uint32_t(rng() % (*r)->blocks().size());
    const BlockInfo& info = (*r)->blocks()[b];
    buf.resize(info.raw_length());
    const size_t page = rng() % info.page_count;
    Clock::time_point t_first{};
    const auto t0 = Clock::now();
    Status st = (*r)->ReadBlock(
        b, buf, nullptr,
        [&](size_t begin, size_t end) {
          if (t_first == Clock::time_point{} && begin <= page * 4096 && page * 4096 < end) t_first = Clock::now();
          return Status::Ok();
        },
        page * 4096);
    const auto t1 = Clock::now();
    if (!st.ok()) Die("fault read", st);
    first.Record(uint64_t(Seconds(t0, t_first) * 1e9));
    whole.Record(uint64_t(Seconds(t0, t1) * 1e9));
  }
  s->fault_p50_us = double(first.Summary().p50_ns) / 1e3;
  s->fault_p99_us = double(first.Summary().p99_ns) / 1e3;
  s->block_p50_us = double(whole.Summary().p50_ns) / 1e3;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// libsodium's AES-256-GCM, which libhalite does not use: the measured reason it takes OpenSSL's (the bytes are the
// same; libsodium's needs AES-NI and is the slower here). Printed beside the AEADs libhalite uses, same units.
void SodiumAesThroughput(const std::vector<uint8_t>& plain, const uint8_t (&ad)[56], std::vector<CostRow>* rows) {
  if (sodium_init() < 0 || !crypto_aead_aes256gcm_is_available()) {
    std::printf("%-22s %10s %10s  (libsodium's needs AES-NI and PCLMUL: not here)\n", "AES-256-GCM (libsodium)", "-", "-");
    return;
  }
  std::vector<uint8_t> sealed(plain.size() + crypto_aead_aes256gcm_ABYTES), back(plain.size());
  uint8_t key[crypto_aead_aes256gcm_KEYBYTES] = {}, nonce[crypto_aead_aes256gcm_NPUBBYTES] = {};
  const int n = 2000;
  unsigned long long len = 0;
  double t0 = ThreadCpuSeconds();
  for (int i = 0; i < n; ++i) {
    nonce[0] = uint8_t(i);
    crypto_aead_aes256gcm_encrypt(sealed.data(), &len, plain.data(), plain.size(), ad, sizeof ad, nullptr, nonce, key);
  }
  const double seal = double(plain.size()) * n / (ThreadCpuSeconds() - t0) / 1e9;
  t0 = ThreadCpuSeconds();
  for (int i = 0; i < n; ++i) {
    if (crypto_aead_aes256gcm_decrypt(back.data(), &len, nullptr, sealed.data(), sealed.size(), ad, sizeof ad, nonce,
                                      key) != 0) {
      Die("libsodium aes256gcm", Status::Internal("open failed"));
    }
  }
  const double open = double(plain.size()) * n / (ThreadCpuSeconds() - t0) / 1e9;
  std::printf("%-22s %10.2f %10.2f  (libsodium %s, for comparison: not used)\n", "AES-256-GCM (libsodium)", seal, open,
              sodium_version_string());
  rows->push_back({"aead_gbps", "AES-256-GCM (libsodium, not used)", seal, open, 0, 0});
}

void AeadUnits(size_t unit, std::vector<CostRow>* rows);

// The AEADs alone, one thread: seal and open of 256 KiB units (a 64-page block stored raw) and of 4 KiB units (a
// page of an encrypting writer's staging file, where a unit's fixed cost shows).
void AeadThroughput(std::vector<CostRow>* rows) {
  const std::vector<uint8_t> plain(256 << 10, 0x5a);
  const uint8_t ad[56] = {};
  std::printf("\nThe AEADs alone (AES-256-GCM: OpenSSL's; XChaCha20-Poly1305: libsodium's), one thread, 256 KiB "
              "units: GB per CPU second\n");
  std::printf("%-22s %10s %10s\n", "cipher", "seal", "open");
  AeadUnits(256 << 10, rows);
  std::printf("\nThe same in 4 KiB units (staging pages)\n%-22s %10s %10s\n", "cipher", "seal", "open");
  AeadUnits(4096, rows);
  SodiumAesThroughput(plain, ad, rows);
}

// Seal and open of `unit`-byte units, 512 MiB of them, with each AEAD libhalite uses.
void AeadUnits(size_t unit, std::vector<CostRow>* rows) {
  std::vector<uint8_t> plain(unit, 0x5a), sealed(plain.size() + codec::kAeadTagSize), back(plain.size());
  const uint8_t ad[56] = {};
  for (auto alg : {codec::AeadAlgorithm::kAes256Gcm, codec::AeadAlgorithm::kXChaCha20Poly1305}) {
    if (alg == codec::AeadAlgorithm::kAes256Gcm && !codec::AesGcmAvailable()) continue;
    std::array<uint8_t, 32> key{};
    auto k = codec::AeadKey::Create(alg, key);
    if (!k) Die("aead", k.error());
    codec::AeadNonce nonce{};
    const int n = int((size_t(512) << 20) / unit);
    double t0 = ThreadCpuSeconds();
    for (int i = 0; i < n; ++i) {
      nonce[0] = uint8_t(i);
      (*k)->Seal(nonce, ad, plain, sealed);
    }
    const double seal = double(plain.size()) * n / (ThreadCpuSeconds() - t0) / 1e9;
    t0 = ThreadCpuSeconds();
    for (int i = 0; i < n; ++i) {
      if (!(*k)->Open(nonce, ad, sealed, back)) Die("aead", Status::Internal("open failed"));
    }
    const double open = double(plain.size()) * n / (ThreadCpuSeconds() - t0) / 1e9;
    std::printf("%-22s %10.2f %10.2f\n", codec::AeadAlgorithmName(alg), seal, open);
    rows->push_back({unit == 4096 ? "aead_gbps_4k" : "aead_gbps", codec::AeadAlgorithmName(alg), seal, open, 0, 0});
  }
}

}  // namespace

std::vector<CostRow> RunEncryptionCost(const std::string& image, const std::vector<uint8_t>& mem,
                                       const std::string& dir, int runs) {
  std::vector<CostRow> rows;
  std::vector<Variant> variants = {{"plain (baseline)", std::nullopt}};
  if (codec::AesGcmAvailable()) variants.push_back({"AES-256-GCM", Cipher::kAes256Gcm});
  variants.push_back({"XChaCha20-Poly1305", Cipher::kXChaCha20Poly1305});
  const bool lazy = LazyMemory::Probe().ok();
  std::mt19937 rng(7);
  std::vector<uint64_t> trace(20000);
  for (auto& p : trace) p = rng() % (mem.size() / 4096);
  const double raw = double(mem.size());
  std::map<std::string, std::vector<Sample>> samples;
  for (int run = 0; run < runs; ++run) {
    for (const Variant& v : variants) {  // interleaved: a loaded machine slows every variant alike
      const std::string path = dir + "/enc-" + std::to_string(&v - variants.data()) + ".hlt";
      Sample s;
      Save(v, image, mem.size(), path, &s);
      SaveStaged(v, mem, path + ".staged", &s);
      Eager(path, run == 0 ? &mem : nullptr, &s);
      if (lazy) Lazy(path, trace, mem, &s);
      Faults(path, &s);
      samples[v.name].push_back(s);
    }
  }
  std::printf("\nEncryption (issue 26): %.0f MiB image, 64-page blocks of 16-page frames, level 3, %u CPUs; %d runs "
              "each, interleaved, medians; ratio = encrypted / plain\n",
              raw / 1048576, std::thread::hardware_concurrency(), runs);
  std::printf("%-20s %9s %8s %9s %7s | %8s %7s %7s | %8s %7s %7s | %8s %7s %8s\n", "variant", "save s", "GB/s",
              "GB/cpu-s", "ratio", "eager s", "ratio", "cpu", "lazy s", "ratio", "cpu", "fault50", "fault99",
              "block50");
  const auto& base = samples[variants[0].name];
  auto med = [](const std::vector<Sample>& v, double Sample::*f) {
    std::vector<double> x;
    for (const auto& s : v) x.push_back(s.*f);
    return Median(x);
  };
  const double base_save = med(base, &Sample::save_s), base_eager = med(base, &Sample::eager_s);
  const double base_lazy = med(base, &Sample::lazy_s);
  const double base_eager_cpu = med(base, &Sample::eager_cpu), base_lazy_cpu = med(base, &Sample::lazy_cpu);
  for (const Variant& v : variants) {
    const auto& s = samples[v.name];
    const double save = med(s, &Sample::save_s), eager = med(s, &Sample::eager_s), lazy_s = med(s, &Sample::lazy_s);
    const double cpu = med(s, &Sample::save_cpu);
    const double eager_cpu = med(s, &Sample::eager_cpu), lazy_cpu = med(s, &Sample::lazy_cpu);
    std::printf("%-20s %9.3f %8.2f %9.2f %7.3f | %8.3f %7.3f %7.3f | %8.3f %7.3f %7.3f | %8.1f %7.1f %8.1f\n",
                v.name.c_str(), save, raw / save / 1e9, raw / cpu / 1e9, save / base_save, eager, eager / base_eager,
                eager_cpu / base_eager_cpu, lazy_s, base_lazy > 0 ? lazy_s / base_lazy : 0.0,
                base_lazy_cpu > 0 ? lazy_cpu / base_lazy_cpu : 0.0, med(s, &Sample::fault_p50_us),
                med(s, &Sample::fault_p99_us), med(s, &Sample::block_p50_us));
    rows.push_back({"encryption_save", v.name, save, raw / save / 1e9, raw / cpu / 1e9, save / base_save});
    rows.push_back({"encryption_eager_restore", v.name, eager, eager / base_eager, med(s, &Sample::eager_cpu), 0});
    rows.push_back({"encryption_lazy_restore", v.name, lazy_s, base_lazy > 0 ? lazy_s / base_lazy : 0.0,
                    med(s, &Sample::lazy_cpu), 0});
    rows.push_back({"encryption_fault_us", v.name, med(s, &Sample::fault_p50_us), med(s, &Sample::fault_p99_us),
                    med(s, &Sample::block_p50_us), double(s.front().file_bytes)});
  }
  std::printf("\nSaves whose pages come one by one (PutPage: staged on disk, encrypted when the checkpoint is), as live "
              "saves' do\n%-20s %9s %8s %9s %7s %7s\n", "variant", "save s", "GB/s", "GB/cpu-s", "ratio", "cpu");
  const double base_staged = med(base, &Sample::staged_s), base_staged_cpu = med(base, &Sample::staged_cpu);
  for (const Variant& v : variants) {
    const auto& s = samples[v.name];
    const double t = med(s, &Sample::staged_s), c = med(s, &Sample::staged_cpu);
    std::printf("%-20s %9.3f %8.2f %9.2f %7.3f %7.3f\n", v.name.c_str(), t, raw / t / 1e9, raw / c / 1e9,
                t / base_staged, c / base_staged_cpu);
    rows.push_back({"encryption_staged_save", v.name, t, raw / t / 1e9, raw / c / 1e9, c / base_staged_cpu});
  }
  std::printf("(GB/s: raw pages per wall second; GB/cpu-s: per CPU second of the whole process, which a loaded\n"
              "machine does not inflate; cpu: the ratio of CPU seconds; eager: open + every block on one thread; lazy: open, userfaultfd and the engine\n"
              "with its loader, %zu random touches, until every page is in%s; fault50/99: us to the faulting page's\n"
              "frame, block50: the whole block, warm, random pages)\n",
              trace.size(), lazy ? "" : " [not run: no userfaultfd here]");
  AeadThroughput(&rows);
  return rows;
}

}  // namespace halite::bench
