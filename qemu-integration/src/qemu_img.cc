// Running qemu-img (qemu_img.h).
#include "halite/qemu/qemu_img.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>

extern char** environ;

namespace halite::qemu {

Status RunQemuImg(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"qemu-img"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawnp(&pid, "qemu-img", nullptr, nullptr, cargv.data(), environ);
  if (rc != 0) return Status::IoError("cannot run qemu-img (package qemu-utils)", rc);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::IoError(line + " failed (status " + std::to_string(status) + ")");
  }
  return Status::Ok();
}

}  // namespace halite::qemu
