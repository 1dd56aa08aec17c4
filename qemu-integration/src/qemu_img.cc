// Running qemu-img (qemu_img.h).
#include "halite/qemu/qemu_img.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace halite::qemu {
namespace {

// What waitpid's status says, in words.
std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// The child's message without the trailing newline, cut to its last few KiB.
std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  constexpr size_t kMax = 4096;
  if (text.size() > kMax) text = "..." + text.substr(text.size() - kMax);
  return text;
}

}  // namespace

Status RunQemuImg(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"qemu-img"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  // qemu-img's own words (why it failed) go into the error, not only to a terminal nobody may be watching.
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return Status::IoError("pipe for qemu-img's stderr", errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid;
  const int rc = posix_spawnp(&pid, "qemu-img", &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(err_pipe[1]);
  if (rc != 0) {
    close(err_pipe[0]);
    return Status::IoError("cannot run qemu-img (package qemu-utils)", rc);
  }
  std::string stderr_text;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(err_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    stderr_text.append(buf, size_t(n));
  }
  close(err_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string said = Trimmed(stderr_text);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::IoError(line + " failed (" + DescribeExit(status) + ")" +
                           (said.empty() ? ": it said nothing on stderr" : ": " + said));
  }
  // A warning from a command that worked still reaches whoever reads our stderr.
  if (!said.empty()) std::fprintf(stderr, "%s\n", said.c_str());
  return Status::Ok();
}

}  // namespace halite::qemu
