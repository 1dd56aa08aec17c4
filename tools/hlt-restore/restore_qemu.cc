// hlt-restore qemu CKPT [options] [--qmp SOCKET | -- QEMU ARGS...]
// Restores a checkpoint made by `hlt-save qemu` into a stock QEMU, lazily through its postcopy (or eagerly).
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <filesystem>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "halite/checkpoint_location.h"

#include "halite/hint_files.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_migration_control.h"
#include "hlt-restore/lazy_restore_flags.h"
#include "hlt-restore/restore_modes.h"
#include "hlt-restore/learn_layout_flag.h"
#include "hlt-restore/restore_record.h"
#include "hlt-restore/shared_memory.h"

namespace halite::restore {

namespace {

const char* kQemuUsage =
    "usage: hlt-restore qemu CKPT [options] (--qmp SOCKET | -- QEMU ARGS...)\n"
    "       hlt-restore qemu CKPT --resume (--qmp SOCKET | --qemu-dir DIR) [options]\n"
    "Restores a checkpoint made by `hlt-save qemu` into QEMU, which must have the same machine options (-m,\n"
    "devices, -kernel) as the saved one. Lazy by default: QEMU's guest runs at once and its page requests are\n"
    "served from the checkpoint a locality block at a time while the rest is pushed in the background\n"
    "(postcopy). Exits 0 once every page is in and QEMU reports the migration completed; the guest keeps\n"
    "running.\n"
    "  -- [QEMU_BIN] ARGS...  start QEMU with these arguments plus `-incoming defer` and a QMP socket of its own;\n"
    "                         a first argument that names an executable (qemu-system-x86_64, /path/to/qemu) is\n"
    "                         the binary, as with `strace --` (same as --qemu BIN)\n"
    "                         serial, display and network are up to you (QEMU outlives hlt-restore, so its stdout\n"
    "                         goes to a log file: use e.g. -serial file:LOG to see the console)\n"
    "  --qmp SOCKET           or restore into a QEMU already started with `-incoming defer` (e.g. by libvirt)\n"
    "  --qemu BIN             QEMU binary for launch mode (default: $HALITE_QEMU, else qemu-system-x86_64)\n"
    "  --qemu-dir DIR         launch mode: where QEMU's QMP socket and logs go (default: a new private directory\n"
    "                         under $TMPDIR, left behind with the running guest)\n"
    "  --incoming-socket P    QEMU listens on unix socket P (default: a socketpair passed over QMP)\n"
    "  --record-trace FILE    write the pages QEMU asked for, in order, as an access trace (feed it to\n"
    "                         `hlt-save relayout` for a learned layout)\n"
    "  --timeline FILE        the engine's fault and block-load timeline (CSV)\n"
    "  --stats-json FILE      everything measured, as JSON\n"
    "  --progress-log FILE    every 10 ms while pages move: wall_us,faults_blocking,faults_zero,blocks_read,\n"
    "                         bytes_read,requests,pages_sent,stall_us (CSV)\n"
    "  --memory copy|shared   copy (default): every page goes into this QEMU's own memory (lazily, or --eager).\n"
    "                         shared: QEMU maps the guest RAM (pc.ram) privately from the checkpoint's image\n"
    "                         file, served by the host's image server (`hlt-restore serve`, started on demand,\n"
    "                         one per checkpoint, exits 30 s after its last clone): every clone of the checkpoint\n"
    "                         on the host shares one copy of the pages it has not written, a block is decoded\n"
    "                         once per host, and the guest runs after the device state and small RAMBlocks are\n"
    "                         loaded. Launch mode only; QEMU ARGS must not choose a memory backend themselves.\n"
    "                         Use it for many clones of one checkpoint on a host; copy for a single restore\n"
    "                         (its guest owns its memory, and the image server need not outlive it)\n"
    "  --image-dir DIR        where image servers mount (default /run/halite/images)\n"
    "  --resume               take over a lazy restore of CKPT whose hlt-restore died (killed, crashed, out of\n"
    "                         memory): QEMU waits in postcopy-paused with its guest frozen; this resumes it\n"
    "                         through QEMU's postcopy recovery and serves the rest (nothing QEMU holds is sent\n"
    "                         again). The QEMU is found by --qemu-dir (a launched one) or --qmp; the restore's\n"
    "                         record (DIR/halite-restore.json, or $HALITE_RUN_DIR or /run/halite/restores/\n"
    "                         qemu-PID.json) must name CKPT's file_id. A launched QEMU that exited (its restore\n"
    "                         died before the guest ran) is started again and restored from the start\n"
    "  --wait                 after the restore, wait for QEMU to exit\n"
    "  --quiet                print only errors\n";

// Launch mode: a QEMU we started must not outlive an interrupted restore (it would sit paused forever).
std::atomic<pid_t> g_child{-1};
void OnSignal(int sig) {
  pid_t p = g_child.load();
  if (p > 0) kill(p, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

double Ms(uint64_t us) { return double(us) / 1e3; }

Status WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = f && std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::IoError(path + ": cannot write", errno);
}

// {"4096": n, "2097152": m}: how many of QEMU's page requests asked for each length.
nlohmann::ordered_json RequestSizesJson(const std::map<uint64_t, uint64_t>& sizes) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [bytes, n] : sizes) j[std::to_string(bytes)] = n;
  return j;
}

// QEMU's death in words: a signal is a death, and SIGBUS on --memory shared is a page of the image the server
// could not give (a block that failed verification): the clone stopped instead of running on wrong memory.
std::string DescribeDeath(qemu::QemuProcess& proc, bool shared_memory) {
  std::string why = proc.Describe();
  const auto st = proc.exit_status();
  if (shared_memory && st && WIFSIGNALED(*st) && WTERMSIG(*st) == SIGBUS) {
    why += " (a page of the shared image could not be read: the image server refused a block that failed "
           "verification, or lost the checkpoint; its .stats counts read_errors)";
  }
  return why;
}

// A restore that failed because the QEMU it started died (its monitor or migration socket reset) says so: the
// death, not the socket, is the cause. QEMU may be seen to exit a moment after its sockets close.
Status WithQemuDeath(const Status& s, qemu::QemuProcess* proc, bool shared_memory) {
  if (!proc || !proc->Wait(1000)) return s;
  const auto st = proc->exit_status();
  if (!st || !WIFSIGNALED(*st)) return s;
  return Status(s.code(), s.message() + "; " + DescribeDeath(*proc, shared_memory), s.sys_errno());
}

}  // namespace

int RestoreQemu(cli::Args& args) {
  const std::string tool = "hlt-restore qemu";
  const auto t_tool = std::chrono::system_clock::now();
  const int64_t tool_wall_us = std::chrono::duration_cast<std::chrono::microseconds>(t_tool.time_since_epoch()).count();
  std::string usage = std::string(kQemuUsage) + kLazyRestoreFlagsHelp + kLearnLayoutHelp + cli::kReaderFlagsHelp;
  std::string ckpt, socket, qemu_bin, qemu_dir, error, v, record, timeline, stats_json, progress_log;
  std::vector<std::string> qemu_args;
  bool launch = false, wait = false, quiet = false, shared_memory = false, resume = false, learn = false;
  std::string image_dir = "/run/halite/images";
  ReaderOptions ropts;
  qemu::CheckpointRestoreOptions opt;
  while (!args.Done()) {
    if (args.Flag("-h") || args.Flag("--help")) {
      std::cout << usage;
      return cli::kExitOk;
    }
    if (args.Flag("--")) {
      launch = true;
      while (!args.Done()) qemu_args.push_back(args.Next());
      break;
    }
    if (args.Option("--qmp", &v, &error)) {
      socket = v;
    } else if (args.Option("--qemu", &v, &error)) {
      qemu_bin = v;
    } else if (args.Option("--qemu-dir", &v, &error)) {
      qemu_dir = v;
    } else if (args.Option("--incoming-socket", &v, &error)) {
      opt.unix_socket_path = v;
    } else if (ParseLazyRestoreFlag(args, &opt, &error)) {
    } else if (args.Option("--record-trace", &v, &error)) {
      record = v;
    } else if (args.Option("--timeline", &v, &error)) {
      timeline = v;
      opt.engine.record_timeline = true;
    } else if (args.Option("--stats-json", &v, &error)) {
      stats_json = v;
    } else if (args.Option("--progress-log", &v, &error)) {
      progress_log = v;
    } else if (args.Option("--memory", &v, &error)) {
      if (v != "copy" && v != "shared") error = "--memory: expected copy or shared, got \"" + v + "\"";
      shared_memory = v == "shared";
    } else if (args.Option("--image-dir", &v, &error)) {
      image_dir = v;
    } else if (args.Flag("--resume")) {
      resume = true;
    } else if (args.Flag("--learn-layout")) {
      learn = true;
    } else if (args.Flag("--wait")) {
      wait = true;
    } else if (args.Flag("--quiet")) {
      quiet = true;
    } else if (cli::ReaderOption(args, &ropts, &error)) {
    } else {
      args.Positional(&ckpt, &error);
    }
    if (!error.empty()) return cli::UsageError(tool, error, usage);
  }
  if (ckpt.empty()) return cli::UsageError(tool, "CKPT is required", usage);
  if (Status cache = cli::PrepareReaderOptions(args, &ropts); !cache.ok()) return cli::Fail(tool, cache);
  // --resume: the record of the interrupted restore says which QEMU and which checkpoint.
  std::optional<RestoreRecord> prior;
  if (resume) {
    if (launch) return cli::UsageError(tool, "--resume takes over a running QEMU: give --qmp SOCKET or --qemu-dir DIR, not QEMU ARGS", usage);
    if (socket.empty() == qemu_dir.empty()) return cli::UsageError(tool, "--resume needs --qmp SOCKET or --qemu-dir DIR (one of them)", usage);
    if (!opt.lazy || shared_memory) return cli::UsageError(tool, "--resume continues a lazy restore (no --eager, no --memory shared)", usage);
    if (!qemu_dir.empty()) {
      auto r = ReadRestoreRecord(qemu_dir + "/" + kRecordFileName);
      if (!r) return cli::Fail(tool, r.error());
      prior = std::move(*r);
      socket = prior->qmp_socket;
      auto started = ProcessStartTime(prior->qemu_pid);
      bool gone = !started || *started != prior->qemu_start_time;
      if (!gone) {
        // Alive. Where did its restore stop? Before QEMU was given a stream ("none"): restore into it afresh.
        // In the precopy phase (the stream cut before the guest ran): QEMU fails its load; it is ours and its
        // guest never ran, so it goes and an identical one starts. Postcopy: resumed below.
        auto probe = qemu::QmpClient::Connect(socket, 5000);
        auto m = probe ? qemu::QueryMigration(**probe) : Result<qemu::MigrationStatus>(probe.error());
        const std::string st = m ? m->status : "";
        if (st == "none") {
          resume = false;
          if (opt.unix_socket_path.empty()) opt.unix_socket_path = prior->incoming_socket;
          if (!quiet) std::printf("QEMU pid %d never received a stream: restoring into it from the start\n", int(prior->qemu_pid));
        } else if (!m || (st.rfind("postcopy", 0) != 0 && st != "completed")) {
          if (prior->guest_ran) {
            // Its guest ran: whatever the monitor says, that QEMU holds a live guest and is never replaced.
            return cli::Fail(tool, Status::IoError(
                                       "QEMU pid " + std::to_string(prior->qemu_pid) + " holds the guest of the "
                                       "interrupted restore but its migration is not resumable now (" +
                                       (m ? "status " + st : m.error().message()) + "); try again"));
          }
          if (!quiet) {
            std::printf("QEMU pid %d stopped in its precopy phase (%s), before its guest ran: replacing it\n",
                        int(prior->qemu_pid), m ? st.c_str() : m.error().message().c_str());
          }
          kill(prior->qemu_pid, SIGKILL);
          for (int i = 0; i < 500 && ProcessStartTime(prior->qemu_pid).has_value(); ++i) usleep(10000);
          gone = true;
        }
      }
      if (gone) {
        // QEMU exits when its restore dies before the guest runs (a cut stream in the precopy phase fails its
        // load): nothing of the guest is lost, so start the same QEMU again and restore from the start.
        if (prior->guest_ran) {
          return cli::Fail(tool, Status::NotFound(
                                     "QEMU pid " + std::to_string(prior->qemu_pid) +
                                     " of the interrupted restore is gone after its guest ran: the guest's memory "
                                     "went with it, there is nothing to resume (restore " + ckpt +
                                     " afresh, without --resume)"));
        }
        if (prior->qemu_args.empty()) {
          return cli::Fail(tool, Status::NotFound("QEMU pid " + std::to_string(prior->qemu_pid) +
                                                  " of the interrupted restore is gone, and its record does not say "
                                                  "how to start it again"));
        }
        if (!quiet) {
          std::printf("QEMU pid %d of the interrupted restore is gone before its guest ran: starting it again and "
                      "restoring from the start\n",
                      int(prior->qemu_pid));
          std::fflush(stdout);
        }
        launch = true;
        resume = false;
        socket.clear();
        qemu_bin = prior->qemu_binary;
        qemu_args = prior->qemu_args;
        if (opt.unix_socket_path.empty()) opt.unix_socket_path = prior->incoming_socket;
      }
    }
  }
  if (launch == !socket.empty()) {
    return cli::UsageError(tool, "give either --qmp SOCKET or -- QEMU ARGS... (one of them)", usage);
  }
  if (launch && qemu_args.empty()) return cli::UsageError(tool, "no QEMU arguments after --", usage);
  // `-- qemu-system-x86_64 -m 1G ...`: the binary typed first, as after `strace --` or `perf record --`. QEMU's
  // own arguments never name an executable in first place (they start with '-', or are a disk image), so an
  // executable there is the binary; QEMU would otherwise fail with "Could not open 'qemu-system-x86_64'".
  if (launch) {
    std::string binary = cli::FindExecutable(qemu_args.front());
    if (!binary.empty()) {
      if (!qemu_bin.empty()) {
        return cli::UsageError(tool, "the QEMU binary is given twice: --qemu " + qemu_bin + " and " + qemu_args.front() +
                                         " after --", usage);
      }
      qemu_bin = binary;
      qemu_args.erase(qemu_args.begin());
      if (qemu_args.empty()) return cli::UsageError(tool, "no QEMU arguments after the binary " + binary, usage);
    }
  }
  for (const auto& a : qemu_args) {
    if (a == "-incoming" || a == "--incoming") {
      return cli::UsageError(tool, "QEMU ARGS must not contain -incoming (hlt-restore adds -incoming defer)", usage);
    }
  }
  if (std::string bad = CheckLazyRestoreFlags(opt); !bad.empty()) return cli::UsageError(tool, bad, usage);
  if (learn && resume) return cli::UsageError(tool, "--learn-layout: a resumed restore goes on as it was", usage);
  LearnedLayoutChoice learned;
  if (learn) {
    if (Status s = learned.Choose(&ckpt, ropts); !s.ok()) return cli::Fail(tool, s);
  }
  std::unique_ptr<CheckpointReader> early_reader;
  // Format-spec 13: a missing key refuses the restore before QEMU starts (which it does while the index is read).
  if (Status keyed = cli::CheckKeyAvailable(ckpt, ropts.keyring); !keyed.ok()) return cli::Fail(tool, keyed);
  if (shared_memory) {
    if (!launch) return cli::UsageError(tool, "--memory shared starts QEMU itself: give -- QEMU ARGS", usage);
    if (std::string bad = ConflictingMemoryArgument(qemu_args); !bad.empty()) {
      return cli::UsageError(tool, "QEMU ARGS choose the memory backend (" + bad + "): --memory shared adds its own",
                             usage);
    }
    for (const std::string& w : DiscardingDeviceWarnings(qemu_args)) {
      std::fprintf(stderr, "%s: warning: %s\n", tool.c_str(), w.c_str());
    }
    auto opened = CheckpointReader::Open(ckpt, ropts);
    if (!opened) return cli::Fail(tool, opened.error());
    if (Status st = qemu::ReadSavedVmState(**opened).status(); !st.ok()) return cli::Fail(tool, st);
    char self[PATH_MAX] = {0};
    if (readlink("/proc/self/exe", self, sizeof self - 1) < 0) return cli::Fail(tool, Status::IoError("/proc/self/exe", errno));
    auto plan = PrepareSharedMemory(self, ckpt, **opened, image_dir, ropts.parent_dirs, cli::ReaderFlags(args, ropts));
    if (!plan) return cli::Fail(tool, plan.error());
    qemu_args.insert(qemu_args.end(), plan->qemu_args.begin(), plan->qemu_args.end());
    opt.lazy = false;
    opt.shared_regions = plan->shared_regions;
    if (!quiet) {
      std::printf("memory shared: QEMU maps %s privately (image server %s)\n", plan->image_path.c_str(),
                  plan->started_server ? "started" : "already serving");
      std::fflush(stdout);
    }
    early_reader = std::move(*opened);
  }

  auto wall_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // QEMU starts (hundreds of milliseconds: it loads firmware and -kernel) while the checkpoint's index is read.
  std::optional<Result<std::unique_ptr<qemu::QemuProcess>>> launched;
  int64_t qemu_ready_wall_us = 0;
  std::thread launcher;
  if (launch && !qemu_dir.empty() && mkdir(qemu_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return cli::Fail(tool, Status::IoError(qemu_dir + ": cannot create the QEMU directory", errno));
  }
  if (launch) {
    qemu::QemuLaunchOptions lo;
    lo.binary = qemu_bin;
    lo.args = qemu_args;
    lo.work_dir = qemu_dir;
    lo.incoming_defer = true;
    lo.inherit_stdout = false;    // QEMU outlives us: our stdout may be a pipe someone waits on
    lo.kill_with_parent = false;  // the guest outlives us; the signal handler covers an interrupted restore
    launcher = std::thread([&launched, &qemu_ready_wall_us, lo, &wall_us] {
      launched = qemu::QemuProcess::Start(lo);
      qemu_ready_wall_us = wall_us();
    });
  }
  auto reader = early_reader ? Result<std::unique_ptr<CheckpointReader>>(std::move(early_reader))
                             : CheckpointReader::Open(ckpt, ropts);
  // A checkpoint of another VMM is refused before anything is sent.
  Status checked = reader ? qemu::ReadSavedVmState(**reader).status() : reader.error();
  const int64_t open_done_wall_us = wall_us();
  std::unique_ptr<qemu::QemuProcess> proc;
  std::unique_ptr<qemu::QmpClient> qmp;
  if (launch) {
    launcher.join();
    if (!*launched) return cli::Fail(tool, launched->error());
    proc = std::move(**launched);
    g_child = proc->pid();
    signal(SIGINT, OnSignal);
    signal(SIGTERM, OnSignal);
    signal(SIGHUP, OnSignal);
    qmp = proc->TakeQmp();
  }
  if (!checked.ok()) return cli::Fail(tool, checked);  // a launched QEMU is killed on the way out
  const CheckpointReader& r = **reader;
  if (!launch) {
    auto c = qemu::QmpClient::Connect(socket, 5000);
    if (!c) return cli::Fail(tool, c.error());
    qmp = std::move(*c);
  }
  const pid_t qemu_pid = proc ? proc->pid() : qmp->PeerPid();
  RestoreRecord written_record;  // a fresh lazy restore's, rewritten once the guest runs
  const std::string file_id = cli::HexBytes(r.file_id());
  std::vector<std::string> record_paths;
  if (resume) {
    if (!prior) {
      if (qemu_pid <= 0) {
        return cli::Fail(tool, Status::Unsupported(socket + ": cannot tell QEMU's pid from this QMP socket, so no "
                                                            "restore record can be found: use --qemu-dir"));
      }
      auto rec = ReadRestoreRecord(RecordPathForPid(qemu_pid));
      if (!rec) return cli::Fail(tool, rec.error());
      prior = std::move(*rec);
    }
    auto started = ProcessStartTime(qemu_pid);
    if (prior->qemu_pid != qemu_pid || !started || *started != prior->qemu_start_time) {
      return cli::Fail(tool, Status::InvalidArgument(fmt::format(
                                 "the restore record names QEMU pid {} (started at tick {}), but {} is QEMU pid {}: "
                                 "that restore's QEMU is gone",
                                 prior->qemu_pid, prior->qemu_start_time, socket, qemu_pid)));
    }
    if (prior->file_id != file_id) {
      return cli::Fail(tool, Status::InvalidArgument(fmt::format(
                                 "{} has file_id {}, but QEMU pid {} was restoring {} (file_id {}): resume with "
                                 "that checkpoint",
                                 ckpt, file_id, qemu_pid, prior->checkpoint, prior->file_id)));
    }
    opt.resume = true;
    opt.qemu_pid = qemu_pid;
    if (opt.unix_socket_path.empty()) opt.unix_socket_path = prior->incoming_socket;
    record_paths.push_back(RecordPathForPid(qemu_pid));
    if (!prior->qemu_dir.empty()) record_paths.push_back(prior->qemu_dir + "/" + kRecordFileName);
  } else if (opt.lazy && qemu_pid > 0) {
    // Written before anything is sent: from here on a dead hlt-restore leaves a restore someone can resume.
    RestoreRecord& rec = written_record;
    // Absolute paths: whoever resumes may run elsewhere.
    auto absolute = [](const std::string& path) {
      std::error_code ec;
      const auto a = std::filesystem::absolute(path, ec);
      return ec || path.empty() ? path : a.string();
    };
    rec.checkpoint = IsObjectStoreUri(ckpt) ? ckpt : absolute(ckpt);
    rec.file_id = file_id;
    rec.qemu_pid = qemu_pid;
    if (auto started = ProcessStartTime(qemu_pid)) rec.qemu_start_time = *started;
    rec.qmp_socket = absolute(proc ? proc->qmp_socket_path() : socket);
    rec.incoming_socket = absolute(opt.unix_socket_path);
    if (proc) {
      rec.qemu_dir = absolute(proc->work_dir());
      rec.qemu_binary = qemu_bin;
      rec.qemu_args = qemu_args;
    } else if (prior) {  // restoring afresh into the QEMU an interrupted restore launched
      rec.qemu_dir = prior->qemu_dir;
      rec.qemu_binary = prior->qemu_binary;
      rec.qemu_args = prior->qemu_args;
    }
    if (!rec.qemu_dir.empty()) record_paths.push_back(rec.qemu_dir + "/" + kRecordFileName);
    record_paths.push_back(RecordPathForPid(qemu_pid));
    for (const std::string& path : record_paths) {
      if (Status w = WriteRestoreRecord(rec, path); !w.ok()) {
        std::fprintf(stderr, "%s: warning: %s (this restore cannot be resumed from there)\n", tool.c_str(),
                     w.message().c_str());
      }
    }
  }
  const bool loader = opt.engine.background_loader;
  if (!quiet && resume) {
    std::printf("resuming the restore of %s into QEMU pid %d (file_id %s)\n", ckpt.c_str(), int(qemu_pid),
                file_id.c_str());
    std::fflush(stdout);
  } else if (!quiet) {
    std::printf("restoring %s into QEMU%s: %s%s%s\n", ckpt.c_str(),
                proc ? (" (pid " + std::to_string(proc->pid()) + ")").c_str() : (" at " + socket).c_str(),
                opt.lazy ? "lazy (postcopy)" : "eager (every page before the guest runs)",
                opt.lazy ? (loader ? ", loader on" : ", loader off") : "",
                opt.engine.preload_working_set ? ", working set preloaded" : "");
    std::fflush(stdout);
  }
  opt.on_running = [&](uint64_t us) {
    if (!resume && !record_paths.empty()) {
      written_record.guest_ran = true;
      for (const std::string& path : record_paths) (void)WriteRestoreRecord(written_record, path);
    }
    if (quiet) return;
    std::printf("guest running %.1f ms after the restore began\n", Ms(us));
    std::fflush(stdout);
  };
  opt.on_resumed = [&](uint64_t us) {
    if (quiet) return;
    const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("guest resumed: QEMU acknowledged the recovery %.1f ms after the restore began (%.1f ms after "
                "hlt-restore started)\n",
                Ms(us), Ms(uint64_t(now - tool_wall_us)));
    std::fflush(stdout);
  };
  std::string progress_text;
  if (!progress_log.empty()) {
    progress_text = "wall_us,faults_blocking,faults_zero,blocks_read,bytes_read,requests,pages_sent,stall_us\n";
    opt.progress_interval_ms = 10;
    opt.on_progress = [&](const RestoreEngineStats& e, const qemu::PushRestoreStats& c) {
      char line[256];
      const int64_t now =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      std::snprintf(line, sizeof line, "%lld,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", (long long)now,
                    (unsigned long long)e.faults_blocking, (unsigned long long)e.faults_zero,
                    (unsigned long long)e.blocks_read, (unsigned long long)e.bytes_read, (unsigned long long)c.requests,
                    (unsigned long long)(c.preload_pages + c.request_pages + c.pushed_pages),
                    (unsigned long long)(e.stall_ns / 1000));
      progress_text += line;
    };
  }
  // An eager restore loads everything before the guest runs: show how far it is on a terminal (cli::Progress
  // stays silent when stderr is not one).
  cli::Progress eager_progress("loading");
  if (!opt.lazy && !quiet) {
    const uint64_t total_pages = r.total_pages();
    auto log_progress = std::move(opt.on_progress);
    opt.on_progress = [&, log_progress, total_pages](const RestoreEngineStats& e, const qemu::PushRestoreStats& c) {
      if (log_progress) log_progress(e, c);
      eager_progress.Update(c.preload_pages + c.request_pages + c.pushed_pages, total_pages);
    };
    if (opt.progress_interval_ms == 0) opt.progress_interval_ms = 100;
  }
  qemu::CheckpointRestoreResult res;
  Status s = qemu::RestoreCheckpointIntoQemu(r, *qmp, opt, &res, proc.get());
  eager_progress.Finish();
  if (!s.ok()) {
    s = WithQemuDeath(s, proc.get(), shared_memory);
    int rc = cli::Fail(tool, s);
    // The guest ran and QEMU waits in postcopy-paused: unless the checkpoint itself is damaged, what stopped
    // the restore (storage gone, the network, this process's resources) can be fixed and the restore resumed,
    // so QEMU stays. Otherwise a launched QEMU is killed (it cannot continue); an attached one is left as it is.
    auto m = opt.lazy && s.code() != StatusCode::kCorrupt ? qemu::QueryMigration(*qmp)
                                                         : Result<qemu::MigrationStatus>(s);
    if (m && m->status == "postcopy-paused" && !record_paths.empty()) {
      if (proc) {
        g_child = -1;
        proc->Release();
      }
      const std::string where = proc ? "--qemu-dir " + proc->work_dir() : "--qmp " + socket;
      std::cerr << tool << ": QEMU (pid " << qemu_pid << ") keeps its guest waiting for the pages it lacks; once "
                << "the cause above is fixed, continue with: hlt-restore qemu " << ckpt << " --resume " << where
                << "\n";
      return rc;
    }
    if (proc && proc->Alive()) {
      std::cerr << tool << ": killing the QEMU this restore started (pid " << proc->pid() << ")\n";
    }
    return rc;
  }
  // The restore is complete: nothing is left to resume.
  for (const std::string& path : record_paths) unlink(path.c_str());
  const int64_t running_wall = res.wall_start_us + int64_t(res.start_to_running_us);
  const uint64_t tool_to_running = res.start_to_running_us ? uint64_t(running_wall - tool_wall_us) : 0;
  const uint64_t tool_to_resumed =
      res.start_to_resumed_us ? uint64_t(res.wall_start_us - tool_wall_us) + res.start_to_resumed_us : 0;

  if (learn && opt.lazy) learned.LearnFrom(res.requested);
  if (!record.empty()) {
    s = WriteFile(record, FormatAccessTrace(res.requested, r.regions()));
    if (!s.ok()) return cli::Fail(tool, s);
  }
  if (!progress_log.empty()) {
    s = WriteFile(progress_log, progress_text);
    if (!s.ok()) return cli::Fail(tool, s);
  }
  if (!timeline.empty()) {
    s = WriteFile(timeline, res.timeline_csv);
    if (!s.ok()) return cli::Fail(tool, s);
  }
  const auto& c = res.channel;
  const auto& e = res.engine;
  const auto& ef = res.engine_final;
  const ReaderStats rs = r.read_stats();
  if (!stats_json.empty()) {
    nlohmann::ordered_json j = {
        {"checkpoint", ckpt},
        {"lazy", opt.lazy},
        {"loader", loader},
        {"preload_ws", opt.engine.preload_working_set},
        {"tool_wall_start_us", tool_wall_us},
        {"open_done_wall_us", open_done_wall_us},
        {"qemu_ready_wall_us", qemu_ready_wall_us},
        {"restore_wall_start_us", res.wall_start_us},
        {"engine_created_wall_us", res.engine_created_wall_us},
        {"running_wall_us", res.start_to_running_us ? running_wall : 0},
        {"tool_to_running_us", tool_to_running},
        {"start_to_connect_us", res.start_to_connect_us},
        {"start_to_running_us", res.start_to_running_us},
        {"connect_to_running_pong_us", c.connect_to_running_us},
        {"start_to_loaded_us", res.start_to_loaded_us},
        {"total_us", res.total_us},
        {"requests", c.requests},
        {"requests_already_sent", c.requests_already_sent},
        {"requests_after_end", c.requests_after_end},
        {"request_pages", c.request_pages},
        {"preload_pages", c.preload_pages},
        {"pushed_pages", c.pushed_pages},
        {"zero_pages_sent", c.zero_pages},
        {"zero_pages_unsent", res.zero_pages_unsent},
        {"bytes_sent", c.bytes_sent},
        {"request_latency_p50_us", c.request_latency_p50_us},
        {"request_latency_p99_us", c.request_latency_p99_us},
        {"request_latency_max_us", c.request_latency_max_us},
        {"request_sizes", RequestSizesJson(c.request_sizes)},
        {"host_pages_installed", ef.host_pages_installed},
        {"host_page_extra_reads", ef.host_page_extra_reads},
        {"faults_blocking", e.faults_blocking},
        {"faults_joined", e.faults_joined},
        {"faults_zero", e.faults_zero},
        {"faults_present", e.faults_present},
        {"stall_us", e.stall_ns / 1000},
        {"stall_blocking_us", e.stall_blocking_ns / 1000},
        {"stall_joined_us", e.stall_joined_ns / 1000},
        {"stall_blocking_p50_us", double(e.stall_latency.p50_ns) / 1e3},
        {"stall_blocking_p99_us", double(e.stall_latency.p99_ns) / 1e3},
        {"blocks_total", e.blocks_total},
        {"blocks_read_demand", e.blocks_read_demand},
        {"blocks_read_loader", e.blocks_read_loader},
        {"blocks_read_preload", e.blocks_read_preload},
        {"bytes_read", e.bytes_read},
        {"bytes_read_final", ef.bytes_read},
        {"sweep_blocks", res.sweep_blocks},
        {"read_retries", ef.read_retries},
        {"blocking_p50_us", double(e.blocking_latency.p50_ns) / 1e3},
        {"blocking_p99_us", double(e.blocking_latency.p99_ns) / 1e3},
        {"engine_read_us", ef.read_ns / 1000},
        {"engine_install_us", ef.install_ns / 1000},
        {"bytes_decompressed", ef.bytes_decompressed},
        {"loader_batches", ef.loader_batches},
        {"preload_batches", ef.preload_batches},
        {"storage_requests", rs.storage_requests},
        {"storage_bytes", rs.storage_bytes},
        {"blocks_fetched", rs.blocks_fetched},
        {"block_bytes_fetched", rs.block_bytes_fetched},
        {"cache_hits", rs.cache_hits},
        {"cache_misses", rs.cache_misses},
        {"cache_dropped", rs.cache_dropped},
        {"cache_inserts", rs.cache_inserts},
        {"placement", res.placement},
        {"placement_reason", res.placement_reason},
        {"direct_blocks", res.direct_blocks},
        {"direct_pages_copied", res.direct.pages_copied},
        {"direct_pages_zeroed", res.direct.pages_zeroed},
        {"direct_pages_existed", res.direct.pages_existed},
        {"direct_zero_pages_after_end", res.direct.zero_pages_after_end},
        {"direct_copy_ioctls", res.direct.copy_ioctls},
        {"direct_zero_ioctls", res.direct.zero_ioctls},
        {"direct_partial_fills", res.direct.partial_fills},
        {"direct_setup_us", res.direct_setup_us},
        {"resumed", resume},
        {"resumed_from_status", res.resumed_from_status},
        {"resume_present_pages", res.resume_present_pages},
        {"resume_received_pages", c.resume_received_pages},
        {"engine_pages_present_at_start", ef.pages_present_at_start},
        {"engine_blocks_present_at_start", ef.blocks_present_at_start},
        {"tool_to_resumed_us", tool_to_resumed},
        {"qemu_pid", proc ? int(proc->pid()) : -1},
        {"qemu_dir", proc ? proc->work_dir() : std::string()},
    };
    s = WriteFile(stats_json, cli::JsonText(j));
    if (!s.ok()) return cli::Fail(tool, s);
  }
  if (!quiet && resume) {
    std::printf("resumed from %s: QEMU held %llu pages already; its guest could get pages again %.1f ms after "
                "hlt-restore --resume began\n",
                res.resumed_from_status.c_str(), (unsigned long long)res.resume_present_pages, Ms(tool_to_resumed));
  }
  if (!quiet) {
    std::printf("restored %s (%s)\n", ckpt.c_str(), opt.lazy ? "lazy" : "eager");
    PrintRestoreSummary(res, tool_to_running);
    if (std::string cached = cli::StorageSummary(rs); !cached.empty()) {
      std::printf("  block cache      %s\n", cached.c_str());
    }
    if (proc) {
      std::printf("  qemu             pid %d keeps running; QMP socket %s, stdout/stderr logs in %s\n",
                  int(proc->pid()), proc->qmp_socket_path().c_str(), proc->work_dir().c_str());
    }
    std::fflush(stdout);
  }
  if (wait) {
    if (proc) {
      int status = 0;
      for (;;) {
        auto st = proc->Wait(3600 * 1000);
        if (st) {
          status = *st;
          break;
        }
      }
      // A guest that shuts down makes QEMU exit; a signal is a death.
      if (WIFSIGNALED(status)) return cli::Fail(tool, Status::IoError(DescribeDeath(*proc, shared_memory)));
      if (!quiet) std::printf("%s\n", proc->Describe().c_str());
    } else {
      // Attached: QEMU's monitor closes when it exits (a timeout just means it is still running).
      for (;;) {
        auto ev = qmp->WaitForEvent("SHUTDOWN", 3600 * 1000);
        if (!ev && ev.error().message().find("no answer within") == std::string::npos) break;
      }
    }
  }
  if (proc) {
    g_child = -1;
    proc->Release();
  }
  return cli::kExitOk;
}

}  // namespace halite::restore
