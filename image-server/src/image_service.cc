// The image files of a checkpoint, the image directory's lock and the serve loop (moved here from
// tools/hlt-restore/serve.cc).
#include "halite/image_server/image_service.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "halite/image_server/checkpoint_image.h"
#include "halite/image_server_process.h"
#include "serve_loop.h"

namespace halite::image_server {

std::string ImageBaseName(const std::string& path) {
  std::string b = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (b.size() > 4 && b.compare(b.size() - 4, 4, ".hlt") == 0) b.resize(b.size() - 4);
  return b;
}

Result<std::vector<ServedImage>> CheckpointImages(std::shared_ptr<const CheckpointReader> reader,
                                                  const std::string& name) {
  std::vector<ServedImage> images;
  for (const Region& r : reader->regions()) {
    auto image = CheckpointImage::Open(reader, r.name);
    if (!image) return image.error();
    images.push_back({ImageFileName(name, r.name), std::shared_ptr<CheckpointImage>(std::move(*image))});
  }
  return images;
}

Status ImageDirLock::Take(const std::string& mount, const std::string& image_name) {
  std::error_code ec;
  std::filesystem::create_directories(mount, ec);
  if (ec) return Status::IoError(mount + ": cannot create it", ec.value());
  const std::string lock_path = mount + ".lock";
  fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::IoError(lock_path + ": cannot open the image server's lock", errno);
  if (flock(fd_, LOCK_EX) != 0) return Status::IoError(lock_path + ": cannot lock it", errno);
  struct stat st;
  if (stat((mount + "/" + image_name).c_str(), &st) == 0) {
    return Status::InvalidArgument(mount + ": another image server already serves this checkpoint there");
  }
  // A server that died leaves its mount behind ("transport endpoint is not connected"): take it away first.
  if (stat(mount.c_str(), &st) != 0 && errno == ENOTCONN) umount2(mount.c_str(), MNT_DETACH);
  return Status::Ok();
}

void ImageDirLock::Release() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void ServeUntilStopped(FuseImageServer& server, const ServeLoopOptions& o) {
  ServeLoopHooks hooks;
  hooks.in_use = [&] { return server.open_handles() > 0; };
  hooks.stop_unused = [&] { return server.Stop().ok(); };
  hooks.stop_on_signal = [&](bool insist) {
    Status s = server.Stop(/*force=*/insist);
    if (!s.ok() && o.on_refused) o.on_refused(s);
    return s.ok();
  };
  RunServeLoop(o.signals, o.exit_when_unused_s, hooks);
}

}  // namespace halite::image_server
