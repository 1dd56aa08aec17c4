// Starts and supervises a QEMU process: the user's arguments plus `-incoming defer` and a private QMP socket.
//
// QEMU's stderr goes to a file (its error messages are how a failed load explains itself: "Size mismatch:
// pc.ram: ..."); death is detected with a pidfd (waitpid polling where pidfds are unavailable). The process is
// killed (SIGKILL) and reaped when the QemuProcess is destroyed unless Release() was called. Alive, Wait, Kill,
// exit_status, StderrTail and Describe may be called from several threads (a restore thread explaining an error
// while another thread kills QEMU); the rest is for one thread.
#ifndef HALITE_QEMU_QEMU_LAUNCHER_H_
#define HALITE_QEMU_QEMU_LAUNCHER_H_

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "halite/qemu/qemu_qmp_client.h"
#include "halite/status.h"

namespace halite::qemu {

struct QemuLaunchOptions {
  // Empty: $HALITE_QEMU, else qemu-system-x86_64 from PATH.
  std::string binary;
  // The user's arguments (machine, memory, devices, display). Must not contain -qmp/-incoming of their own.
  std::vector<std::string> args;
  bool incoming_defer = true;
  // Where the QMP socket and the logs go. Empty: a fresh private directory under $TMPDIR (removed on
  // destruction unless released).
  std::string work_dir;
  // QEMU's stdout: inherit ours (serial console with -nographic) or write <work_dir>/stdout.log.
  bool inherit_stdout = false;
  // Ask the kernel to SIGKILL QEMU if this process dies (tests); off for a tool that leaves the guest running.
  bool kill_with_parent = true;
  // How long Start waits for the QMP socket.
  int qmp_timeout_ms = 15000;
};

class QemuProcess {
 public:
  // Starts QEMU and waits until its QMP socket accepts a connection (the probe connection is handed over and
  // returned by TakeQmp). If QEMU exits first, the error quotes the end of its stderr.
  static Result<std::unique_ptr<QemuProcess>> Start(QemuLaunchOptions options);
  ~QemuProcess();
  QemuProcess(const QemuProcess&) = delete;
  QemuProcess& operator=(const QemuProcess&) = delete;

  // The QMP connection opened by Start (once; nullptr afterwards).
  std::unique_ptr<QmpClient> TakeQmp() { return std::move(qmp_); }

  pid_t pid() const { return pid_; }
  // Readable once the process has exited; -1 when the kernel has no pidfd_open.
  int pidfd() const { return pidfd_; }
  const std::string& qmp_socket_path() const { return qmp_path_; }
  const std::string& stderr_path() const { return stderr_path_; }
  const std::string& work_dir() const { return work_dir_; }

  // Non-blocking: false once QEMU has exited (and reaps it).
  bool Alive();
  // Waits up to timeout_ms for QEMU to exit; returns its wait status (io-error on timeout).
  Result<int> Wait(int timeout_ms);
  // Sends a signal (no-op once exited).
  Status Kill(int sig);
  // The wait status once exited.
  std::optional<int> exit_status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return exit_status_;
  }
  // The last max_bytes of QEMU's stderr.
  std::string StderrTail(size_t max_bytes = 2048) const;
  // "QEMU (pid 123) exited with status 1 / was killed by signal 9; stderr: ..." or "QEMU (pid 123) is running".
  std::string Describe();
  // Leaves QEMU running (and its work directory in place) after this object is destroyed.
  void Release() { released_ = true; }

 private:
  QemuProcess() = default;

  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::string work_dir_;
  bool own_dir_ = false;
  std::string qmp_path_;
  std::string stderr_path_;
  std::string stdout_path_;
  mutable std::mutex mu_;  // guards exit_status_ and reaping
  std::optional<int> exit_status_;
  bool released_ = false;
  std::unique_ptr<QmpClient> qmp_;
};

// The QEMU binary Start would use (for tests that need to skip when there is none): empty when not found.
std::string FindQemuBinary();

// When `arg` names an executable (a path to an executable file, or a name found on $PATH, and not an option),
// its path; otherwise an empty string.
std::string FindExecutable(const std::string& arg);
// `-- qemu-system-x86_64 -m 1G ...` (hlt-restore qemu, as after `strace --` or `perf record --`): when the first of
// `*args` names an executable, takes it out of *args into *binary. QEMU's own arguments never name an executable
// in first place (they start with '-', or are a disk image); QEMU would otherwise fail with "Could not open
// 'qemu-system-x86_64'". Errors: kInvalidArgument when *binary was set already or no argument follows it.
Status TakeBinaryFromArgs(std::vector<std::string>* args, std::string* binary);

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_LAUNCHER_H_
