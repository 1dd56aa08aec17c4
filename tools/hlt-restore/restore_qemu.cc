// hlt-restore qemu CKPT [options] [--qmp SOCKET | -- QEMU ARGS...]
// Restores a checkpoint made by `hlt-save qemu` into a stock QEMU, lazily through its postcopy (or eagerly).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "halite/hint_files.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_launcher.h"
#include "halite/qemu/qemu_migration_control.h"
#include "common/cli_parser.h"
#include "hlt-restore/lazy_restore_flags.h"
#include "hlt-restore/restore_modes.h"
#include "hlt-restore/learn_layout_flag.h"
#include "halite/qemu/qemu_restore_report.h"
#include "halite/qemu/qemu_restore_session.h"
#include "halite/qemu/qemu_shared_memory.h"

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
    "                         file, served by the host's image server (halite-image-server, started on demand,\n"
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

int64_t WallUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = f && std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::IoError(path + ": cannot write", errno);
}

// What the command line says, before the library sees it.
struct QemuFlags {
  qemu::RestoreSessionOptions session;
  std::string record, timeline, stats_json, progress_log;
  bool wait = false, quiet = false, learn = false;
};

// Parses the flags into *f; returns an exit code (usage or help) when the tool stops here, -1 to go on.
int ParseQemuFlags(cli::Args& args, const std::string& usage, QemuFlags* f) {
  qemu::RestoreSessionOptions& so = f->session;
  cli::Parser p("hlt-restore qemu", usage);
  CLI::App& app = p.app();
  std::string memory;
  LazyRestoreFlagValues lazy;
  cli::ReaderFlagValues reader;
  app.add_option("CKPT", so.checkpoint);
  app.add_option("--qmp", so.qmp_socket);
  app.add_option("--qemu", so.qemu_binary);
  app.add_option("--qemu-dir", so.qemu_dir);
  app.add_option("--incoming-socket", so.restore.unix_socket_path);
  app.add_option("--record-trace", f->record);
  app.add_option("--timeline", f->timeline);
  app.add_option("--stats-json", f->stats_json);
  app.add_option("--progress-log", f->progress_log);
  app.add_option("--memory", memory);
  app.add_option("--image-dir", so.image_dir);
  app.add_flag("--resume", so.resume);
  app.add_flag("--learn-layout", f->learn);
  app.add_flag("--wait", f->wait);
  app.add_flag("--quiet", f->quiet);
  AddLazyRestoreFlags(app, &lazy);
  p.AddReaderFlags(&reader);
  bool launch = false;
  if (int rc = p.Parse(args, &so.qemu_args, &launch); rc >= 0) return rc;
  if (app.count("--memory") && memory != "copy" && memory != "shared") {
    return p.UsageError("--memory: expected copy or shared, got \"" + memory + "\"");
  }
  so.shared_memory = memory == "shared";
  so.restore.engine.record_timeline = !f->timeline.empty();
  if (std::string bad = ApplyLazyRestoreFlags(app, lazy, &so.restore); !bad.empty()) return p.UsageError(bad);
  if (so.checkpoint.empty()) return p.UsageError("CKPT is required");
  if (launch && so.qemu_args.empty()) return p.UsageError("no QEMU arguments after --");
  // `-- qemu-system-x86_64 -m 1G ...`: the binary typed first, as after `strace --` or `perf record --`. QEMU's
  // own arguments never name an executable in first place (they start with '-', or are a disk image), so an
  // executable there is the binary; QEMU would otherwise fail with "Could not open 'qemu-system-x86_64'".
  if (launch) {
    std::string binary = cli::FindExecutable(so.qemu_args.front());
    if (!binary.empty()) {
      if (!so.qemu_binary.empty()) {
        return p.UsageError("the QEMU binary is given twice: --qemu " + so.qemu_binary + " and " +
                            so.qemu_args.front() + " after --");
      }
      so.qemu_binary = binary;
      so.qemu_args.erase(so.qemu_args.begin());
      if (so.qemu_args.empty()) return p.UsageError("no QEMU arguments after the binary " + binary);
    }
  }
  if (f->learn && so.resume) return p.UsageError("--learn-layout: a resumed restore goes on as it was");
  if (int rc = p.FinishReaderFlags(reader, &so.reader); rc >= 0) return rc;
  so.server_flags = cli::ReaderFlags(reader, so.reader);
  return -1;
}

// The callbacks that print (and log progress) while the restore runs.
void SetPrinting(QemuFlags* f, int64_t tool_wall_us, std::string* progress_text, cli::Progress* eager_progress,
                 const uint64_t* total_pages) {
  qemu::RestoreSessionOptions& so = f->session;
  const bool quiet = f->quiet;
  if (!quiet) {
    so.on_notice = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
  }
  so.on_warning = [](const std::string& line) {
    std::fprintf(stderr, "hlt-restore qemu: warning: %s\n", line.c_str());
  };
  so.on_launched = [](pid_t pid) {
    g_child = pid;
    signal(SIGINT, OnSignal);
    signal(SIGTERM, OnSignal);
    signal(SIGHUP, OnSignal);
  };
  qemu::CheckpointRestoreOptions& opt = so.restore;
  opt.on_running = [quiet](uint64_t us) {
    if (quiet) return;
    std::printf("guest running %.1f ms after the restore began\n", Ms(us));
    std::fflush(stdout);
  };
  opt.on_resumed = [quiet, tool_wall_us](uint64_t us) {
    if (quiet) return;
    std::printf("guest resumed: QEMU acknowledged the recovery %.1f ms after the restore began (%.1f ms after "
                "hlt-restore started)\n",
                Ms(us), Ms(uint64_t(WallUs() - tool_wall_us)));
    std::fflush(stdout);
  };
  if (!f->progress_log.empty()) {
    *progress_text = "wall_us,faults_blocking,faults_zero,blocks_read,bytes_read,requests,pages_sent,stall_us\n";
    opt.progress_interval_ms = 10;
    opt.on_progress = [progress_text](const RestoreEngineStats& e, const qemu::PushRestoreStats& c) {
      *progress_text += fmt::format("{},{},{},{},{},{},{},{}\n", WallUs(), e.faults_blocking, e.faults_zero,
                                    e.blocks_read, e.bytes_read, c.requests,
                                    c.preload_pages + c.request_pages + c.pushed_pages, e.stall_ns / 1000);
    };
  }
  // An eager restore loads everything before the guest runs: show how far it is on a terminal (cli::Progress
  // stays silent when stderr is not one). --memory shared is eager too.
  if ((!opt.lazy || so.shared_memory) && !quiet) {
    auto log_progress = std::move(opt.on_progress);
    opt.on_progress = [log_progress, eager_progress, total_pages](const RestoreEngineStats& e,
                                                                   const qemu::PushRestoreStats& c) {
      if (log_progress) log_progress(e, c);
      eager_progress->Update(c.preload_pages + c.request_pages + c.pushed_pages, *total_pages);
    };
    if (opt.progress_interval_ms == 0) opt.progress_interval_ms = 100;
  }
}

// The files the flags asked for, and the summary.
int Report(const QemuFlags& f, qemu::RestoreSession& session, const std::string& ckpt, int64_t tool_wall_us,
           const std::string& progress_text) {
  const qemu::CheckpointRestoreResult& res = session.result();
  Status s = Status::Ok();
  if (!f.record.empty()) s = WriteFile(f.record, FormatAccessTrace(res.requested, session.reader().regions()));
  if (s.ok() && !f.progress_log.empty()) s = WriteFile(f.progress_log, progress_text);
  if (s.ok() && !f.timeline.empty()) s = WriteFile(f.timeline, res.timeline_csv);
  if (s.ok() && !f.stats_json.empty()) {
    s = WriteFile(f.stats_json, qemu::RestoreSessionStatsJson(session, ckpt, tool_wall_us));
  }
  if (!s.ok()) return cli::Fail("hlt-restore qemu", s);
  if (f.quiet) return cli::kExitOk;
  std::fputs(qemu::RestoreSessionReportText(session, ckpt, tool_wall_us).c_str(), stdout);
  std::fflush(stdout);
  return cli::kExitOk;
}

// A failed restore: the guest left waiting for a resume, or the QEMU this restore started killed.
int ReportFailure(qemu::RestoreSession& session, const Status& s, const std::string& ckpt) {
  const std::string tool = "hlt-restore qemu";
  int rc = cli::Fail(tool, s);
  if (session.resumable()) {
    g_child = -1;
    std::cerr << tool << ": QEMU (pid " << session.qemu_pid() << ") keeps its guest waiting for the pages it lacks; "
              << "once the cause above is fixed, continue with: hlt-restore qemu " << ckpt << " --resume "
              << session.ResumeLocator() << "\n";
  } else if (session.process() && session.process()->Alive()) {
    std::cerr << tool << ": killing the QEMU this restore started (pid " << session.process()->pid() << ")\n";
  }
  return rc;
}

}  // namespace

int RestoreQemu(cli::Args& args) {
  const std::string tool = "hlt-restore qemu";
  const int64_t tool_wall_us = WallUs();
  const std::string usage = std::string(kQemuUsage) + kLazyRestoreFlagsHelp + kLearnLayoutHelp + cli::kReaderFlagsHelp;
  QemuFlags f;
  if (int rc = ParseQemuFlags(args, usage, &f); rc >= 0) return rc;
  qemu::RestoreSessionOptions& so = f.session;
  if (Status bad = qemu::CheckRestoreSessionOptions(so); !bad.ok()) return cli::UsageError(tool, bad.message(), usage);
  LearnedLayoutChoice learned;
  if (f.learn) {
    if (Status s = learned.Choose(&so.checkpoint, so.reader); !s.ok()) return cli::Fail(tool, s);
  }
  const std::string ckpt = so.checkpoint;
  // Format-spec 13: a missing key refuses the restore before QEMU starts (which it does while the index is read).
  if (Status keyed = cli::CheckKeyAvailable(ckpt, so.reader.keyring); !keyed.ok()) return cli::Fail(tool, keyed);
  std::string progress_text;
  cli::Progress eager_progress("loading");
  uint64_t total_pages = 0;
  SetPrinting(&f, tool_wall_us, &progress_text, &eager_progress, &total_pages);
  auto started = qemu::RestoreSession::Start(std::move(so));
  if (!started) return cli::Fail(tool, started.error());
  qemu::RestoreSession& session = **started;
  total_pages = session.reader().total_pages();
  if (!f.quiet) {
    std::fputs(qemu::RestoreSessionStartText(session, ckpt).c_str(), stdout);
    std::fflush(stdout);
  }
  Status s = session.Run();
  eager_progress.Finish();
  if (!s.ok()) return ReportFailure(session, s, ckpt);
  if (f.learn && session.options().restore.lazy) learned.LearnFrom(session.result().requested);
  if (int rc = Report(f, session, ckpt, tool_wall_us, progress_text); rc != cli::kExitOk) return rc;
  if (f.wait) {
    if (Status w = session.WaitForExit(); !w.ok()) return cli::Fail(tool, w);
    if (session.process() && !f.quiet) std::printf("%s\n", session.process()->Describe().c_str());
  }
  g_child = -1;
  session.Detach();
  return cli::kExitOk;
}

}  // namespace halite::restore
