// Save and restore against a real QEMU 7.2 (TCG, SeaBIOS only, no guest kernel needed), through the one restore
// path there is: a checkpoint, the restore engine and RestoreCheckpointIntoQemu.
//
//   qemu_live_test "[save]" | "[live_save]" | "[eager]" | "[lazy]" | "[size_mismatch]" | "[killed_mid_restore]"
//
// The source VM gets 4 MiB of recognisable data at guest-physical 8 MiB (a `loader` device fills it at reset);
// destinations are started without it, so the data can only come from the restore. Exit 77: skipped (the reason
// is printed).
#include <catch2/catch.hpp>
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

#include "halite/checkpoint_reader.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_migration_blocker.h"
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

template <typename T>
T Must(Result<T> r, const char* what) {
  INFO(what << ": " << (r.has_value() ? std::string("ok") : r.error().ToString()));
  REQUIRE(r.has_value());
  return std::move(r).value();
}
[[noreturn]] void Skip(const std::string& why) {
  printf("SKIP: %s\n", why.c_str());
  fflush(stdout);
  std::exit(77);  // ctest reports it skipped (SKIP_RETURN_CODE), never passed
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Pages of a saved stream, in memory (the save scenarios check the stream itself).
class MemoryPageStore : public MigrationStreamHandler {
 public:
  Status OnRamBlocks(const std::vector<RamBlockInfo>& blocks) override {
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
  const std::string& Page(uint32_t block, uint64_t page) const { return pages_[block][page]; }

 private:
  std::vector<std::vector<std::string>> pages_;
  std::vector<std::vector<uint8_t>> have_;
};

// Checkpoint storage that answers each read after `delay`: a restore slow enough to be interrupted.
class SlowFile final : public RandomAccessFile {
 public:
  SlowFile(std::unique_ptr<RandomAccessFile> inner, std::chrono::milliseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  const std::string& name() const override { return inner_->name(); }
  uint64_t size() const override { return inner_->size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> buffer) override {
    std::this_thread::sleep_for(delay_);
    return inner_->ReadAt(offset, buffer);
  }

 private:
  std::unique_ptr<RandomAccessFile> inner_;
  std::chrono::milliseconds delay_;
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
  REQUIRE(mkdtemp(templ) != nullptr);
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
  INFO("starting the " << what << " QEMU: " << (p ? std::string("ok") : p.error().ToString()));
  REQUIRE(p.has_value());
  return std::move(p).value();
}

// A source VM with the pattern loaded at kPatternAddr, SeaBIOS given 300 ms to run a little.
std::unique_ptr<QemuProcess> LaunchSource(const Env& env) {
  std::vector<std::string> args = MachineArgs("64M");
  args.insert(args.end(), {"-device", "loader,file=" + env.pattern_path + ",addr=" + std::to_string(kPatternAddr) +
                                          ",force-raw=on"});
  auto src = Launch(args, false, "source");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return src;
}

// The source side of the restore scenarios: boot SeaBIOS with the pattern loaded, stop, save a checkpoint.
struct Saved {
  std::string checkpoint;
  std::string memory;     // guest-physical [0, 64 MiB) of the stopped source
  std::string registers;  // `info registers` of the stopped source
  uint64_t total_pages = 0;
};

Saved SaveSource(const Env& env) {
  Saved saved;
  auto src = LaunchSource(env);
  auto qmp = src->TakeQmp();
  CheckpointSaveOptions so;
  so.then = SaveOptions::Then::kLeaveStopped;
  saved.checkpoint = env.dir + "/source.hlt";
  auto r = Must(SaveQemuToCheckpoint(*qmp, saved.checkpoint, so), "SaveQemuToCheckpoint");
  saved.total_pages = r.data_pages + r.zero_pages;
  saved.memory = Must(ReadGuestMemory(*qmp, 0, kGuestRam, env.dir), "pmemsave on the source");
  saved.registers = Must(qmp->HumanMonitorCommand("info registers"), "info registers on the source");
  return saved;
}

std::unique_ptr<CheckpointReader> OpenCheckpoint(const std::string& path, std::chrono::milliseconds read_delay = {}) {
  auto file = Must(OpenLocalFile(path), "open the checkpoint");
  if (read_delay.count() > 0) file = std::make_unique<SlowFile>(std::move(file), read_delay);
  return Must(CheckpointReader::Open(std::move(file)), "read the checkpoint");
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

void RequireQemu() {
  if (FindQemuBinary().empty()) Skip("no qemu-system-x86_64 (install qemu-system-x86 or set HALITE_QEMU)");
}

}  // namespace

TEST_CASE("a stopped guest's migration stream: every page once, blocks, device state, VMDESC", "[save]") {
  RequireQemu();
  const Env env = MakeEnv();
  auto src = LaunchSource(env);
  auto qmp = src->TakeQmp();
  const auto source_blocks = Must(QueryRamBlocks(*qmp), "info ramblock on the source");
  MemoryPageStore store;
  SaveOptions so;
  so.then = SaveOptions::Then::kLeaveStopped;
  SaveReport rep;
  const auto t0 = Clock::now();
  const SavedVmState st = Must(SaveFromQemu(*qmp, store, so, &rep), "SaveFromQemu");
  printf("save: %.1f ms, %llu stream bytes, %llu page records (%llu data, %llu zero), %zu blocks, device state %zu "
         "bytes, vmdesc %zu bytes\n",
         Ms(Clock::now() - t0), (unsigned long long)rep.stream.bytes, (unsigned long long)rep.stream.page_records,
         (unsigned long long)rep.stream.data_pages, (unsigned long long)rep.stream.zero_pages, st.ram_blocks.size(),
         st.device_state.size(), st.vmdesc.size());
  const std::string memory = Must(ReadGuestMemory(*qmp, 0, kGuestRam, env.dir), "pmemsave on the source");
  // Every page exactly once.
  CHECK(rep.stream.duplicate_pages == 0);
  CHECK(rep.missing_pages == 0);
  CHECK(rep.stream.page_records == st.total_pages());
  CHECK(rep.out_of_order_pages.empty());  // stopped guest: one straight scan
  CHECK(rep.stream.ram_end_seen);
  // The block list matches `info ramblock` (names, used lengths, and the page sizes SaveFromQemu added).
  CHECK(st.ram_blocks.size() == source_blocks.size());
  for (const auto& q : source_blocks) {
    const int i = st.FindBlock(q.name);
    INFO("block " << q.name);
    REQUIRE(i >= 0);
    CHECK(st.ram_blocks[i].used_length == q.used_length);
    CHECK(st.ram_blocks[i].page_size == q.page_size);
  }
  CHECK(st.machine_type == "pc-i440fx-7.2");
  // Device state captured: starts with a FULL section; VMDESC is JSON naming devices.
  CHECK((!st.device_state.empty() && static_cast<uint8_t>(st.device_state[0]) == kTagSectionFull));
  auto vmdesc = ParseJson(st.vmdesc, "vmdesc");
  CHECK((vmdesc.has_value() && FindMember(*vmdesc, "devices") != nullptr && FindMember(*vmdesc, "devices")->size() > 5));
  // Page contents: pc.ram equals guest-physical memory (outside the ROM hole), the pattern is where it was loaded.
  const int ram = st.FindBlock("pc.ram");
  REQUIRE(ram >= 0);
  CHECK(st.ram_blocks[ram].used_length == kGuestRam);
  uint64_t bad = 0;
  for (uint64_t off = 0; off < kGuestRam; off += 4096) {
    if (off >= kHoleStart && off < kHoleEnd) continue;
    const std::string& pg = store.Page(ram, off / 4096);
    const bool same = pg.empty() ? memory.compare(off, 4096, std::string(4096, '\0')) == 0
                                 : memory.compare(off, 4096, pg) == 0;
    if (!same) ++bad;
  }
  CHECK(bad == 0);
  CHECK(memory.compare(kPatternAddr, kPatternSize, env.pattern) == 0);
  // Round trip of the non-RAM state through the checkpoint blob.
  auto back = DecodeSavedVmState(EncodeSavedVmState(st));
  CHECK((back.has_value() && back->device_state == st.device_state && back->ram_blocks == st.ram_blocks));
}

TEST_CASE("background snapshot: the guest keeps running, RAM START has no RAM END", "[live_save]") {
  RequireQemu();
  const Env env = MakeEnv();
  auto src = LaunchSource(env);
  auto qmp = src->TakeQmp();
  MemoryPageStore store;
  SaveOptions so;
  so.live = true;
  SaveReport rep;
  const auto t0 = Clock::now();
  auto st = SaveFromQemu(*qmp, store, so, &rep);
  if (!st.has_value() && st.error().message().find("background-snapshot") != std::string::npos) {
    Skip("QEMU refuses background-snapshot here: " + st.error().message());
  }
  INFO((st ? std::string("ok") : st.error().ToString()));
  REQUIRE(st.has_value());
  printf("live save: %.1f ms, %llu page records, RAM END %s, %zu out-of-order pages (working-set sample), guest was "
         "running: %d\n",
         Ms(Clock::now() - t0), (unsigned long long)rep.stream.page_records, rep.stream.ram_end_seen ? "seen" : "absent",
         rep.out_of_order_pages.size(), rep.was_running);
  CHECK(rep.stream.duplicate_pages == 0);
  CHECK(rep.missing_pages == 0);
  CHECK(!st->device_state.empty());
  auto status = Must(qmp->Execute("query-status"), "query-status");
  CHECK(AsString(*FindMember(status, "status")) == "running");
  const int ram = st->FindBlock("pc.ram");
  REQUIRE(ram >= 0);
  uint64_t bad = 0;
  for (uint64_t p = 0; p < kPatternSize / 4096; ++p) {
    const std::string& pg = store.Page(ram, kPatternAddr / 4096 + p);
    const std::string want = env.pattern.substr(p * 4096, 4096);
    if (pg.empty() ? want != std::string(4096, '\0') : pg != want) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("eager restore from a checkpoint: memory and registers equal the source's, then the guest runs",
          "[eager]") {
  RequireQemu();
  const Env env = MakeEnv();
  const Saved saved = SaveSource(env);
  auto reader = OpenCheckpoint(saved.checkpoint);
  std::vector<std::string> args = MachineArgs("64M");
  args.push_back("-S");  // stay paused after the load so memory and registers compare exactly
  auto dst = Launch(args, true, "destination");
  auto qmp = dst->TakeQmp();
  CheckpointRestoreOptions ro;
  ro.lazy = false;
  ro.paused = true;
  ro.unix_socket_path = env.dir + "/incoming.sock";  // the libvirt-style channel (the lazy test uses getfd)
  CheckpointRestoreResult rr;
  const auto t0 = Clock::now();
  Status s = RestoreCheckpointIntoQemu(*reader, *qmp, ro, &rr, dst.get());
  INFO(s.ToString());
  REQUIRE(s.ok());
  printf("eager restore: %.1f ms to completed (%llu bytes on the wire, %llu pages, %llu zero), status %s\n",
         Ms(Clock::now() - t0), (unsigned long long)rr.channel.bytes_sent,
         (unsigned long long)(rr.channel.preload_pages + rr.channel.pushed_pages + rr.channel.request_pages),
         (unsigned long long)rr.channel.zero_pages, rr.final_status.c_str());
  CHECK(rr.final_status == "completed");
  const std::string mem = Must(ReadGuestMemory(*qmp, 0, kGuestRam, env.dir), "pmemsave on the destination");
  const auto diff = DiffPages(mem, saved.memory, 0, kGuestRam);
  for (size_t i = 0; i < diff.size() && i < 8; ++i) printf("  differs: %#llx\n", (unsigned long long)diff[i]);
  CHECK(diff.empty());
  const std::string regs = Must(qmp->HumanMonitorCommand("info registers"), "info registers on the destination");
  CHECK(regs == saved.registers);
  // Continue the restored guest: it must run.
  CHECK(qmp->Execute("cont").has_value());
  auto status = Must(qmp->Execute("query-status"), "query-status");
  CHECK(AsString(*FindMember(status, "status")) == "running");
}

TEST_CASE("lazy restore from a checkpoint: the guest runs at once and faults its pages in", "[lazy]") {
  RequireQemu();
  if (!HaveUserfaultfd()) Skip("userfaultfd is not available to this process (postcopy needs it)");
  const Env env = MakeEnv();
  const Saved saved = SaveSource(env);
  auto reader = OpenCheckpoint(saved.checkpoint);
  // A second monitor so the test can read guest memory while the restore owns the first one.
  const std::string qmp2_path = env.dir + "/dst-qmp2.sock";
  std::vector<std::string> args = MachineArgs("64M");
  args.insert(args.end(), {"-qmp", "unix:" + qmp2_path + ",server=on,wait=off"});
  auto dst = Launch(args, true, "destination");
  auto qmp = dst->TakeQmp();
  auto qmp2 = Must(QmpClient::Connect(qmp2_path, 5000), "second QMP connection");

  CheckpointRestoreOptions ro;
  ro.lazy = true;
  // Slow the background loader so the reads below really fault pages in on demand.
  ro.engine.loader_rate_bytes_per_s = 1 << 20;
  CheckpointRestoreResult rr;
  Status restore_status;
  const auto t0 = Clock::now();
  std::thread restore([&] { restore_status = RestoreCheckpointIntoQemu(*reader, *qmp, ro, &rr, dst.get()); });

  // While pages are still arriving: wait until the guest runs, then read the pattern region (faults, requests).
  auto resume = qmp2->WaitForEvent("RESUME", 30000);
  const double resume_ms = Ms(Clock::now() - t0);
  const auto tr = Clock::now();
  auto pattern = ReadGuestMemory(*qmp2, kPatternAddr, kPatternSize, env.dir);
  const double read_ms = Ms(Clock::now() - tr);
  restore.join();
  CHECK(resume.has_value());
  CHECK((pattern.has_value() && *pattern == env.pattern));
  INFO(restore_status.ToString());
  REQUIRE(restore_status.ok());
  const auto& c = rr.channel;
  printf("lazy restore: RESUME %.1f ms after start; pattern (4 MiB) read during postcopy in %.1f ms; completed "
         "after %.1f ms\n",
         resume_ms, read_ms, Ms(Clock::now() - t0));
  printf("lazy restore: %llu requests (%llu for pages already sent), %llu pages answering requests, %llu pushed, "
         "%llu zero pages unsent; %llu blocking faults\n",
         (unsigned long long)c.requests, (unsigned long long)c.requests_already_sent,
         (unsigned long long)c.request_pages, (unsigned long long)c.pushed_pages,
         (unsigned long long)rr.zero_pages_unsent, (unsigned long long)rr.engine.faults_blocking);
  CHECK(rr.final_status == "completed");
  CHECK(c.requests > 0);
  CHECK(rr.engine.faults_blocking > 0);
  // Every page once: sent (before the guest, for a request, or pushed), placed directly through QEMU's
  // userfaultfd (placement "direct"), or left as zero.
  INFO("placement " << rr.placement << " " << rr.placement_reason);
  const DirectPlacementStats& d = rr.direct;
  CHECK(c.preload_pages + c.request_pages + c.pushed_pages + d.pages_copied + d.pages_zeroed + d.pages_existed +
            rr.zero_pages_unsent ==
        saved.total_pages);
  auto status = Must(qmp2->Execute("query-status"), "query-status");
  CHECK(AsString(*FindMember(status, "status")) == "running");
  // The guest ran meanwhile (SeaBIOS's idle loop writes a few low pages); everything else equals the source.
  REQUIRE(qmp2->Execute("stop").has_value());
  const std::string mem = Must(ReadGuestMemory(*qmp2, 0, kGuestRam, env.dir), "pmemsave on the destination");
  CHECK(mem.compare(kPatternAddr, kPatternSize, env.pattern) == 0);
  CHECK(DiffPages(mem, saved.memory, 1ull << 20, kGuestRam).size() <= 4);
}

TEST_CASE("a destination with other RAMBlocks: refused before anything is sent, or QEMU's own error",
          "[size_mismatch]") {
  RequireQemu();
  const Env env = MakeEnv();
  const Saved saved = SaveSource(env);
  auto reader = OpenCheckpoint(saved.checkpoint);
  {
    auto dst = Launch(MachineArgs("128M"), true, "destination");
    auto qmp = dst->TakeQmp();
    Status s = RestoreCheckpointIntoQemu(*reader, *qmp, CheckpointRestoreOptions{}, nullptr, dst.get());
    printf("preflight: %s\n", s.ToString().c_str());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("destination RAMBlock pc.ram is 0x8000000 bytes, the checkpoint's is 0x4000000") !=
          std::string::npos);
    auto st = Must(qmp->Execute("query-status"), "query-status");
    CHECK(AsString(*FindMember(st, "status")) == "inmigrate");
    CHECK(dst->Alive());
  }
  // Without the preflight, QEMU's own check fails the load; the error carries its message, nothing hangs.
  for (bool lazy : {false, true}) {
    if (lazy && !HaveUserfaultfd()) continue;
    auto dst = Launch(MachineArgs("128M"), true, "destination");
    auto qmp = dst->TakeQmp();
    CheckpointRestoreOptions ro;
    ro.lazy = lazy;
    ro.check_ram_blocks = false;
    const auto t0 = Clock::now();
    Status s = RestoreCheckpointIntoQemu(*reader, *qmp, ro, nullptr, dst.get());
    printf("%s without preflight (%.0f ms): %s\n", lazy ? "lazy" : "eager", Ms(Clock::now() - t0),
           s.ToString().c_str());
    CHECK(!s.ok());
    // QEMU prints the stream's size first, then its own.
    CHECK(s.message().find("Size mismatch: pc.ram: 0x4000000 != 0x8000000") != std::string::npos);
  }
}

TEST_CASE("QEMU killed mid-restore: the restore returns at once, naming the signal", "[killed_mid_restore]") {
  RequireQemu();
  const Env env = MakeEnv();
  const Saved saved = SaveSource(env);
  for (bool lazy : {true, false}) {
    if (lazy && !HaveUserfaultfd()) {
      printf("lazy variant skipped: no userfaultfd\n");
      continue;
    }
    // Every block read waits 40 ms: the restore takes seconds, long enough to be interrupted.
    auto reader = OpenCheckpoint(saved.checkpoint, std::chrono::milliseconds(40));
    const std::string qmp2_path = env.dir + "/dst-qmp2.sock";
    unlink(qmp2_path.c_str());
    std::vector<std::string> args = MachineArgs("64M");
    args.insert(args.end(), {"-qmp", "unix:" + qmp2_path + ",server=on,wait=off"});
    auto dst = Launch(args, true, "destination");
    auto qmp = dst->TakeQmp();
    auto qmp2 = Must(QmpClient::Connect(qmp2_path, 5000), "second QMP connection");
    CheckpointRestoreOptions ro;
    ro.lazy = lazy;
    ro.engine.preload_threads = 1;
    Status s;
    std::atomic<bool> done{false};
    Clock::time_point returned;
    std::thread restore([&] {
      s = RestoreCheckpointIntoQemu(*reader, *qmp, ro, nullptr, dst.get());
      returned = Clock::now();
      done = true;
    });
    if (lazy) CHECK(qmp2->WaitForEvent("RESUME", 30000).has_value());  // the guest runs: we are mid-postcopy
    std::this_thread::sleep_for(std::chrono::milliseconds(lazy ? 300 : 200));
    CHECK(!done);
    const auto killed = Clock::now();
    REQUIRE(dst->Kill(SIGKILL).ok());
    restore.join();
    const double react_ms = Ms(returned - killed);
    printf("%s: QEMU killed mid-restore; restore returned after %.0f ms: %s\n", lazy ? "lazy" : "eager", react_ms,
           s.ToString().c_str());
    CHECK(!s.ok());
    CHECK(s.message().find("killed by signal 9") != std::string::npos);
    CHECK(react_ms < 5000);
  }
}

TEST_CASE("a migration blocker refuses save, snapshot and migrate until it is removed", "[blocker]") {
  RequireQemu();
  Env env = MakeEnv();
  auto vm = Launch(MachineArgs("16M"), /*incoming=*/false, "blocked");
  auto qmp = vm->TakeQmp();
  auto blocker = Must(MigrationBlocker::Install(*qmp, env.dir), "MigrationBlocker::Install");
  REQUIRE(blocker.installed());
  // QEMU lists the reason, and refuses an outgoing migration before setting anything up.
  auto info = Must(qmp->Execute("query-migrate"), "query-migrate");
  INFO("query-migrate: " << JsonText(info));
  CHECK(JsonText(info).find(kRestoreBlockerNode) != std::string::npos);
  auto migrate = qmp->Execute("migrate", Json::object({{"uri", "exec:cat > /dev/null"}}));
  REQUIRE(!migrate.has_value());
  CHECK(migrate.error().message().find(kRestoreBlockerNode) != std::string::npos);
  auto after = Must(qmp->Execute("query-migrate"), "query-migrate after the refusal");
  CHECK(FindMember(after, "status") == nullptr);  // no outgoing migration was ever set up
  // Nothing left behind in the scratch directory: QEMU holds the image by descriptor only.
  CHECK(std::filesystem::is_empty(env.dir + "/") == false);  // the pattern file MakeEnv wrote
  for (const auto& e : std::filesystem::directory_iterator(env.dir)) {
    CHECK(e.path().filename().string().find("migration-blocker") == std::string::npos);
  }
  REQUIRE(blocker.Remove().ok());
  CHECK(!blocker.installed());
  auto cleared = Must(qmp->Execute("query-migrate"), "query-migrate after Remove");
  CHECK(JsonText(cleared).find(kRestoreBlockerNode) == std::string::npos);
  // Migrations work again.
  REQUIRE(qmp->Execute("migrate", Json::object({{"uri", "exec:cat > /dev/null"}})).has_value());
  std::string status;
  for (int i = 0; i < 300 && status != "completed" && status != "failed"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto q = Must(qmp->Execute("query-migrate"), "query-migrate during the migration after Remove");
    status = FindMember(q, "status") ? AsString(*FindMember(q, "status")) : "";
  }
  CHECK(status == "completed");
}
