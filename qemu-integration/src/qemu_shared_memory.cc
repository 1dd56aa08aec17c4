// hlt-restore qemu --memory shared: finding or starting the host image server (shared_memory.h).
#include "halite/qemu/qemu_shared_memory.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "halite/checkpoint_location.h"
#include "halite/hint_files.h"
#include "halite/qemu/detached_server.h"

namespace halite::qemu {
namespace {

std::string Hex(const FileId& id) {
  std::string s;
  for (uint8_t b : id) s += fmt::format("{:02x}", b);
  return s;
}

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
  std::filesystem::create_directories(dir, ec);
  return ec ? Status::IoError(dir + ": cannot create it", ec.value()) : Status::Ok();
}

}  // namespace

std::string ConflictingMemoryArgument(const std::vector<std::string>& qemu_args) {
  for (size_t i = 0; i < qemu_args.size(); ++i) {
    const std::string& a = qemu_args[i];
    if (a == "-mem-path" || a == "-mem-prealloc" || a == "-numa" || a.find("memory-backend") != std::string::npos) {
      return a;
    }
  }
  return "";
}

std::vector<std::string> DiscardingDeviceWarnings(const std::vector<std::string>& qemu_args) {
  std::vector<std::string> out;
  for (const std::string& a : qemu_args) {
    if (a.find("virtio-balloon") != std::string::npos) {
      out.push_back("virtio-balloon: its inflation and free-page reporting discard guest RAM by punching holes in "
                    "the image, which the image server refuses: the balloon frees no host memory in this clone "
                    "(QEMU logs \"Failed to fallocate\"), and the other clones are unaffected");
    } else if (a.find("virtio-mem") != std::string::npos) {
      out.push_back("virtio-mem: unplugging memory discards it by punching holes in the image, which the image "
                    "server refuses: unplug requests fail in this clone");
    }
  }
  return out;
}

Result<SharedMemoryPlan> PrepareSharedMemory(const std::string& self, const std::string& checkpoint_path,
                                             const CheckpointReader& reader, const std::string& image_dir,
                                             const std::vector<std::string>& parent_dirs,
                                             const std::vector<std::string>& reader_flags) {
  auto region = reader.FindRegion(kSharedRamRegion);
  if (!region) {
    std::string names;
    for (const auto& r : reader.regions()) names += (names.empty() ? "" : ", ") + r.name;
    return Status::InvalidArgument(reader.name() + ": no RAMBlock " + kSharedRamRegion +
                                   " to share (--memory shared maps a pc or q35 machine's RAM; this one has " + names +
                                   ")");
  }
  // The server opens the checkpoint again: a file by its absolute path (it runs elsewhere), an object by its URI
  // (s3://, rados://: the credentials and the cluster's configuration reach it through the environment it
  // inherits, and its block fetches go through the host block cache of `reader_flags`).
  std::string location = checkpoint_path;
  if (!IsObjectStoreUri(checkpoint_path)) {
    char absolute[PATH_MAX];
    if (realpath(checkpoint_path.c_str(), absolute) == nullptr) {
      return Status::IoError(checkpoint_path + ": cannot resolve its path", errno);
    }
    location = absolute;
  }
  HLT_RETURN_IF_ERROR(MakeDirs(image_dir));
  const std::string id = Hex(reader.file_id());
  const std::string mount = image_dir + "/" + id;
  SharedMemoryPlan plan;
  plan.image_path = mount + "/ckpt." + kSharedRamRegion;
  plan.shared_regions = {kSharedRamRegion};
  const uint64_t size = reader.regions()[*region].size;
  plan.qemu_args = {"-object",
                    fmt::format("memory-backend-file,id={},size={},mem-path={},share=off", kSharedRamRegion, size,
                                plan.image_path),
                    "-machine", std::string("memory-backend=") + kSharedRamRegion};
  if (plan.image_path.find(',') != std::string::npos) {
    return Status::InvalidArgument(plan.image_path + ": a QEMU option value may not contain ','");
  }

  // One server per checkpoint and host: whoever holds the lock either finds it serving or starts it.
  const std::string lock_path = mount + ".lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return Status::IoError(lock_path + ": cannot open the image server's lock", errno);
  struct Unlock {
    int fd;
    ~Unlock() { close(fd); }
  } unlock{lock};
  if (flock(lock, LOCK_EX) != 0) return Status::IoError(lock_path + ": cannot lock it", errno);
  if (Exists(plan.image_path)) return plan;
  // A server that died leaves its mount behind ("transport endpoint is not connected"): take it away first.
  struct stat st;
  if (stat(mount.c_str(), &st) != 0 && errno == ENOTCONN) umount2(mount.c_str(), MNT_DETACH);

  HLT_RETURN_IF_ERROR(MakeDirs(mount));
  const std::string log = mount + ".log";
  const std::string arg = location + "=ckpt";
  std::vector<std::string> serve_args = {"serve", mount, arg, "--exit-when-unused", "30"};
  for (const std::string& dir : parent_dirs) {  // the server opens the chain again
    std::error_code ec;
    const std::filesystem::path d = std::filesystem::absolute(dir, ec);
    serve_args.insert(serve_args.end(), {"--parent-dir", ec ? dir : d.string()});
  }
  serve_args.insert(serve_args.end(), reader_flags.begin(), reader_flags.end());
  HLT_ASSIGN_OR_RETURN(const pid_t pid, StartDetachedServer(self, serve_args, log));
  plan.started_server = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!Exists(plan.image_path)) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::IoError("the image server for " + checkpoint_path + " (pid " + std::to_string(pid) +
                             ") did not come up at " + mount + " within 15 s; its log " + log + ":\n" + Tail(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return plan;
}

}  // namespace halite::qemu
