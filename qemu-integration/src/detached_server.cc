#include "halite/qemu/detached_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace halite::qemu {

Result<pid_t> StartDetachedServer(const std::string& self, const std::vector<std::string>& args,
                                  const std::string& log_path) {
  // Built before the fork: the child only calls async-signal-safe functions.
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(self.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Status::IoError("fork", errno);
  if (pid == 0) {
    setsid();
    const int out = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out >= 0) {
      dup2(out, STDOUT_FILENO);
      dup2(out, STDERR_FILENO);
    }
    const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDIN_FILENO);
    execv(self.c_str(), argv.data());
    // Said in the log, which the caller shows when the server does not come up.
    const char msg[] = "hlt-restore: the detached server could not be started (execv of this program failed)\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  return pid;
}

}  // namespace halite::qemu
