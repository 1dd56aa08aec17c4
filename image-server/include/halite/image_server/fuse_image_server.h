// The host image server: checkpoints as read-only image files under a FUSE mount, for QEMUs that map them
// privately (memory-backend-file, share=off) and so share one copy of every page through the page cache.
//
// A read of a page that is not in the page cache decodes the page's whole locality block once (CheckpointImage),
// answers the read, then stores the block's other pages in the page cache (FUSE notify_store), so the guest's
// next touches of that block, in any clone on the host, are minor faults. A prefetcher goes through each image's
// blocks in the checkpoint's restore order at a rate limit and stays out of the way while reads are waiting.
//
// Images are read-only: write() and hole punching (fallocate, which QEMU's balloon and free-page reporting use
// even on a private mapping) are refused, so no clone can change what the others read. A block that fails
// verification never reaches the page cache: the read fails with EIO and the QEMU that faulted on it dies of
// SIGBUS (QEMU re-raises a SIGBUS that is not a machine check): the clone stops, it never sees wrong memory.
//
// `.stats` at the top of the mount is a JSON document of the counters, read afresh on each open.
#ifndef HALITE_IMAGE_SERVER_FUSE_IMAGE_SERVER_H_
#define HALITE_IMAGE_SERVER_FUSE_IMAGE_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "halite/image_server/checkpoint_image.h"
#include "halite/status.h"

namespace halite::image_server {

struct ImageServerOptions {
  std::string mountpoint;             // an existing empty directory
  uint64_t prefetch_bytes_per_s = 0;  // decoded bytes a second the prefetcher stores; 0: no prefetch
  bool allow_other = true;            // let other users (libvirt's QEMU user) open the images
  // Lock the stored pages in memory while the server runs (page_cache_pin.h says why): a page that proactive
  // reclaim or memory pressure dropped would be decoded again on its next touch.
  bool pin_page_cache = true;
};

// One file of the mount: `name` (no '/') serves `image`.
struct ServedImage {
  std::string name;
  std::shared_ptr<CheckpointImage> image;
};

struct ServedImageStats {
  std::string name;
  uint64_t size = 0;
  std::string checkpoint_file_id;            // hex, of the checkpoint opened (for a chain: the child's)
  std::string checkpoint_index_fingerprint;  // hex (format-spec 12): names exactly that file
  std::string region;                        // the checkpoint's region the file is an image of
  CheckpointImageStats image;
  uint64_t pages_stored = 0;    // pages pushed into the page cache after a read or by the prefetcher
  uint64_t store_errors = 0;    // stores the kernel refused (the pages are then read on demand)
  uint64_t blocks_to_store = 0; // decoded blocks whose pages are still waiting to be stored
  uint64_t blocks_prefetched = 0;
  uint64_t open_handles = 0;    // a mapping holds one
  uint64_t refused_writes = 0;  // write, truncate and fallocate (hole punching) attempts
  uint64_t pages_pinned = 0;    // pages locked in memory (a block decoded twice counts twice)
  uint64_t pin_errors = 0;      // mlock refusals (then pinning stops for the file)
};

class FuseImageServer {
 public:
  // Mounts the images at options.mountpoint and starts serving on threads of its own. Errors: kInvalidArgument
  // (bad names, duplicates), kIoError (no /dev/fuse, mount refused) naming the mountpoint.
  static Result<std::unique_ptr<FuseImageServer>> Start(std::vector<ServedImage> images, ImageServerOptions options);
  // Unmounts (forcefully when files are still open) and joins the threads.
  ~FuseImageServer();

  // Files currently open through the mount (a QEMU mapping one counts).
  uint64_t open_handles() const;
  // Stops serving unless a file is open (kAborted naming how many), or always when `force`.
  Status Stop(bool force = false);
  // Blocks until Stop() or an unmount from outside (fusermount -u, umount).
  void Wait();
  std::vector<ServedImageStats> Stats() const;
  std::string StatsJson() const;

 private:
  class Impl;
  explicit FuseImageServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_FUSE_IMAGE_SERVER_H_
