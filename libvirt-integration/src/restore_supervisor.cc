#include "halite/libvirt/restore_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include "halite/libvirt/restore_status_file.h"

namespace halite::libvirt {
namespace {

pid_t StartWorker(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int rc = body();
    std::fflush(nullptr);
    _exit(rc);
  }
  return pid;
}

int WaitWorker(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

}  // namespace

Result<DetachedRestore> DetachRestore(const std::string& log_path) {
  int p[2];
  if (pipe(p) != 0) return Status::IoError("pipe", errno);
  const pid_t pid = fork();
  if (pid < 0) return Status::IoError("fork", errno);
  DetachedRestore d;
  if (pid == 0) {
    close(p[0]);
    setsid();
    signal(SIGHUP, SIG_IGN);
    const int out = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out >= 0) {
      dup2(out, STDOUT_FILENO);
      dup2(out, STDERR_FILENO);
      close(out);
    }
    d.is_child = true;
    d.report_fd = p[1];
    return d;
  }
  close(p[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) d.first_report.append(buf, size_t(n));
  }
  close(p[0]);
  return d;
}

void WorkerReport::Write(const std::string& line) {
  if (fd_ < 0) return;
  (void)!write(fd_, line.data(), line.size());
  if (detached_ && fd_ != STDOUT_FILENO && ReportSaysRunning(line)) {
    close(fd_);
    fd_ = -1;
  }
}

int SuperviseRestore(const SupervisedRestore& job) {
  pid_t worker = StartWorker(job.restore);
  if (worker < 0) {
    std::fprintf(stderr, "hlt-restore: fork: %s\n", strerror(errno));
    return kSupervisorExitIo;
  }
  if (job.report_fd >= 0) close(job.report_fd);
  for (int resumes = 0;; ++resumes) {
    const int status = WaitWorker(worker);
    if (status < 0) return kSupervisorExitIo;
    if (WIFEXITED(status)) return WEXITSTATUS(status);  // the worker's own verdict, in the status file too
    const int sig = WTERMSIG(status);
    const StatusFile::Contents st = StatusFile::Read(job.status_path);
    StatusFile file(job.status_path);
    file.SetDomain(st.domain, st.uuid);
    const std::string death = fmt::format("the restore's worker (pid {}) died of signal {} ({})", worker, sig,
                                          strsignal(sig));
    std::printf("%s while the restore was %s\n", death.c_str(), st.state.empty() ? "starting" : st.state.c_str());
    // "running" (or "resuming": a resume died): QEMU waits in postcopy-paused for a new source. Before that the
    // guest never ran; what is left of the domain is reported, not guessed at.
    if ((st.state != "running" && st.state != "resuming") || st.domain.empty()) {
      file.Write("failed", death + " before its guest ran: restore again");
      return kSupervisorExitIo;
    }
    if (resumes == job.max_resumes) {
      file.Write("failed",
                  fmt::format("{}; {} resumes already: not again (resume by hand with --resume {})", death, resumes,
                              st.domain));
      return kSupervisorExitIo;
    }
    // The first resume at once (the guest waits); a worker that keeps dying is replaced more and more slowly.
    if (resumes > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(resumes - 1, 4)));
    file.Write("resuming",
                fmt::format("{}; its supervisor (pid {}) resumes it (resume {} of at most {})", death, getpid(),
                            resumes + 1, job.max_resumes));
    std::printf("resuming the restore of domain %s in a new worker (resume %d of at most %d)\n", st.domain.c_str(),
                resumes + 1, job.max_resumes);
    const std::string domain = st.domain;
    worker = StartWorker([&] { return job.resume(domain); });
    if (worker < 0) {
      file.Write("failed", std::string("fork: ") + strerror(errno));
      return kSupervisorExitIo;
    }
  }
}

}  // namespace halite::libvirt
