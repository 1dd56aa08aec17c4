#include "halite/qemu/qemu_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace halite::qemu {
namespace {

using Clock = std::chrono::steady_clock;

bool IsExecutable(const std::string& p) { return access(p.c_str(), X_OK) == 0; }
// An executable regular file (not a directory someone may enter).
bool IsExecutableFile(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && IsExecutable(p);
}

// The first DIR/name, for DIR in $PATH (`unset_path` when PATH is not set; an empty DIR is "."), that `ok`
// accepts; empty when none.
std::string FirstOnPath(const std::string& name, const char* unset_path, bool (*ok)(const std::string&)) {
  const char* path = getenv("PATH");
  std::stringstream ss(path ? path : unset_path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (ok(cand)) return cand;
  }
  return "";
}

// `name` itself when it contains a slash, else the first executable `name` in $PATH (empty when none).
std::string SearchPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  return FirstOnPath(name, "/usr/bin:/bin", IsExecutable);
}

}  // namespace

std::string FindQemuBinary() {
  if (const char* env = getenv("HALITE_QEMU"); env != nullptr && *env != '\0') {
    return IsExecutable(env) ? std::string(env) : std::string();
  }
  return FirstOnPath("qemu-system-x86_64", "/usr/bin:/bin", IsExecutable);
}

std::string FindExecutable(const std::string& arg) {
  if (arg.empty() || arg[0] == '-') return {};
  if (arg.find('/') != std::string::npos) return IsExecutableFile(arg) ? arg : std::string();
  return FirstOnPath(arg, "/usr/local/bin:/usr/bin:/bin", IsExecutableFile);
}

Status TakeBinaryFromArgs(std::vector<std::string>* args, std::string* binary) {
  if (args->empty()) return Status::Ok();
  const std::string found = FindExecutable(args->front());
  if (found.empty()) return Status::Ok();
  if (!binary->empty()) {
    return Status::InvalidArgument("the QEMU binary is given twice: --qemu " + *binary + " and " + args->front() +
                                   " after --");
  }
  *binary = found;
  args->erase(args->begin());
  if (args->empty()) return Status::InvalidArgument("no QEMU arguments after the binary " + found);
  return Status::Ok();
}

Result<std::unique_ptr<QemuProcess>> QemuProcess::Start(QemuLaunchOptions options) {
  std::unique_ptr<QemuProcess> p(new QemuProcess());
  const std::string binary = options.binary.empty() ? FindQemuBinary() : SearchPath(options.binary);
  if (binary.empty()) {
    return Status::NotFound(options.binary.empty() ? "no QEMU binary: install qemu-system-x86 or set HALITE_QEMU"
                                                   : "QEMU binary " + options.binary + " not found in PATH");
  }
  if (options.work_dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/halite-qemu-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) return Status::IoError("mkdtemp " + templ, errno);
    p->work_dir_ = templ;
    p->own_dir_ = true;
  } else {
    p->work_dir_ = options.work_dir;
  }
  p->qmp_path_ = p->work_dir_ + "/qmp.sock";
  p->stderr_path_ = p->work_dir_ + "/qemu-stderr.log";
  p->stdout_path_ = p->work_dir_ + "/qemu-stdout.log";
  unlink(p->qmp_path_.c_str());

  std::vector<std::string> argv_s{binary};
  argv_s.insert(argv_s.end(), options.args.begin(), options.args.end());
  argv_s.push_back("-qmp");
  argv_s.push_back("unix:" + p->qmp_path_ + ",server=on,wait=off");
  if (options.incoming_defer) {
    argv_s.push_back("-incoming");
    argv_s.push_back("defer");
  }
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  const int err_fd = open(p->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err_fd < 0) return Status::IoError("open " + p->stderr_path_, errno);
  int out_fd = -1;
  if (!options.inherit_stdout) {
    out_fd = open(p->stdout_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) {
      close(err_fd);
      return Status::IoError("open " + p->stdout_path_, errno);
    }
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(err_fd);
    if (out_fd >= 0) close(out_fd);
    if (null_fd >= 0) close(null_fd);
    return Status::IoError("fork", e);
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    if (options.kill_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    }
    setpgid(0, 0);  // keep terminal signals (Ctrl-C) meant for us from reaching QEMU directly
    if (null_fd >= 0) dup2(null_fd, 0);
    if (out_fd >= 0) dup2(out_fd, 1);
    dup2(err_fd, 2);
    syscall(SYS_close_range, 3u, ~0u, 0u);
    execv(argv[0], argv.data());
    const char msg[] = "halite: exec of the QEMU binary failed\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(err_fd);
  if (out_fd >= 0) close(out_fd);
  if (null_fd >= 0) close(null_fd);
  p->pid_ = pid;
  p->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));

  // Wait for the QMP socket, watching for an early exit (bad arguments, missing firmware, ...).
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.qmp_timeout_ms);
  for (;;) {
    if (!p->Alive()) {
      return Status::IoError("QEMU failed to start: " + p->Describe());
    }
    auto qmp = QmpClient::Connect(p->qmp_path_, 100);
    if (qmp.has_value()) {
      p->qmp_ = std::move(qmp).value();
      return p;
    }
    if (Clock::now() > deadline) {
      return Status::IoError("QEMU's QMP socket " + p->qmp_path_ + " did not answer within " +
                             std::to_string(options.qmp_timeout_ms) + " ms: " + qmp.error().message());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

QemuProcess::~QemuProcess() {
  qmp_.reset();
  if (!released_ && pid_ > 0 && !exit_status()) {
    kill(pid_, SIGKILL);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  if (pidfd_ >= 0) close(pidfd_);
  if (own_dir_ && !released_) {
    unlink(qmp_path_.c_str());
    unlink(stderr_path_.c_str());
    unlink(stdout_path_.c_str());
    rmdir(work_dir_.c_str());
  }
}

bool QemuProcess::Alive() {
  std::lock_guard<std::mutex> lock(mu_);
  if (exit_status_) return false;
  int st = 0;
  const pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    exit_status_ = st;
    return false;
  }
  return true;
}

Result<int> QemuProcess::Wait(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Alive()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      return Status::IoError("QEMU (pid " + std::to_string(pid_) + ") still running after " +
                             std::to_string(timeout_ms) + " ms");
    }
    if (pidfd_ >= 0) {
      pollfd pfd{pidfd_, POLLIN, 0};
      poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return *exit_status();
}

Status QemuProcess::Kill(int sig) {
  // Under the lock so the pid cannot be reaped (and reused) between the check and the signal.
  std::lock_guard<std::mutex> lock(mu_);
  if (exit_status_) return Status::Ok();
  if (kill(pid_, sig) != 0 && errno != ESRCH) return Status::IoError("kill QEMU", errno);
  return Status::Ok();
}

std::string QemuProcess::StderrTail(size_t max_bytes) const {
  std::ifstream f(stderr_path_, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes) ? size - max_bytes : 0;
  f.seekg(start);
  std::string s(static_cast<size_t>(size - start), '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string QemuProcess::Describe() {
  std::string s = "QEMU (pid " + std::to_string(pid_) + ")";
  if (Alive()) {
    s += " is running";
  } else {
    const int st = *exit_status();
    if (WIFEXITED(st)) s += " exited with status " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) s += " was killed by signal " + std::to_string(WTERMSIG(st));
  }
  const std::string tail = StderrTail(1024);
  if (!tail.empty()) s += "; stderr: " + tail;
  return s;
}

}  // namespace halite::qemu
