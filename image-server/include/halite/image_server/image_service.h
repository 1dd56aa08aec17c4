// What a process that serves checkpoints as image files does around a FuseImageServer (hlt-restore serve, or an
// embedder's own service): the files of a checkpoint, the image directory's lock that restores take to find or
// start a checkpoint's server, and the loop that serves until a signal or until no clone has used the files for a
// while.
#ifndef HALITE_IMAGE_SERVER_IMAGE_SERVICE_H_
#define HALITE_IMAGE_SERVER_IMAGE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/image_server/fuse_image_server.h"
#include "halite/status.h"

namespace halite::image_server {

// A checkpoint path's file name without ".hlt": the default NAME of `serve MOUNTPOINT CKPT`.
std::string ImageBaseName(const std::string& path);

// One file NAME.REGION a region of `reader` (a '/' in a region name becomes %2f, a '%' %25: QEMU names some
// RAMBlocks like paths, "/rom@etc/acpi/tables"). Errors: CheckpointImage::Open's.
Result<std::vector<ServedImage>> CheckpointImages(std::shared_ptr<const CheckpointReader> reader,
                                                  const std::string& name);

// Holds DIR/FILE_ID.lock, the lock restores take to find or start the checkpoint's server (qemu_shared_memory.cc),
// from before the mount until it serves: a restore starting meanwhile waits and then finds this server.
class ImageDirLock {
 public:
  ImageDirLock() = default;
  ImageDirLock(const ImageDirLock&) = delete;
  ImageDirLock& operator=(const ImageDirLock&) = delete;
  ~ImageDirLock() { Release(); }
  // Creates `mount`, locks `mount`.lock, and checks that no server serves `image_name` there yet (a dead one's
  // mount is taken away). Errors: kIoError naming the path, kInvalidArgument when a server is there.
  Status Take(const std::string& mount, const std::string& image_name);
  void Release();

 private:
  int fd_ = -1;
};

struct ServeLoopOptions {
  // Counted by the caller's signal handler (SIGINT, SIGTERM): each new signal asks the server to stop.
  const std::atomic<int>* signals = nullptr;
  // Stop by itself once no file has been open for this many seconds (0: never).
  uint64_t exit_when_unused_s = 0;
  // A stop refused because files are open: told the reason; a second signal within 5 s stops anyway.
  std::function<void(const Status& refusal)> on_refused;
};

// Serves until stopped (a signal, or unused for long enough). Checks every 100 ms.
void ServeUntilStopped(FuseImageServer& server, const ServeLoopOptions& options);

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_IMAGE_SERVICE_H_
