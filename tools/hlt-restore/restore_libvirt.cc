// hlt-restore libvirt CKPT [--connect URI] [--name NAME] [--clone] [--disk-dir DIR] [--paused] [--detach]
//                          [--status-file FILE] [--memory copy|shared [--ram-dir DIR] [--image-dir DIR]]
//                          [lazy options]
// A checkpoint made by `hlt-save libvirt` back into a libvirt domain (or a clone of it), lazily.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "halite/image_server_process.h"
#include "halite/libvirt/libvirt_checkpoint.h"
#include "common/cli_parser.h"
#include "hlt-restore/lazy_restore_flags.h"
#include "halite/checkpoint_reader.h"
#include "halite/hint_files.h"
#include "halite/storage.h"
#include "halite/learned_layout.h"
#include "halite/libvirt/libvirt_dirs.h"
#include "hlt-restore/restore_modes.h"
#include "halite/libvirt/libvirt_restore_report.h"
#include "halite/libvirt/libvirt_restore_session.h"
#include "halite/libvirt/restore_status_file.h"
#include "halite/libvirt/restore_supervisor.h"

namespace halite::restore {

using libvirt::SupervisedRestore;
using libvirt::SuperviseRestore;
namespace {

const char* kLibvirtUsage =
    "usage: hlt-restore libvirt CKPT [--connect URI] [--name NAME] [--clone] [--disk-dir DIR] [--paused]\n"
    "                               [--sync-time|--no-sync-time] [--swtpm-dir DIR] [--warm-mib N]\n"
    "                               [--detach|--supervise] [--status-file FILE]\n"
    "                               [--memory copy|shared [--ram-dir DIR]] [--record-trace FILE] [lazy options]\n"
    "       hlt-restore libvirt CKPT --resume DOMAIN [--connect URI] [lazy options]\n"
    "Creates the checkpoint's domain under libvirt (transient: `virsh list`, `dominfo`, `destroy` and the\n"
    "console work as for any domain) and restores its memory lazily: the guest runs at once and its pages are\n"
    "served from the checkpoint. Each writable disk gets a qcow2 overlay of its own over the frozen image\n"
    "(DIR/NAME-TARGET.qcow2); a frozen image that changed since the save is refused. Prints the domain's name and\n"
    "the time to running, then keeps serving pages until every page is in (exit 0).\n"
    "  --connect URI          libvirt URI (default: libvirt's default; e.g. qemu:///system,\n"
    "                         qemu:///embed?root=DIR)\n"
    "  --name NAME            the domain's name (default: the saved one; a clone: SAVED-clone-XXXXXXXX)\n"
    "  --clone                a new identity: new UUID, new MAC addresses, new VM generation ID (when the saved\n"
    "                         domain has a <genid>: the guest kernel learns it was cloned), and files of its own:\n"
    "                         serial/console files and logs, unix sockets QEMU listens on (guest agent\n"
    "                         channels), VNC/SPICE sockets (fixed ports become automatic) get PATH.NAME; the\n"
    "                         saved NVRAM and TPM state are copied for it\n"
    "  --disk-dir DIR         where the disk overlays and the NVRAM copy (NAME_VARS.fd) go, created when missing\n"
    "                         (default: the checkpoint's directory; required for a checkpoint on an object store)\n"
    "  --sync-time            once every page is in, set the guest's clock to the host's through the guest agent\n"
    "                         (default for a clone; skipped, saying so, without an agent channel)\n"
    "  --no-sync-time         leave the guest's clock where the checkpoint left it\n"
    "  --swtpm-dir DIR        libvirt's swtpm storage directory, where a domain's TPM state goes under its UUID\n"
    "                         (default from the URI: R/lib/swtpm for qemu:///embed?root=R,\n"
    "                         /var/lib/libvirt/swtpm for qemu:///system, ~/.config/libvirt/qemu/swtpm for a session)\n"
    "  --paused               leave the guest paused (`virsh resume` starts it)\n"
    "  --warm-mib N           while libvirt starts QEMU, read the first N MiB (stored) of the restore order ahead,\n"
    "                         the working set first: into the page cache, or for a checkpoint on an object store\n"
    "                         into the --block-cache (without one nothing is read ahead); default 0: off\n"
    "  --record-trace FILE    once the restore is complete, write the pages the guest asked for, in order, as an\n"
    "                         access trace (for `hlt-restore replay` and `hlt-save relayout --access-trace`)\n"
    "  --detach               return as soon as the guest runs; a detached hlt-restore finishes the restore and\n"
    "                         records its outcome in the status file (its output in FILE.log)\n"
    "  --supervise            as --detach (a supervisor that resumes the restore when its worker dies, the\n"
    "                         status file), in the foreground: for a service manager (halite-restore@.service)\n"
    "  --status-file FILE     JSON {\"state\": \"starting\"|\"running\"|\"completed\"|\"failed\", \"domain\",\n"
    "                         \"uuid\", \"pid\", \"error\"}, replaced atomically at each change (default with\n"
    "                         --detach: CKPT.NAME.status)\n"
    "  --memory copy|shared   copy (default): every page goes into this QEMU's own memory, lazily.\n"
    "                         shared: the domain's RAM (pc.ram) is a private mapping of the checkpoint's image\n"
    "                         (the host image server, as hlt-restore qemu --memory shared), shared through the\n"
    "                         page cache with every clone of the checkpoint; the device state goes eagerly. libvirt\n"
    "                         names the RAM file under its memory backing directory: a RAM directory server\n"
    "                         (hlt-restore serve-ram-dir) mounted there, started on demand, points it at the image\n"
    "  --ram-dir DIR          libvirt's memory backing directory (default from the URI: R/lib/qemu/ram for\n"
    "                         qemu:///embed?root=R, /var/lib/libvirt/qemu/ram for qemu:///system,\n"
    "                         ~/.config/libvirt/qemu/ram for qemu:///session, or memory_backing_dir/libvirt/qemu\n"
    "                         when qemu.conf sets it)\n"
    "  --image-dir DIR        where image servers mount (default /run/halite/images)\n"
    "  --resume DOMAIN        take over the lazy restore of DOMAIN whose hlt-restore died: its QEMU waits in\n"
    "                         postcopy-paused; the restore's record ($HALITE_RUN_DIR or /run/halite/restores/\n"
    "                         qemu-PID.json) must name CKPT's file_id; then the rest is served as before\n";

void Print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// --detach: the restore runs in a child that outlives us (libvirt::DetachRestore). The parent returns the child's
// first line ("running ..." or "failed ...") and its verdict; the child gets the write end for its report.
int Detach(const std::string& tool, const std::string& log, int* report_fd) {
  auto detached = libvirt::DetachRestore(log);
  if (!detached) return cli::Fail(tool, detached.error());
  if (detached->is_child) {
    *report_fd = detached->report_fd;
    return -1;  // the child goes on
  }
  const std::string& text = detached->first_report;
  if (libvirt::ReportSaysRunning(text)) {
    std::fputs(text.c_str(), stdout);
    return cli::kExitOk;
  }
  std::cerr << tool << ": " << (text.empty() ? "the detached restore ended without a word\n" : text);
  return cli::kExitIo;
}

// One restore of hlt-restore libvirt as the flags describe it; Run is called again by a supervisor to resume.
struct LibvirtJob {
  std::string tool = "hlt-restore libvirt";
  std::chrono::steady_clock::time_point tool_start = std::chrono::steady_clock::now();  // reset by a resume
  std::string ckpt, uri, status_path, ram_dir, image_dir = "/run/halite/images", resume_domain, trace_path;
  bool detach = false, supervise = false, learn = false, shared_memory = false;
  ReaderOptions ropts;
  cli::ReaderFlagValues reader_flags;
  libvirt::LibvirtRestoreOptions opt;
  // Lines for the detaching parent (or stdout): once it has "running ...", it returns and we go on quietly.
  libvirt::WorkerReport report{STDOUT_FILENO, false};

  int Fail(const Status& s) {
    if (detach) report.Write("failed: " + s.ToString() + "\n");
    return cli::Fail(tool, s);
  }
  double MsSinceStart() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tool_start).count();
  }
  // The restore itself, or with `resume` a domain's restore taken over (--resume, or a detached restore's
  // supervisor after its worker died).
  int Run(const std::string& resume);
  Status WriteTrace(const std::vector<PageRef>& requested) const;
};

// The pages the guest asked for as an access trace (REGION:PAGE lines): the regions' names from the checkpoint.
Status LibvirtJob::WriteTrace(const std::vector<PageRef>& requested) const {
  auto reader = CheckpointReader::Open(ckpt, ropts);
  if (!reader) return reader.error();
  const std::string text = FormatAccessTrace(requested, (*reader)->regions());
  auto sink = CreateAtomicFileSink(trace_path);
  if (!sink) return sink.error();
  if (Status s = (*sink)->Append({reinterpret_cast<const uint8_t*>(text.data()), text.size()}); !s.ok()) return s;
  return (*sink)->Commit();
}

int LibvirtJob::Run(const std::string& resume) {
  libvirt::DomainRestoreOptions o;
  LearnedLayoutChoice learned;
  if (learn && resume.empty()) {
    auto chosen = learned.Choose(&ckpt, ropts);
    if (!chosen) {
      libvirt::StatusFile(status_path).Write("failed", chosen.error().ToString());
      return Fail(chosen.error());
    }
    Print(*chosen);
  }
  o.connect_uri = uri;
  o.checkpoint = ckpt;
  o.reader = ropts;
  o.restore = opt;
  o.resume_domain = resume;
  o.shared_memory = shared_memory;
  o.ram_dir = ram_dir;
  o.image_dir = image_dir;
  o.server_flags = ImageServerReaderFlags(ropts, reader_flags.keys);
  o.status_path = status_path;
  o.on_notice = [](const std::string& line) { Print(line + "\n"); };
  o.on_warning = [this](const std::string& line) {
    std::fprintf(stderr, "%s: warning: %s\n", tool.c_str(), line.c_str());
  };
  if (!resume.empty()) {
    o.restore.qemu.on_resumed = [this, &resume](uint64_t) { Print(libvirt::DomainResumedText(resume, MsSinceStart())); };
    libvirt::LibvirtRestoreResult res;
    Status s = libvirt::RestoreDomain(std::move(o), &res);
    if (!s.ok()) return Fail(s);
    Print(libvirt::ResumedRestoreText(resume, res));
    return cli::kExitOk;
  }
  std::string started_name;
  double running_ms = 0;
  o.restore.on_started = [&started_name](const std::string& name, const std::string&) { started_name = name; };
  o.restore.qemu.on_running = [this, &started_name, &running_ms](uint64_t) {
    running_ms = MsSinceStart();
    report.Write(libvirt::DomainRunningText(started_name, running_ms, detach ? status_path : ""));
  };
  libvirt::LibvirtRestoreResult res;
  const bool lazy = opt.qemu.lazy && !shared_memory;
  Status s = libvirt::RestoreDomain(std::move(o), &res);
  if (!s.ok()) return Fail(s);
  if (learn && lazy) PrintLearnedLayout(learned.LearnFrom(res.qemu.requested));
  if (!trace_path.empty()) {
    if (Status t = WriteTrace(res.qemu.requested); !t.ok()) return Fail(t);
  }
  Print(libvirt::RestoredDomainReportText(ckpt, opt.clone, res, uint64_t(running_ms * 1000)));
  return cli::kExitOk;
}

// Parses the flags into *job; returns an exit code (usage or help) when the tool stops here, -1 to go on.
int ParseLibvirtFlags(cli::Args& args, LibvirtJob* job) {
  LibvirtJob& j = *job;
  libvirt::LibvirtRestoreOptions& opt = j.opt;
  std::string usage = std::string(kLibvirtUsage) + kLazyRestoreFlagsHelp + kLearnLayoutHelp + cli::kReaderFlagsHelp;
  std::string memory;
  bool sync_time = false;
  cli::Parser p(j.tool, usage);
  CLI::App& app = p.app();
  LazyRestoreFlagValues lazy;
  app.add_option("CKPT", j.ckpt);
  app.add_option("--connect,-c", j.uri);
  app.add_option("--name", opt.name);
  app.add_flag("--clone", opt.clone);
  app.add_option("--disk-dir,--clone-dir", opt.disk_dir);
  app.add_flag("--paused", opt.paused);
  app.add_flag("--sync-time,!--no-sync-time", sync_time);
  app.add_option("--swtpm-dir", opt.swtpm_storage_dir);
  app.add_flag("--detach", j.detach);
  app.add_flag("--supervise", j.supervise);
  app.add_flag("--learn-layout", j.learn);
  app.add_option("--status-file", j.status_path);
  app.add_option("--memory", memory);
  app.add_option("--ram-dir", j.ram_dir);
  app.add_option("--resume", j.resume_domain);
  app.add_option("--image-dir", j.image_dir);
  app.add_option("--record-trace", j.trace_path);
  uint64_t warm_mib = 0;
  app.add_option("--warm-mib", warm_mib);
  AddLazyRestoreFlags(app, &lazy);
  p.AddReaderFlags(&j.reader_flags);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (app.count("--memory") && memory != "copy" && memory != "shared") {
    return p.UsageError("--memory: expected copy or shared, got \"" + memory + "\"");
  }
  j.shared_memory = memory == "shared";
  if (std::string bad = ApplyLazyRestoreFlags(app, lazy, &opt.qemu); !bad.empty()) return p.UsageError(bad);
  if (j.ckpt.empty()) return p.UsageError("CKPT is required");
  if (int rc = p.FinishReaderFlags(j.reader_flags, &j.ropts); rc >= 0) return rc;
  if (j.shared_memory && AnyLazyRestoreFlag(app)) {
    return p.UsageError("--memory shared sends only the device state, eagerly: the lazy options do not apply");
  }
  if (!j.shared_memory && (!j.ram_dir.empty() || j.image_dir != "/run/halite/images")) {
    return p.UsageError("--ram-dir and --image-dir go with --memory shared");
  }
  if (!j.resume_domain.empty() &&
      (j.shared_memory || j.detach || j.supervise || opt.clone || !opt.name.empty() || !opt.qemu.lazy || j.learn)) {
    return p.UsageError("--resume continues a lazy restore as it was: no --memory shared, --detach, --supervise, "
                        "--clone, --name, --eager or --learn-layout");
  }
  if (j.detach && j.supervise) return p.UsageError("--detach or --supervise, not both");
  if (!j.trace_path.empty() &&
      (j.shared_memory || !opt.qemu.lazy || j.detach || j.supervise || !j.resume_domain.empty())) {
    return p.UsageError("--record-trace records a whole lazy restore in the foreground: no --memory shared, "
                        "--eager, --detach, --supervise or --resume");
  }
  if (warm_mib > (uint64_t(1) << 20)) return p.UsageError("--warm-mib: at most 1048576");
  opt.warm_restore_order_bytes = warm_mib << 20;
  opt.sync_time = app.count("--sync-time") ? sync_time : opt.clone;
  if ((j.detach || j.supervise) && j.status_path.empty()) j.status_path = libvirt::DefaultStatusPath(j.ckpt, opt.name);
  return -1;
}

}  // namespace

int RestoreLibvirt(cli::Args& args) {
  LibvirtJob job;
  if (int rc = ParseLibvirtFlags(args, &job); rc >= 0) return rc;
  if (!job.detach && !job.supervise) return job.Run(job.resume_domain);
  // The detached process (or with --supervise this one): it supervises the worker that restores, and resumes the
  // restore when that dies. With --supervise the workers write to our stdout, which the supervisor keeps open.
  SupervisedRestore supervised;
  if (job.detach) {
    int report_fd = -1;
    if (const int rc = Detach(job.tool, job.status_path + ".log", &report_fd); rc >= 0) return rc;  // the parent
    job.report = libvirt::WorkerReport(report_fd, true);
    supervised.report_fd = report_fd;
  }
  supervised.status_path = job.status_path;
  supervised.restore = [&] { return job.Run(""); };
  supervised.resume = [&](const std::string& domain) {
    if (job.detach) job.report.Drop();  // the parent is gone
    job.tool_start = std::chrono::steady_clock::now();
    return job.Run(domain);
  };
  return SuperviseRestore(supervised);
}

}  // namespace halite::restore
