#include "qemu_process_lookup.h"

#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace halite::libvirt {

bool HasArgument(const std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (flag.empty() ? args[i].compare(0, value.size(), value) == 0
                     : args[i] == flag && i + 1 < args.size() && args[i + 1] == value) {
      return true;
    }
  }
  return false;
}

Result<int> FindProcessByArguments(const std::function<bool(const std::vector<std::string>&)>& match,
                                   const std::string& what) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return Status::IoError("/proc: cannot list processes", errno);
  std::vector<int> found;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    FILE* f = std::fopen(fmt::format("/proc/{}/cmdline", pid).c_str(), "rb");
    if (f == nullptr) continue;  // gone meanwhile
    std::string cmdline;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) cmdline.append(buf, n);
    std::fclose(f);
    std::vector<std::string> args;
    for (size_t at = 0; at < cmdline.size();) {
      const size_t stop = cmdline.find('\0', at);
      args.push_back(cmdline.substr(at, stop == std::string::npos ? std::string::npos : stop - at));
      if (stop == std::string::npos) break;
      at = stop + 1;
    }
    if (match(args)) found.push_back(int(pid));
  }
  closedir(proc);
  if (found.empty()) return Status::NotFound("no process has " + what + " on its command line (QEMU gone?)");
  if (found.size() > 1) {
    // Two libvirt instances on one host (embedded drivers, a checkpoint restored twice without --clone) can run
    // domains with one UUID: taking the first would read another guest's memory or save its TPM state.
    return Status::InvalidArgument(fmt::format(
        "{} processes have {} on their command lines (PIDs {}): cannot tell which is this domain's (two domains "
        "with one UUID on this host? restore the other with --clone)",
        found.size(), what, fmt::join(found, ", ")));
  }
  return found.front();
}

void RemovePrivateQmpSocketDir(const std::string& socket_path) {
  const std::string suffix = kPrivateQmpSocketSuffix;
  if (socket_path.size() > suffix.size() && socket_path.compare(socket_path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    rmdir(socket_path.substr(0, socket_path.size() - suffix.size()).c_str());
    return;
  }
  const size_t slash = socket_path.rfind("/qmp.sock");
  if (slash != std::string::npos && slash + 9 == socket_path.size()) rmdir(socket_path.substr(0, slash).c_str());
}

}  // namespace halite::libvirt
