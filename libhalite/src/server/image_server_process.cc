// Finding and starting the halite-image-server daemon (halite/image_server_process.h). Moved here from the QEMU
// integration (qemu_shared_memory.cc, detached_server.cc), which ran the restoring program itself (hlt-restore).
#include "halite/image_server_process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "halite/block_cache.h"
#include "halite/checkpoint_location.h"
#include "halite/hint_files.h"
#include "halite/stats_text.h"

#ifndef HALITE_LIBEXEC_SUBDIR
#define HALITE_LIBEXEC_SUBDIR "libexec/halite1"
#endif

namespace halite {
namespace {

namespace fs = std::filesystem;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The end of the server's log, for an error message.
std::string Tail(const std::string& path) {
  Result<std::string> text = ReadTextFile(path);
  if (!text) return "";
  return text->size() > 1500 ? text->substr(text->size() - 1500) : *text;
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  return ec ? Status::IoError(dir + ": cannot create it", ec.value()) : Status::Ok();
}

// The directories whose PREFIX/libexec/halite1 may hold the daemon: the object holding this code (libhalite.so, or
// the program that linked the static library) in PREFIX/lib, PREFIX/lib/<multiarch> or PREFIX/bin.
std::vector<fs::path> Prefixes() {
  std::vector<fs::path> objects;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&FindImageServerProgram), &info) != 0 && info.dli_fname && *info.dli_fname) {
    objects.emplace_back(info.dli_fname);
  }
  objects.emplace_back("/proc/self/exe");
  std::vector<fs::path> prefixes;
  for (const fs::path& object : objects) {
    std::error_code ec;
    const fs::path dir = fs::canonical(object, ec).parent_path();
    if (ec) continue;
    for (const fs::path& p : {dir.parent_path(), dir.parent_path().parent_path()}) {
      if (std::find(prefixes.begin(), prefixes.end(), p) == prefixes.end()) prefixes.push_back(p);
    }
  }
  return prefixes;
}

}  // namespace

std::vector<std::string> ImageServerReaderFlags(const ReaderOptions& options, const KeySources& keys) {
  std::vector<std::string> flags;
  if (options.block_cache) flags = options.block_cache->CommandLineFlags();
  const std::vector<std::string> key_flags = KeySourceFlags(keys);
  flags.insert(flags.end(), key_flags.begin(), key_flags.end());
  return flags;
}

std::string ImageFileName(const std::string& name, const std::string& region) {
  std::string out = name + ".";
  for (char c : region) {
    if (c == '/') {
      out += "%2f";
    } else if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

Result<std::string> FindImageServerProgram() {
  std::string looked;
  for (const fs::path& prefix : Prefixes()) {
    const fs::path candidate = prefix / HALITE_LIBEXEC_SUBDIR / kImageServerProgram;
    looked += (looked.empty() ? "" : ", ") + candidate.string();
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(begin, end - begin);
    if (!dir.empty()) {
      const std::string candidate = dir + "/" + kImageServerProgram;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    begin = end + 1;
  }
  return Status::NotFound(std::string("no ") + kImageServerProgram + " (the image server) in " + looked +
                          " or on PATH: install libhalite's package whole, or name the program");
}

Result<pid_t> StartDetachedServer(const std::string& program, const std::vector<std::string>& args,
                                  const std::string& log_path) {
  // Built before the fork: the child only calls async-signal-safe functions.
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
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
    execv(program.c_str(), argv.data());
    // Said in the log, which the caller shows when the server does not come up.
    const char msg[] = "libhalite: the detached server could not be started (execv failed)\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  return pid;
}

Result<ImageServerHandle> FindOrStartImageServer(const ImageServerRequest& request, const CheckpointReader& reader) {
  // The server opens the checkpoint again: a file by its absolute path (it runs elsewhere), an object by its URI
  // (s3://, rados://: the credentials and the cluster's configuration reach it through the environment it
  // inherits, and its block fetches go through the host block cache of `reader_flags`).
  std::string location = request.checkpoint;
  if (!IsObjectStoreUri(location)) {
    char absolute[PATH_MAX];
    if (realpath(location.c_str(), absolute) == nullptr) {
      return Status::IoError(location + ": cannot resolve its path", errno);
    }
    location = absolute;
  }
  HLT_RETURN_IF_ERROR(MakeDirs(request.image_dir));
  ImageServerHandle server;
  server.mount = request.image_dir + "/" + HexBytes(reader.file_id());
  server.log = server.mount + ".log";
  const std::string stats = server.mount + "/.stats";  // every image server's mount has it

  // One server per checkpoint and host: whoever holds the lock either finds it serving or starts it.
  const std::string lock_path = server.mount + ".lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return Status::IoError(lock_path + ": cannot open the image server's lock", errno);
  struct Unlock {
    int fd;
    ~Unlock() { close(fd); }
  } unlock{lock};
  if (flock(lock, LOCK_EX) != 0) return Status::IoError(lock_path + ": cannot lock it", errno);
  if (Exists(stats)) return server;
  // A server that died leaves its mount behind ("transport endpoint is not connected"): take it away first.
  struct stat st;
  if (stat(server.mount.c_str(), &st) != 0 && errno == ENOTCONN) umount2(server.mount.c_str(), MNT_DETACH);

  std::string program = request.program;
  if (program.empty()) {
    HLT_ASSIGN_OR_RETURN(program, FindImageServerProgram());
  }
  HLT_RETURN_IF_ERROR(MakeDirs(server.mount));
  std::vector<std::string> args = {"serve", server.mount, location + "=ckpt", "--exit-when-unused",
                                   std::to_string(request.exit_when_unused_s)};
  for (const std::string& dir : request.parent_dirs) {  // the server opens the chain again
    std::error_code ec;
    const fs::path d = fs::absolute(dir, ec);
    args.insert(args.end(), {"--parent-dir", ec ? dir : d.string()});
  }
  args.insert(args.end(), request.reader_flags.begin(), request.reader_flags.end());
  HLT_ASSIGN_OR_RETURN(server.pid, StartDetachedServer(program, args, server.log));
  server.started = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(request.start_timeout_s);
  while (!Exists(stats)) {
    int wstatus = 0;
    if (waitpid(server.pid, &wstatus, WNOHANG) == server.pid) {  // it is our child: gone for good
      return Status::IoError(fmt::format("the image server for {} ({}) exited (status {}) before it served at {}; "
                                         "its log {}:\n{}",
                                         request.checkpoint, program, wstatus, server.mount, server.log,
                                         Tail(server.log)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::IoError(fmt::format("the image server for {} (pid {}, {}) did not come up at {} within {} s; "
                                         "its log {}:\n{}",
                                         request.checkpoint, server.pid, program, server.mount,
                                         request.start_timeout_s, server.log, Tail(server.log)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return server;
}

}  // namespace halite
