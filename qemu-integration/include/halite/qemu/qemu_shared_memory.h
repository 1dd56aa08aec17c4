// hlt-restore qemu --memory shared: the guest's main RAM mapped privately from an image file the host image server
// (the halite-image-server daemon) exports, shared through the page cache with every other clone of the same checkpoint.
#ifndef HALITE_QEMU_QEMU_SHARED_MEMORY_H_
#define HALITE_QEMU_QEMU_SHARED_MEMORY_H_

#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/status.h"

namespace halite::qemu {

// The RAMBlock QEMU's pc and q35 machines keep guest RAM in; the one region mapped from the image.
inline constexpr const char* kSharedRamRegion = "pc.ram";

struct SharedMemoryPlan {
  std::string image_path;               // the file QEMU maps (MOUNT/ckpt.pc.ram)
  std::vector<std::string> qemu_args;   // -object memory-backend-file,... -machine memory-backend=pc.ram
  std::vector<std::string> shared_regions;
  bool started_server = false;          // this call started the host's server for the checkpoint
};

// QEMU arguments that already choose how guest RAM is backed, which --memory shared must decide itself.
// Empty when there are none, else the first such argument.
std::string ConflictingMemoryArgument(const std::vector<std::string>& qemu_args);

// Devices in QEMU ARGS that discard guest RAM (virtio-balloon inflation and free-page reporting, virtio-mem
// unplug): on a file-backed RAMBlock QEMU discards by punching a hole in the file, which the image server
// refuses (it would take the pages from every clone). One line per device saying what happens instead; empty
// when there are none.
std::vector<std::string> DiscardingDeviceWarnings(const std::vector<std::string>& qemu_args);

// Finds the host's image server for this checkpoint under image_dir (one mount per checkpoint, named after its
// file id: IMAGE_DIR/ID), or starts one (`halite-image-server serve ... --exit-when-unused 30`, detached, its
// output in IMAGE_DIR/ID.log), under a lock so that clones starting together share one server (FindOrStartImageServer
// of halite/image_server_process.h). `server_program` is the daemon (empty: FindImageServerProgram()); parent_dirs go to the server (--parent-dir) for an incremental checkpoint whose parents moved, and
// `reader_flags` (--block-cache DIR ..., and the keys of an encrypted checkpoint: the server decrypts in memory) as
// they are.
Result<SharedMemoryPlan> PrepareSharedMemory(const std::string& server_program, const std::string& checkpoint_path,
                                             const CheckpointReader& reader, const std::string& image_dir,
                                             const std::vector<std::string>& parent_dirs = {},
                                             const std::vector<std::string>& reader_flags = {});

}  // namespace halite::qemu

#endif  // HALITE_QEMU_QEMU_SHARED_MEMORY_H_
