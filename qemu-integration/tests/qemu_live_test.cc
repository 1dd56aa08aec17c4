// Save and restore against a real QEMU 7.2 (TCG, SeaBIOS only, no guest kernel needed).
//
//   qemu_live_test save | live_save | eager | lazy | size_mismatch | killed_mid_restore
//
// The source VM gets 4 MiB of recognisable data at guest-physical 8 MiB (a `loader` device fills it at reset);
// destinations are started without it, so the data can only come from the restore. Exit 0 pass, 1 fail,
// 77 skipped (reason printed). Pages of the saved stream are kept in memory (the checkpoint format replaces that).
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_migration_control.h"
#include "halite/qemu/qemu_session.h"

using namespace halite;
using namespace halite::qemu;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kGuestRam = 64ull << 20;
constexpr uint64_t kPatternAddr = 8ull << 20;
constexpr uint64_t kPatternSize = 4ull << 20;
// Legacy VGA/ROM hole of a pc machine: guest-physical reads there do not see pc.ram.
constexpr uint64_t kHoleStart = 0xa0000, kHoleEnd = 0x100000;

int g_failures = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
      ++g_failures;                                                              \
    }                                                                            \
  } while (0)
#define CHECK_OK(expr)                                                                    \
  do {                                                                                    \
    ::halite::Status s_ = (expr);                                                         \
    if (!s_.ok()) {                                                                       \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      ++g_failures;                                                                       \
    }                                                                                     \
  } while (0)

template <typename T>
T Must(Result<T> r, const char* what) {
  if (!r.has_value()) {
    fprintf(stderr, "FATAL: %s: %s\n", what, r.error().ToString().c_str());
    exit(1);
  }
  return std::move(r).value();
}

[[noreturn]] void Skip(const std::string& why) {
  printf("SKIP: %s\n", why.c_str());
  fflush(stdout);
  exit(77);
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Pages of the saved stream, in memory; also the page source for restores.
class MemoryPageStore : public MigrationStreamHandler, public RestorePageSource {
 public:
  Status OnRamBlocks(const std::vector<RamBlockInfo>& blocks) override {
    blocks_ = blocks;
    pages_.assign(blocks.size(), {});
    have_.assign(blocks.size(), {});
    for (size_t i = 0; i < blocks.size(); ++i) {
      pages_[i].resize(blocks[i].page_count());
      have_[i].assign(blocks[i].page_count(), 0);
    }
    return Status::Ok();
  }
  Status OnPage(const PageRecord& r) override {
    if (have_[r.id.block][r.id.page]) return Status::Internal("page delivered twice");
    have_[r.id.block][r.id.page] = 1;
    if (r.is_zero && r.fill != 0) {
      pages_[r.id.block][r.id.page].assign(kTargetPageSize, static_cast<char>(r.fill));
    } else if (!r.is_zero) {
      pages_[r.id.block][r.id.page].assign(reinterpret_cast<const char*>(r.data), kTargetPageSize);
    }
    return Status::Ok();
  }
  Status ReadPage(PageId id, uint8_t* out, bool* zero) override {
    if (slow_every_ > 0 && ++reads_ % slow_every_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!have_[id.block][id.page]) return Status::Internal("page never saved");
    if (sent_.size() != pages_.size()) {
      sent_.assign(pages_.size(), {});
      for (size_t i = 0; i < pages_.size(); ++i) sent_[i].assign(pages_[i].size(), 0);
    }
    if (sent_[id.block][id.page]++) return Status::Internal("page read twice by the restore");
    const std::string& d = pages_[id.block][id.page];
    *zero = d.empty();
    if (!d.empty()) memcpy(out, d.data(), kTargetPageSize);
    return Status::Ok();
  }
  void OnPageRequested(PageId page) override { requested_.push_back(page); }

  const std::string& Page(uint32_t block, uint64_t page) const { return pages_[block][page]; }
  const std::vector<RamBlockInfo>& blocks() const { return blocks_; }
  const std::vector<PageId>& requested() const { return requested_; }
  void ResetRestore() {
    sent_.clear();
    requested_.clear();
    reads_ = 0;
  }
  void set_slow_every(uint64_t n) { slow_every_ = n; }

 private:
  std::vector<RamBlockInfo> blocks_;
  std::vector<std::vector<std::string>> pages_;
  std::vector<std::vector<uint8_t>> have_;
  std::vector<std::vector<uint8_t>> sent_;
  std::vector<PageId> requested_;
  uint64_t slow_every_ = 0;
  uint64_t reads_ = 0;
};

struct Env {
  std::string dir;
  std::string pattern_path;
  std::string pattern;
};

std::string g_env_dir;  // removed at exit, whatever path the scenario took (skip, fatal error, pass)

void CleanEnv() {
  if (!g_env_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(g_env_dir, ec);
  }
}

Env MakeEnv() {
  Env e;
  char templ[] = "/tmp/halite-live-XXXXXX";
  if (mkdtemp(templ) == nullptr) {
    perror("mkdtemp");
    exit(1);
  }
  e.dir = templ;
  g_env_dir = e.dir;
  atexit(CleanEnv);
  // Recognisable data: every 5th page zero, every 7th page a repeated byte, the rest pseudo-random with the page
  // number stamped at the start.
  std::mt19937_64 rng(42);
  e.pattern.resize(kPatternSize);
  for (uint64_t p = 0; p < kPatternSize / 4096; ++p) {
    char* pg = e.pattern.data() + p * 4096;
    if (p % 5 == 0) {
      memset(pg, 0, 4096);
    } else if (p % 7 == 0) {
      memset(pg, static_cast<int>(p & 0xff) | 1, 4096);
    } else {
      for (int i = 0; i < 4096; i += 8) {
        const uint64_t v = rng();
        memcpy(pg + i, &v, 8);
      }
      memcpy(pg, &p, sizeof(p));
    }
  }
  e.pattern_path = e.dir + "/pattern.bin";
  std::ofstream(e.pattern_path, std::ios::binary).write(e.pattern.data(), static_cast<std::streamsize>(e.pattern.size()));
  return e;
}


std::vector<std::string> MachineArgs(const std::string& mem) {
  return {"-machine", "pc", "-m", mem, "-accel", "tcg", "-cpu", "qemu64", "-nodefaults", "-nographic"};
}

std::unique_ptr<QemuProcess> Launch(std::vector<std::string> args, bool incoming, const std::string& what) {
  QemuLaunchOptions o;
  o.args = std::move(args);
  o.incoming_defer = incoming;
  auto p = QemuProcess::Start(o);
  if (!p.has_value()) {
    fprintf(stderr, "FATAL: starting %s QEMU: %s\n", what.c_str(), p.error().ToString().c_str());
    exit(1);
  }
  return std::move(p).value();
}

// The source side shared by every scenario: boot SeaBIOS with the pattern loaded, stop, save.
struct Saved {
  SavedVmState state;
  MemoryPageStore store;
  SaveReport report;
  std::string memory;     // guest-physical [0, 64 MiB) of the stopped source
  std::string registers;  // `info registers` of the stopped source
  std::vector<RamBlockInfo> source_blocks;
  double save_ms = 0;
};

std::unique_ptr<Saved> SaveSource(const Env& env) {
  auto saved = std::make_unique<Saved>();
  std::vector<std::string> args = MachineArgs("64M");
  args.insert(args.end(), {"-device", "loader,file=" + env.pattern_path + ",addr=" + std::to_string(kPatternAddr) +
                                          ",force-raw=on"});
  auto src = Launch(args, false, "source");
  auto qmp = src->TakeQmp();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let SeaBIOS run a little
  saved->source_blocks = Must(QueryRamBlocks(*qmp), "info ramblock on the source");
  SaveOptions so;
  so.then = SaveOptions::Then::kLeaveStopped;
  const auto t0 = Clock::now();
  saved->state = Must(SaveFromQemu(*qmp, saved->store, so, &saved->report), "SaveFromQemu");
  saved->save_ms = Ms(Clock::now() - t0);
  saved->memory = Must(ReadGuestMemory(*qmp, 0, kGuestRam, env.dir), "pmemsave on the source");
  saved->registers = Must(qmp->HumanMonitorCommand("info registers"), "info registers on the source");
  return saved;
}

// Compares destination memory with the saved source; returns the differing page addresses.
std::vector<uint64_t> DiffPages(const std::string& a, const std::string& b, uint64_t from, uint64_t to) {
  std::vector<uint64_t> out;
  for (uint64_t off = from; off < to; off += 4096) {
    if (memcmp(a.data() + off, b.data() + off, 4096) != 0) out.push_back(off);
  }
  return out;
}

bool HaveUserfaultfd() {
  const long fd = syscall(SYS_userfaultfd, O_CLOEXEC);
  if (fd < 0) return false;
  close(static_cast<int>(fd));
  return true;
}

int ScenarioSave(const Env& env) {
  auto saved = SaveSource(env);
  const SavedVmState& st = saved->state;
  const SaveReport& rep = saved->report;
  printf("save: %.1f ms, %llu stream bytes, %llu page records (%llu data, %llu zero), %zu blocks, device state %zu "
         "bytes, vmdesc %zu bytes\n",
         saved->save_ms, (unsigned long long)rep.stream.bytes, (unsigned long long)rep.stream.page_records,
         (unsigned long long)rep.stream.data_pages, (unsigned long long)rep.stream.zero_pages, st.ram_blocks.size(),
         st.device_state.size(), st.vmdesc.size());
  // Every page exactly once.
  CHECK(rep.stream.duplicate_pages == 0);
  CHECK(rep.missing_pages == 0);
  CHECK(rep.stream.page_records == st.total_pages());
  CHECK(rep.out_of_order_pages.empty());  // stopped guest: one straight scan
  CHECK(rep.stream.ram_end_seen);
  // The block list matches `info ramblock` (names, used lengths, and the page sizes SaveFromQemu added).
  CHECK(st.ram_blocks.size() == saved->source_blocks.size());
  for (const auto& q : saved->source_blocks) {
    const int i = st.FindBlock(q.name);
    CHECK(i >= 0);
    if (i < 0) continue;
    printf("  block %-24s used %#10llx page size %llu\n", q.name.c_str(), (unsigned long long)q.used_length,
           (unsigned long long)q.page_size);
    CHECK(st.ram_blocks[i].used_length == q.used_length);
    CHECK(st.ram_blocks[i].page_size == q.page_size);
  }
  CHECK(st.machine_type == "pc-i440fx-7.2");
  // Device state captured: starts with a FULL section; VMDESC is JSON naming devices.
  CHECK(!st.device_state.empty() && static_cast<uint8_t>(st.device_state[0]) == kTagSectionFull);
  auto vmdesc = Json::Parse(st.vmdesc, "vmdesc");
  CHECK(vmdesc.has_value() && vmdesc->Find("devices") != nullptr && vmdesc->Find("devices")->items().size() > 5);
  // Page contents: pc.ram equals guest-physical memory (outside the ROM hole), the pattern is where it was loaded.
  const int ram = st.FindBlock("pc.ram");
  CHECK(ram >= 0 && st.ram_blocks[ram].used_length == kGuestRam);
  uint64_t bad = 0;
  for (uint64_t off = 0; off < kGuestRam; off += 4096) {
    if (off >= kHoleStart && off < kHoleEnd) continue;
    const std::string& pg = saved->store.Page(ram, off / 4096);
    const bool same = pg.empty() ? saved->memory.compare(off, 4096, std::string(4096, '\0')) == 0
                                 : saved->memory.compare(off, 4096, pg) == 0;
    if (!same) ++bad;
  }
  CHECK(bad == 0);
  CHECK(saved->memory.compare(kPatternAddr, kPatternSize, env.pattern) == 0);
  // Round trip of the non-RAM state through the checkpoint blob.
  auto back = DecodeSavedVmState(EncodeSavedVmState(st));
  CHECK(back.has_value() && back->device_state == st.device_state && back->ram_blocks == st.ram_blocks);
  return 0;
}

// Background snapshot: the guest keeps running while QEMU saves; RAM START has no RAM END.
int ScenarioLiveSave(const Env& env) {
  std::vector<std::string> args = MachineArgs("64M");
  args.insert(args.end(), {"-device", "loader,file=" + env.pattern_path + ",addr=" + std::to_string(kPatternAddr) +
                                          ",force-raw=on"});
  auto src = Launch(args, false, "source");
  auto qmp = src->TakeQmp();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MemoryPageStore store;
  SaveOptions so;
  so.live = true;
  SaveReport rep;
  const auto t0 = Clock::now();
  auto st = SaveFromQemu(*qmp, store, so, &rep);
  if (!st.has_value() && st.error().message().find("background-snapshot") != std::string::npos) {
    Skip("QEMU refuses background-snapshot here: " + st.error().message());
  }
  if (!st.has_value()) {
    fprintf(stderr, "FAIL: live save: %s\n", st.error().ToString().c_str());
    return ++g_failures;
  }
  printf("live save: %.1f ms, %llu page records, RAM END %s, %zu out-of-order pages (working-set sample), guest was "
         "running: %d\n",
         Ms(Clock::now() - t0), (unsigned long long)rep.stream.page_records, rep.stream.ram_end_seen ? "seen" : "absent",
         rep.out_of_order_pages.size(), rep.was_running);
  for (size_t i = 0; i < rep.out_of_order_pages.size() && i < 8; ++i) {
    printf("  out of order: block %u page %#llx\n", rep.out_of_order_pages[i].block,
           (unsigned long long)rep.out_of_order_pages[i].page);
  }
  CHECK(rep.stream.duplicate_pages == 0);
  CHECK(rep.missing_pages == 0);
  CHECK(!st->device_state.empty());
  auto status = Must(qmp->Execute("query-status"), "query-status");
  CHECK(status.Find("status")->as_string() == "running");
  const int ram = st->FindBlock("pc.ram");
  CHECK(ram >= 0);
  uint64_t bad = 0;
  for (uint64_t p = 0; p < kPatternSize / 4096; ++p) {
    const std::string& pg = store.Page(ram, kPatternAddr / 4096 + p);
    const std::string want = env.pattern.substr(p * 4096, 4096);
    if (pg.empty() ? want != std::string(4096, '\0') : pg != want) ++bad;
  }
  CHECK(bad == 0);
  return 0;
}

int ScenarioEager(const Env& env) {
  auto saved = SaveSource(env);
  std::vector<std::string> args = MachineArgs("64M");
  args.push_back("-S");  // stay paused after the load so memory and registers compare exactly
  auto dst = Launch(args, true, "destination");
  auto qmp = dst->TakeQmp();
  RestoreOptions ro;
  ro.lazy = false;
  ro.unix_socket_path = env.dir + "/incoming.sock";  // the libvirt-style channel (the lazy test uses getfd)
  RestoreReport rr;
  const auto t0 = Clock::now();
  CHECK_OK(RestoreIntoQemu(*qmp, saved->state, saved->store, ro, &rr, dst.get()));
  const double ms = Ms(Clock::now() - t0);
  printf("eager restore: %.1f ms to completed (stream %llu bytes written in %.1f ms, %llu pages, %llu zero), status %s\n",
         ms, (unsigned long long)rr.precopy.bytes_sent, rr.precopy.write_us / 1000.0,
         (unsigned long long)rr.precopy.pages, (unsigned long long)rr.precopy.zero_pages, rr.final_status.c_str());
  CHECK(rr.final_status == "completed");
  const std::string mem = Must(ReadGuestMemory(*qmp, 0, kGuestRam, env.dir), "pmemsave on the destination");
  const auto diff = DiffPages(mem, saved->memory, 0, kGuestRam);
  printf("eager restore: %zu of %llu pages differ from the source\n", diff.size(), (unsigned long long)(kGuestRam / 4096));
  for (size_t i = 0; i < diff.size() && i < 8; ++i) printf("  differs: %#llx\n", (unsigned long long)diff[i]);
  CHECK(diff.empty());
  const std::string regs = Must(qmp->HumanMonitorCommand("info registers"), "info registers on the destination");
  CHECK(regs == saved->registers);
  if (regs != saved->registers) fprintf(stderr, "source registers:\n%s\ndestination:\n%s\n", saved->registers.c_str(), regs.c_str());
  // Continue the restored guest: it must run.
  CHECK(qmp->Execute("cont").has_value());
  auto status = Must(qmp->Execute("query-status"), "query-status");
  CHECK(status.Find("status")->as_string() == "running");
  return 0;
}

int ScenarioLazy(const Env& env) {
  if (!HaveUserfaultfd()) Skip("userfaultfd is not available to this process (postcopy needs it)");
  auto saved = SaveSource(env);
  // A second monitor so the test can read guest memory while the restore owns the first one.
  const std::string qmp2_path = env.dir + "/dst-qmp2.sock";
  std::vector<std::string> args = MachineArgs("64M");
  args.insert(args.end(), {"-qmp", "unix:" + qmp2_path + ",server=on,wait=off"});
  auto dst = Launch(args, true, "destination");
  auto qmp = dst->TakeQmp();
  auto qmp2 = Must(QmpClient::Connect(qmp2_path, 5000), "second QMP connection");

  RestoreOptions ro;
  ro.lazy = true;
  ro.postcopy.request_run_pages = 64;
  ro.postcopy.push_section_pages = 64;
  // Slow the background push (zero pages count at 4 KiB) so the reads below really fault pages in on demand.
  ro.postcopy.push_rate_limit_bytes_per_sec = 16ull << 20;
  RestoreReport rr;
  Status restore_status;
  const auto t0 = Clock::now();
  std::thread restore([&] { restore_status = RestoreIntoQemu(*qmp, saved->state, saved->store, ro, &rr, dst.get()); });

  // While pages are still arriving: wait until the guest runs, then read the pattern region (faults, requests).
  auto resume = qmp2->WaitForEvent("RESUME", 30000);
  const double resume_ms = Ms(Clock::now() - t0);
  CHECK(resume.has_value());
  const auto tr = Clock::now();
  auto pattern = ReadGuestMemory(*qmp2, kPatternAddr, kPatternSize, env.dir);
  const double read_ms = Ms(Clock::now() - tr);
  CHECK(pattern.has_value() && *pattern == env.pattern);
  auto mid = QueryMigration(*qmp2);
  const std::string mid_status = mid.has_value() ? mid->status : "?";
  restore.join();
  const double total_ms = Ms(Clock::now() - t0);
  CHECK_OK(restore_status);
  const auto& ps = rr.postcopy;
  printf("lazy restore: connect->package %.2f ms, connect->devices loaded (PONG before RUN) %.2f ms, RESUME event "
         "%.1f ms after start, completed after %.1f ms (driver %.1f ms)\n",
         ps.connect_to_package_us / 1000.0, ps.connect_to_running_us / 1000.0, resume_ms, total_ms,
         ps.total_us / 1000.0);
  printf("lazy restore: pattern (4 MiB) read during postcopy in %.1f ms (status then: %s)\n", read_ms, mid_status.c_str());
  printf("lazy restore: %llu requests (%llu for pages already sent, ignored), %llu pages sent for requests, %llu "
         "pushed, %llu zero, %llu bytes; request latency p50 %.2f ms p99 %.2f ms max %.2f ms; %llu pages sent before "
         "the first request\n",
         (unsigned long long)ps.requests, (unsigned long long)ps.requests_already_sent,
         (unsigned long long)ps.request_pages, (unsigned long long)ps.pushed_pages, (unsigned long long)ps.zero_pages,
         (unsigned long long)ps.bytes_sent, ps.request_latency_p50_us / 1000.0, ps.request_latency_p99_us / 1000.0,
         ps.request_latency_max_us / 1000.0, (unsigned long long)ps.pages_sent_before_first_request);
  CHECK(rr.final_status == "completed");
  CHECK(ps.requests > 0);
  CHECK(ps.request_pages + ps.pushed_pages == saved->state.total_pages());
  auto status = Must(qmp2->Execute("query-status"), "query-status");
  CHECK(status.Find("status")->as_string() == "running");
  // The guest ran meanwhile (SeaBIOS's idle loop writes a few low pages); everything else equals the source.
  CHECK_OK(qmp2->Execute("stop").status());
  const std::string mem = Must(ReadGuestMemory(*qmp2, 0, kGuestRam, env.dir), "pmemsave on the destination");
  const auto diff = DiffPages(mem, saved->memory, 0, kGuestRam);
  printf("lazy restore: %zu of %llu pages differ from the source after the guest ran:", diff.size(),
         (unsigned long long)(kGuestRam / 4096));
  for (size_t i = 0; i < diff.size() && i < 12; ++i) printf(" %#llx", (unsigned long long)diff[i]);
  printf("\n");
  CHECK(mem.compare(kPatternAddr, kPatternSize, env.pattern) == 0);
  CHECK(DiffPages(mem, saved->memory, 1ull << 20, kGuestRam).size() <= 4);
  return 0;
}

int ScenarioSizeMismatch(const Env& env) {
  auto saved = SaveSource(env);
  // 1. The preflight check: a clear error before anything is sent; the destination is untouched.
  {
    auto dst = Launch(MachineArgs("128M"), true, "destination");
    auto qmp = dst->TakeQmp();
    RestoreOptions ro;
    Status s = RestoreIntoQemu(*qmp, saved->state, saved->store, ro, nullptr, dst.get());
    printf("preflight: %s\n", s.ToString().c_str());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("destination RAMBlock pc.ram is 0x8000000 bytes, the checkpoint's is 0x4000000") !=
          std::string::npos);
    auto st = Must(qmp->Execute("query-status"), "query-status");
    CHECK(st.Find("status")->as_string() == "inmigrate");
    CHECK(dst->Alive());
  }
  // 2. Without the preflight, QEMU's own check fails the load; the error carries its message, nothing hangs.
  for (bool lazy : {false, true}) {
    if (lazy && !HaveUserfaultfd()) continue;
    auto dst = Launch(MachineArgs("128M"), true, "destination");
    auto qmp = dst->TakeQmp();
    RestoreOptions ro;
    ro.lazy = lazy;
    ro.check_ram_blocks = false;
    saved->store.ResetRestore();
    const auto t0 = Clock::now();
    Status s = RestoreIntoQemu(*qmp, saved->state, saved->store, ro, nullptr, dst.get());
    printf("%s without preflight (%.0f ms): %s\n", lazy ? "lazy" : "eager", Ms(Clock::now() - t0), s.ToString().c_str());
    CHECK(!s.ok());
    // QEMU prints the stream's size first, then its own.
    CHECK(s.message().find("Size mismatch: pc.ram: 0x4000000 != 0x8000000") != std::string::npos);
  }
  return 0;
}

int ScenarioKilled(const Env& env) {
  auto saved = SaveSource(env);
  for (bool lazy : {true, false}) {
    if (lazy && !HaveUserfaultfd()) {
      printf("lazy variant skipped: no userfaultfd\n");
      continue;
    }
    const std::string qmp2_path = env.dir + "/dst-qmp2.sock";
    unlink(qmp2_path.c_str());
    std::vector<std::string> args = MachineArgs("64M");
    args.insert(args.end(), {"-qmp", "unix:" + qmp2_path + ",server=on,wait=off"});
    auto dst = Launch(args, true, "destination");
    auto qmp = dst->TakeQmp();
    auto qmp2 = Must(QmpClient::Connect(qmp2_path, 5000), "second QMP connection");
    saved->store.ResetRestore();
    saved->store.set_slow_every(lazy ? 0 : 16);  // eager: ~1 ms every 16 pages, about a second in all
    RestoreOptions ro;
    ro.lazy = lazy;
    ro.postcopy.push_rate_limit_bytes_per_sec = 4ull << 20;  // ~16 s for the whole guest
    Status s;
    std::atomic<bool> done{false};
    Clock::time_point returned;
    std::thread restore([&] {
      s = RestoreIntoQemu(*qmp, saved->state, saved->store, ro, nullptr, dst.get());
      returned = Clock::now();
      done = true;
    });
    if (lazy) {
      CHECK(qmp2->WaitForEvent("RESUME", 30000).has_value());  // the guest runs: we are mid-postcopy
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(lazy ? 300 : 200));
    CHECK(!done);
    const auto killed = Clock::now();
    CHECK_OK(dst->Kill(SIGKILL));
    restore.join();
    const double react_ms = Ms(returned - killed);
    printf("%s: QEMU killed mid-restore; restore returned after %.0f ms: %s\n", lazy ? "lazy" : "eager", react_ms,
           s.ToString().c_str());
    CHECK(!s.ok());
    CHECK(s.message().find("killed by signal 9") != std::string::npos);
    CHECK(react_ms < 5000);
    saved->store.set_slow_every(0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 2) {
    fprintf(stderr, "usage: %s save|live_save|eager|lazy|size_mismatch|killed_mid_restore\n", argv[0]);
    return 2;
  }
  if (FindQemuBinary().empty()) Skip("no qemu-system-x86_64 (install qemu-system-x86 or set HALITE_QEMU)");
  const std::string scenario = argv[1];
  const Env env = MakeEnv();
  const auto t0 = Clock::now();
  if (scenario == "save") {
    ScenarioSave(env);
  } else if (scenario == "live_save") {
    ScenarioLiveSave(env);
  } else if (scenario == "eager") {
    ScenarioEager(env);
  } else if (scenario == "lazy") {
    ScenarioLazy(env);
  } else if (scenario == "size_mismatch") {
    ScenarioSizeMismatch(env);
  } else if (scenario == "killed_mid_restore") {
    ScenarioKilled(env);
  } else {
    fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  printf("%s: %s in %.1f s (accelerator: tcg)\n", scenario.c_str(), g_failures ? "FAILED" : "passed",
         Ms(Clock::now() - t0) / 1000.0);
  return g_failures ? 1 : 0;
}
