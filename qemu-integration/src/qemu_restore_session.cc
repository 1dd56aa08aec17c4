// A restore session into QEMU (qemu_restore_session.h): launch or attach, copy or shared memory, the resume record.
#include "halite/qemu/qemu_restore_session.h"

#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "halite/checkpoint_location.h"
#include "halite/qemu/qemu_migration_control.h"
#include "halite/qemu/qemu_saved_state.h"
#include "halite/qemu/qemu_shared_memory.h"

namespace halite::qemu {
namespace {

int64_t WallUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Absolute paths in the record: whoever resumes may run elsewhere.
std::string Absolute(const std::string& path) {
  std::error_code ec;
  const auto a = std::filesystem::absolute(path, ec);
  return ec || path.empty() ? path : a.string();
}

std::string HexId(const FileId& id) {
  std::string s;
  for (uint8_t b : id) s += fmt::format("{:02x}", b);
  return s;
}

// A restore that failed because the QEMU it started died (its monitor or migration socket reset) says so: the
// death, not the socket, is the cause. QEMU may be seen to exit a moment after its sockets close.
Status WithQemuDeath(const Status& s, QemuProcess* proc, bool shared_memory) {
  if (!proc || !proc->Wait(1000)) return s;
  const auto st = proc->exit_status();
  if (!st || !WIFSIGNALED(*st)) return s;
  return Status(s.code(), s.message() + "; " + DescribeQemuDeath(*proc, shared_memory), s.sys_errno());
}

}  // namespace

std::string DescribeQemuDeath(QemuProcess& proc, bool shared_memory) {
  std::string why = proc.Describe();
  const auto st = proc.exit_status();
  if (shared_memory && st && WIFSIGNALED(*st) && WTERMSIG(*st) == SIGBUS) {
    why += " (a page of the shared image could not be read: the image server refused a block that failed "
           "verification, or lost the checkpoint; its .stats counts read_errors)";
  }
  return why;
}

RestoreSession::RestoreSession(RestoreSessionOptions options) : options_(std::move(options)) {}

RestoreSession::~RestoreSession() = default;  // a QemuProcess not released is killed by its destructor

void RestoreSession::Notice(const std::string& line) const {
  if (options_.on_notice) options_.on_notice(line);
}
void RestoreSession::Warning(const std::string& line) const {
  if (options_.on_warning) options_.on_warning(line);
}

Result<std::unique_ptr<RestoreSession>> RestoreSession::Start(RestoreSessionOptions options) {
  std::unique_ptr<RestoreSession> s(new RestoreSession(std::move(options)));
  s->times_.start_wall_us = WallUs();
  s->launch_ = !s->options_.qemu_args.empty();
  s->resuming_ = s->options_.resume;
  HLT_RETURN_IF_ERROR(CheckRestoreSessionOptions(s->options_));
  if (s->resuming_ && !s->options_.qemu_dir.empty()) HLT_RETURN_IF_ERROR(s->ReadPriorRecord());
  if (s->options_.shared_memory) HLT_RETURN_IF_ERROR(s->PrepareSharedMemory());
  HLT_RETURN_IF_ERROR(s->LaunchAndOpen());
  if (s->resuming_) {
    HLT_RETURN_IF_ERROR(s->CheckResumeTarget());
  } else if (s->options_.restore.lazy && s->qemu_pid_ > 0) {
    s->WriteFreshRecord();
  }
  return s;
}

Status CheckRestoreSessionOptions(const RestoreSessionOptions& o) {
  const bool launch = !o.qemu_args.empty();
  if (o.checkpoint.empty()) return Status::InvalidArgument("no checkpoint given");
  if (o.resume) {
    if (launch) {
      return Status::InvalidArgument(
          "--resume takes over a running QEMU: give --qmp SOCKET or --qemu-dir DIR, not QEMU ARGS");
    }
    if (o.qmp_socket.empty() == o.qemu_dir.empty()) {
      return Status::InvalidArgument("--resume needs --qmp SOCKET or --qemu-dir DIR (one of them)");
    }
    if (!o.restore.lazy || o.shared_memory) {
      return Status::InvalidArgument("--resume continues a lazy restore (no --eager, no --memory shared)");
    }
    return Status::Ok();
  }
  if (launch == !o.qmp_socket.empty()) {
    return Status::InvalidArgument("give either --qmp SOCKET or -- QEMU ARGS... (one of them)");
  }
  for (const auto& a : o.qemu_args) {
    if (a == "-incoming" || a == "--incoming") {
      return Status::InvalidArgument("QEMU ARGS must not contain -incoming (hlt-restore adds -incoming defer)");
    }
  }
  if (o.shared_memory) {
    if (!launch) return Status::InvalidArgument("--memory shared starts QEMU itself: give -- QEMU ARGS");
    if (std::string bad = ConflictingMemoryArgument(o.qemu_args); !bad.empty()) {
      return Status::InvalidArgument("QEMU ARGS choose the memory backend (" + bad +
                                     "): --memory shared adds its own");
    }
  }
  return Status::Ok();
}

// --resume --qemu-dir: the record of the interrupted restore says which QEMU and which checkpoint.
Status RestoreSession::ReadPriorRecord() {
  HLT_ASSIGN_OR_RETURN(RestoreRecord rec, ReadRestoreRecord(options_.qemu_dir + "/" + kRecordFileName));
  prior_ = std::move(rec);
  options_.qmp_socket = prior_->qmp_socket;
  auto started = ProcessStartTime(prior_->qemu_pid);
  bool gone = !started || *started != prior_->qemu_start_time;
  if (!gone) {
    HLT_ASSIGN_OR_RETURN(gone, DecideFromLiveQemu());
  }
  return gone ? RestartFromRecord() : Status::Ok();
}

// The recorded QEMU is alive. Where did its restore stop? Before QEMU was given a stream ("none"): restore into it
// afresh. In the precopy phase (the stream cut before the guest ran): QEMU fails its load; it is ours and its guest
// never ran, so it goes and an identical one starts (RestartFromRecord). Postcopy: resumed.
// Returns whether that QEMU is gone now.
Result<bool> RestoreSession::DecideFromLiveQemu() {
  auto probe = QmpClient::Connect(options_.qmp_socket, 5000);
  auto m = probe ? QueryMigration(**probe) : Result<MigrationStatus>(probe.error());
  const std::string st = m ? m->status : "";
  if (st == "none") {
    resuming_ = false;
    if (options_.restore.unix_socket_path.empty()) options_.restore.unix_socket_path = prior_->incoming_socket;
    Notice(fmt::format("QEMU pid {} never received a stream: restoring into it from the start", prior_->qemu_pid));
    return false;
  }
  if (m && (st.rfind("postcopy", 0) == 0 || st == "completed")) return false;
  if (prior_->guest_ran) {
    // Its guest ran: whatever the monitor says, that QEMU holds a live guest and is never replaced.
    return Status::IoError("QEMU pid " + std::to_string(prior_->qemu_pid) +
                           " holds the guest of the interrupted restore but its migration is not resumable now (" +
                           (m ? "status " + st : m.error().message()) + "); try again");
  }
  Notice(fmt::format("QEMU pid {} stopped in its precopy phase ({}), before its guest ran: replacing it",
                     prior_->qemu_pid, m ? st : m.error().message()));
  kill(prior_->qemu_pid, SIGKILL);
  for (int i = 0; i < 500 && ProcessStartTime(prior_->qemu_pid).has_value(); ++i) usleep(10000);
  return true;
}

// QEMU exits when its restore dies before the guest runs (a cut stream in the precopy phase fails its load):
// nothing of the guest is lost, so the same QEMU starts again and is restored from the start.
Status RestoreSession::RestartFromRecord() {
  const std::string who = "QEMU pid " + std::to_string(prior_->qemu_pid) + " of the interrupted restore is gone";
  if (prior_->guest_ran) {
    return Status::NotFound(who + " after its guest ran: the guest's memory went with it, there is nothing to "
                                  "resume (restore " + options_.checkpoint + " afresh, without --resume)");
  }
  if (prior_->qemu_args.empty()) {
    return Status::NotFound(who + ", and its record does not say how to start it again");
  }
  Notice(who + " before its guest ran: starting it again and restoring from the start");
  launch_ = true;
  resuming_ = false;
  options_.qmp_socket.clear();
  options_.qemu_binary = prior_->qemu_binary;
  options_.qemu_args = prior_->qemu_args;
  if (options_.restore.unix_socket_path.empty()) options_.restore.unix_socket_path = prior_->incoming_socket;
  return Status::Ok();
}

// --memory shared: the image server for the checkpoint found or started, and QEMU's RAM backend pointed at it.
Status RestoreSession::PrepareSharedMemory() {
  for (const std::string& w : DiscardingDeviceWarnings(options_.qemu_args)) Warning(w);
  HLT_ASSIGN_OR_RETURN(reader_, CheckpointReader::Open(options_.checkpoint, options_.reader));
  HLT_RETURN_IF_ERROR(ReadSavedVmState(*reader_).status());
  HLT_ASSIGN_OR_RETURN(SharedMemoryPlan plan,
                       qemu::PrepareSharedMemory(options_.server_program, options_.checkpoint, *reader_, options_.image_dir,
                                                 options_.reader.parent_dirs, options_.server_flags));
  options_.qemu_args.insert(options_.qemu_args.end(), plan.qemu_args.begin(), plan.qemu_args.end());
  options_.restore.lazy = false;
  options_.restore.shared_regions = plan.shared_regions;
  image_path_ = plan.image_path;
  started_server_ = plan.started_server;
  Notice("memory shared: QEMU maps " + image_path_ + " privately (image server " +
         (started_server_ ? "started" : "already serving") + ")");
  return Status::Ok();
}

// QEMU starts (hundreds of milliseconds: it loads firmware and -kernel) while the checkpoint's index is read.
Status RestoreSession::LaunchAndOpen() {
  if (launch_ && !options_.qemu_dir.empty() && mkdir(options_.qemu_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IoError(options_.qemu_dir + ": cannot create the QEMU directory", errno);
  }
  std::optional<Result<std::unique_ptr<QemuProcess>>> launched;
  std::thread launcher;
  if (launch_) {
    QemuLaunchOptions lo;
    lo.binary = options_.qemu_binary;
    lo.args = options_.qemu_args;
    lo.work_dir = options_.qemu_dir;
    lo.incoming_defer = true;
    lo.inherit_stdout = false;    // QEMU outlives us: our stdout may be a pipe someone waits on
    lo.kill_with_parent = false;  // the guest outlives the restorer; on_launched lets it cover an interrupted one
    launcher = std::thread([this, &launched, lo] {
      launched = QemuProcess::Start(lo);
      times_.qemu_ready_wall_us = WallUs();
    });
  }
  Status checked = Status::Ok();
  if (!reader_) {
    auto opened = CheckpointReader::Open(options_.checkpoint, options_.reader);
    if (opened) reader_ = std::move(*opened);
    checked = opened.status();
  }
  // A checkpoint of another VMM is refused before anything is sent.
  if (checked.ok()) checked = ReadSavedVmState(*reader_).status();
  times_.open_done_wall_us = WallUs();
  if (launch_) {
    launcher.join();
    if (!*launched) return launched->error();
    proc_ = std::move(**launched);
    if (options_.on_launched) options_.on_launched(proc_->pid());
    qmp_ = proc_->TakeQmp();
  }
  HLT_RETURN_IF_ERROR(checked);  // a launched QEMU is killed on the way out
  if (!launch_) {
    HLT_ASSIGN_OR_RETURN(qmp_, QmpClient::Connect(options_.qmp_socket, 5000));
  }
  qemu_pid_ = proc_ ? proc_->pid() : qmp_->PeerPid();
  file_id_ = HexId(reader_->file_id());
  return Status::Ok();
}

// --resume: the record names this QEMU (pid and start time) and this checkpoint (file_id).
Status RestoreSession::CheckResumeTarget() {
  const std::string& socket = options_.qmp_socket;
  if (!prior_) {
    if (qemu_pid_ <= 0) {
      return Status::Unsupported(socket + ": cannot tell QEMU's pid from this QMP socket, so no restore record "
                                          "can be found: use --qemu-dir");
    }
    HLT_ASSIGN_OR_RETURN(RestoreRecord rec, ReadRestoreRecord(RecordPathForPid(qemu_pid_)));
    prior_ = std::move(rec);
  }
  auto started = ProcessStartTime(qemu_pid_);
  if (prior_->qemu_pid != qemu_pid_ || !started || *started != prior_->qemu_start_time) {
    return Status::InvalidArgument(fmt::format(
        "the restore record names QEMU pid {} (started at tick {}), but {} is QEMU pid {}: that restore's QEMU "
        "is gone",
        prior_->qemu_pid, prior_->qemu_start_time, socket, qemu_pid_));
  }
  if (prior_->file_id != file_id_) {
    return Status::InvalidArgument(fmt::format(
        "{} has file_id {}, but QEMU pid {} was restoring {} (file_id {}): resume with that checkpoint",
        options_.checkpoint, file_id_, qemu_pid_, prior_->checkpoint, prior_->file_id));
  }
  options_.restore.resume = true;
  options_.restore.qemu_pid = qemu_pid_;
  if (options_.restore.unix_socket_path.empty()) options_.restore.unix_socket_path = prior_->incoming_socket;
  record_paths_.push_back(RecordPathForPid(qemu_pid_));
  if (!prior_->qemu_dir.empty()) record_paths_.push_back(prior_->qemu_dir + "/" + kRecordFileName);
  return Status::Ok();
}

// Written before anything is sent: from here on a dead restorer leaves a restore someone can resume.
void RestoreSession::WriteFreshRecord() {
  RestoreRecord& rec = written_record_;
  rec.checkpoint = IsObjectStoreUri(options_.checkpoint) ? options_.checkpoint : Absolute(options_.checkpoint);
  rec.file_id = file_id_;
  rec.qemu_pid = qemu_pid_;
  if (auto started = ProcessStartTime(qemu_pid_)) rec.qemu_start_time = *started;
  rec.qmp_socket = Absolute(proc_ ? proc_->qmp_socket_path() : options_.qmp_socket);
  rec.incoming_socket = Absolute(options_.restore.unix_socket_path);
  if (proc_) {
    rec.qemu_dir = Absolute(proc_->work_dir());
    rec.qemu_binary = options_.qemu_binary;
    rec.qemu_args = options_.qemu_args;
  } else if (prior_) {  // restoring afresh into the QEMU an interrupted restore launched
    rec.qemu_dir = prior_->qemu_dir;
    rec.qemu_binary = prior_->qemu_binary;
    rec.qemu_args = prior_->qemu_args;
  }
  if (!rec.qemu_dir.empty()) record_paths_.push_back(rec.qemu_dir + "/" + kRecordFileName);
  record_paths_.push_back(RecordPathForPid(qemu_pid_));
  for (const std::string& path : record_paths_) {
    if (Status w = WriteRestoreRecord(rec, path); !w.ok()) {
      Warning(w.message() + " (this restore cannot be resumed from there)");
    }
  }
  // Once the guest runs, a QEMU that goes takes its memory with it: the record says so.
  auto on_running = std::move(options_.restore.on_running);
  options_.restore.on_running = [this, on_running](uint64_t us) {
    written_record_.guest_ran = true;
    for (const std::string& path : record_paths_) (void)WriteRestoreRecord(written_record_, path);
    if (on_running) on_running(us);
  };
}

Status RestoreSession::Run() {
  Status s = RestoreCheckpointIntoQemu(*reader_, *qmp_, options_.restore, &result_, proc_.get());
  if (s.ok()) {
    // The restore is complete: nothing is left to resume.
    for (const std::string& path : record_paths_) unlink(path.c_str());
    return s;
  }
  s = WithQemuDeath(s, proc_.get(), options_.shared_memory);
  // The guest ran and QEMU waits in postcopy-paused: unless the checkpoint itself is damaged, what stopped the
  // restore (storage gone, the network, this process's resources) can be fixed and the restore resumed, so QEMU
  // stays. Otherwise a launched QEMU is killed (it cannot continue); an attached one is left as it is.
  auto m = options_.restore.lazy && s.code() != StatusCode::kCorrupt ? QueryMigration(*qmp_)
                                                                      : Result<MigrationStatus>(s);
  if (m && m->status == "postcopy-paused" && !record_paths_.empty()) {
    resumable_ = true;
    if (proc_) proc_->Release();
  }
  return s;
}

std::string RestoreSession::ResumeLocator() const {
  return proc_ ? "--qemu-dir " + proc_->work_dir() : "--qmp " + options_.qmp_socket;
}

Status RestoreSession::WaitForExit() {
  if (proc_) {
    int status = 0;
    for (;;) {
      auto st = proc_->Wait(3600 * 1000);
      if (st) {
        status = *st;
        break;
      }
    }
    // A guest that shuts down makes QEMU exit; a signal is a death.
    if (WIFSIGNALED(status)) return Status::IoError(DescribeQemuDeath(*proc_, options_.shared_memory));
    return Status::Ok();
  }
  // Attached: QEMU's monitor closes when it exits (a timeout just means it is still running).
  for (;;) {
    auto ev = qmp_->WaitForEvent("SHUTDOWN", 3600 * 1000);
    if (!ev && ev.error().message().find("no answer within") == std::string::npos) return Status::Ok();
  }
}

void RestoreSession::Detach() {
  if (proc_) proc_->Release();
}

}  // namespace halite::qemu
