// A detached restore keeps its guest alive when its worker dies: the detached process forks the worker that
// serves the pages and stays behind as its supervisor. When the worker dies of a signal (killed, crashed, out of
// memory) after its guest ran, the supervisor forks a new worker that takes the restore over with QEMU's
// postcopy recovery (--resume), as a broker would; nothing of the guest is lost while it waits.
#ifndef HALITE_LIBVIRT_RESTORE_SUPERVISOR_H_
#define HALITE_LIBVIRT_RESTORE_SUPERVISOR_H_

#include <functional>
#include <string>

#include "halite/status.h"

namespace halite::libvirt {

struct SupervisedRestore {
  // The status file both workers keep (state, domain, pid); the supervisor reads the domain from it and marks
  // the hand-over ("resuming") and a death it cannot repair ("failed").
  std::string status_path;
  // Runs the restore in the first worker; returns its exit code.
  std::function<int()> restore;
  // Runs `hlt-restore ... --resume DOMAIN` in a later worker; returns its exit code.
  std::function<int(const std::string& domain)> resume;
  // The write end of the pipe the detaching parent reads until its end: the first worker reports on it, and
  // the supervisor closes its own copy once that worker runs, so the parent returns when the worker says so.
  int report_fd = -1;
  // Workers started after the first at most: a worker that dies again and again is not retried for ever.
  int max_resumes = 5;
};

// What DetachRestore leaves in each process.
struct DetachedRestore {
  bool is_child = false;     // this is the detached process: it goes on with the restore
  int report_fd = -1;        // the child's: the write end of the pipe its parent reads (SupervisedRestore::report_fd)
  std::string first_report;  // the parent's: what the child wrote before it closed its end ("running ...")
};
// --detach: forks a process that outlives the caller (call before any thread exists). The child starts a session
// of its own, ignores SIGHUP and writes its stdout and stderr to `log_path`; the parent reads the child's report
// until the child closes its end (after its first line, or at its exit). Errors: kIoError (pipe, fork).
Result<DetachedRestore> DetachRestore(const std::string& log_path);

// A worker's report: its lines go to `fd` (the detaching parent's pipe, or stdout), written at once. A detached
// worker closes the pipe after its "running ..." line, so that the parent returns while the restore goes on.
class WorkerReport {
 public:
  WorkerReport(int fd, bool detached) : fd_(fd), detached_(detached) {}
  void Write(const std::string& line);
  // The parent is gone (a later worker): nothing is reported any more.
  void Drop() { fd_ = -1; }

 private:
  int fd_;
  bool detached_;
};

// The detaching parent's side: whether the child's first report (DetachedRestore::first_report) says its guest
// runs ("running ...").
inline bool ReportSaysRunning(const std::string& first_report) { return first_report.rfind("running", 0) == 0; }

// Call in a process without threads (forks). Returns the exit code of the last worker, or kSupervisorExitIo when a worker
// died and could not be resumed (before its guest ran, or too many times); the status file then says why.
int SuperviseRestore(const SupervisedRestore& job);
// What SuperviseRestore returns for a worker it could not resume: hlt-restore's exit code for an I/O error.
inline constexpr int kSupervisorExitIo = 3;

}  // namespace halite::libvirt

#endif  // HALITE_LIBVIRT_RESTORE_SUPERVISOR_H_
