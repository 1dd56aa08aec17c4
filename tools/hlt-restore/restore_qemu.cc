// hlt-restore qemu CKPT [options] [--qmp SOCKET | -- QEMU ARGS...]
// Restores a checkpoint made by `hlt-save qemu` into a stock QEMU, lazily through its postcopy (or eagerly).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>

#include "halite/image_server_process.h"
#include "halite/qemu/qemu_checkpoint.h"
#include "halite/qemu/qemu_launcher.h"
#include "common/cli_parser.h"
#include "hlt-restore/lazy_restore_flags.h"
#include "hlt-restore/restore_modes.h"
#include "halite/learned_layout.h"
#include "halite/qemu/qemu_restore_files.h"
#include "halite/qemu/qemu_restore_report.h"
#include "halite/qemu/qemu_restore_session.h"

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

void Print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// What the command line says, before the library sees it.
struct QemuFlags {
  qemu::RestoreSessionOptions session;
  qemu::RestoreFilePaths files;
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
  app.add_option("--record-trace", f->files.access_trace);
  app.add_option("--timeline", f->files.timeline);
  app.add_option("--stats-json", f->files.stats_json);
  app.add_option("--progress-log", f->files.progress_log);
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
  if (std::string bad = ApplyLazyRestoreFlags(app, lazy, &so.restore); !bad.empty()) return p.UsageError(bad);
  if (so.checkpoint.empty()) return p.UsageError("CKPT is required");
  if (launch && so.qemu_args.empty()) return p.UsageError("no QEMU arguments after --");
  // `-- qemu-system-x86_64 -m 1G ...`: the binary typed first.
  if (Status bad = qemu::TakeBinaryFromArgs(&so.qemu_args, &so.qemu_binary); !bad.ok()) {
    return p.UsageError(bad.message());
  }
  if (f->learn && so.resume) return p.UsageError("--learn-layout: a resumed restore goes on as it was");
  if (int rc = p.FinishReaderFlags(reader, &so.reader); rc >= 0) return rc;
  so.server_flags = ImageServerReaderFlags(so.reader, reader.keys);
  return -1;
}

// The callbacks that print while the restore runs, and the files' progress log.
void SetPrinting(QemuFlags* f, int64_t tool_wall_us, qemu::RestoreFiles* files, cli::Progress* eager_progress,
                 const uint64_t* total_pages) {
  qemu::RestoreSessionOptions& so = f->session;
  const bool quiet = f->quiet;
  if (!quiet) so.on_notice = [](const std::string& line) { Print(line + "\n"); };
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
  if (!quiet) {
    opt.on_running = [](uint64_t us) { Print(qemu::GuestRunningText(us)); };
    opt.on_resumed = [tool_wall_us](uint64_t us) {
      Print(qemu::GuestResumedText(us, uint64_t(qemu::WallClockUs() - tool_wall_us), "hlt-restore"));
    };
  }
  files->Prepare(&opt);
  // An eager restore loads everything before the guest runs: show how far it is on a terminal (cli::Progress
  // stays silent when stderr is not one). --memory shared is eager too.
  if ((!opt.lazy || so.shared_memory) && !quiet) {
    auto show = [eager_progress, total_pages](const RestoreEngineStats&, const qemu::PushRestoreStats& c) {
      eager_progress->Update(c.preload_pages + c.request_pages + c.pushed_pages, *total_pages);
    };
    qemu::AddRestoreProgress(&opt, show, 100);
  }
}

}  // namespace

int RestoreQemu(cli::Args& args) {
  const std::string tool = "hlt-restore qemu";
  const int64_t tool_wall_us = qemu::WallClockUs();
  const std::string usage = std::string(kQemuUsage) + kLazyRestoreFlagsHelp + kLearnLayoutHelp + cli::kReaderFlagsHelp;
  QemuFlags f;
  if (int rc = ParseQemuFlags(args, usage, &f); rc >= 0) return rc;
  qemu::RestoreSessionOptions& so = f.session;
  if (Status bad = qemu::CheckRestoreSessionOptions(so); !bad.ok()) return cli::UsageError(tool, bad.message(), usage);
  LearnedLayoutChoice learned;
  if (f.learn) {
    auto chosen = learned.Choose(&so.checkpoint, so.reader);
    if (!chosen) return cli::Fail(tool, chosen.error());
    Print(*chosen);
  }
  const std::string ckpt = so.checkpoint;
  // Format-spec 13: a missing key refuses the restore before QEMU starts (which it does while the index is read).
  if (Status keyed = CheckKeyAvailable(ckpt, so.reader.keyring); !keyed.ok()) return cli::Fail(tool, keyed);
  qemu::RestoreFiles files(f.files);
  cli::Progress eager_progress("loading");
  uint64_t total_pages = 0;
  SetPrinting(&f, tool_wall_us, &files, &eager_progress, &total_pages);
  auto started = qemu::RestoreSession::Start(std::move(so));
  if (!started) return cli::Fail(tool, started.error());
  qemu::RestoreSession& session = **started;
  total_pages = session.reader().total_pages();
  if (!f.quiet) Print(qemu::RestoreSessionStartText(session, ckpt));
  Status s = session.Run();
  eager_progress.Finish();
  if (!s.ok()) {
    const int rc = cli::Fail(tool, s);
    if (session.resumable()) g_child = -1;  // QEMU waits for a resume: a signal must not kill it now
    std::cerr << qemu::RestoreFailureText(session, tool, ckpt);
    return rc;
  }
  if (f.learn && session.options().restore.lazy) PrintLearnedLayout(learned.LearnFrom(session.result().requested));
  if (Status w = files.Write(session, ckpt, tool_wall_us); !w.ok()) return cli::Fail(tool, w);
  if (!f.quiet) Print(qemu::RestoreSessionReportText(session, ckpt, tool_wall_us));
  if (f.wait) {
    if (Status w = session.WaitForExit(); !w.ok()) return cli::Fail(tool, w);
    if (session.process() && !f.quiet) std::printf("%s\n", session.process()->Describe().c_str());
  }
  g_child = -1;
  session.Detach();
  return cli::kExitOk;
}

}  // namespace halite::restore
