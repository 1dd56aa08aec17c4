// The host image server as a process of its own: the `halite-image-server` daemon (image-server/daemon/), which
// libhalite installs in PREFIX/libexec/halite1/ (named after the SONAME version). Restores with shared memory (the
// QEMU and libvirt integrations, the C API's sessions and hlt_server_*, hlt-restore) find or start it here; nothing
// in the library runs the tools.
#ifndef HALITE_IMAGE_SERVER_PROCESS_H_
#define HALITE_IMAGE_SERVER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "halite/checkpoint_reader.h"
#include "halite/key_sources.h"
#include "halite/status.h"

namespace halite {

// The daemon's file name.
inline constexpr const char* kImageServerProgram = "halite-image-server";

// The daemon's path: PREFIX/libexec/halite1/halite-image-server beside the code that calls this (PREFIX/lib or
// PREFIX/lib/<multiarch> for libhalite.so, PREFIX/bin for a program linking the static library; the build tree has
// the same layout), else the first on PATH. Errors: kNotFound naming every place looked at.
Result<std::string> FindImageServerProgram();

// Runs `program` with `args` (args[0] is the daemon's mode, "serve" or "serve-ram-dir") in the background,
// detached from the caller: its own session, stdin from /dev/null, stdout and stderr into `log_path`, so that it
// outlives the restore that started it and later clones find it. Returns its pid; the caller waits for it to come
// up (a mount appearing) and reads `log_path` when it does not.
Result<pid_t> StartDetachedServer(const std::string& program, const std::vector<std::string>& args,
                                  const std::string& log_path);

// The flags that make a started server read the checkpoint as `options` does: its block cache
// (BlockCache::CommandLineFlags) and where its keys come from (KeySourceFlags). Keys held only in memory cannot be
// passed on; the callers that accept them refuse them first.
std::vector<std::string> ImageServerReaderFlags(const ReaderOptions& options, const KeySources& keys);

// What FindOrStartImageServer needs: where the checkpoint's server is looked for and how one is started.
struct ImageServerRequest {
  std::string program;     // the daemon (empty: FindImageServerProgram())
  std::string checkpoint;  // a file (made absolute: the server runs elsewhere) or an s3:// or rados:// URI
  std::string image_dir;   // the server of a checkpoint is mounted at IMAGE_DIR/FILE_ID
  std::vector<std::string> parent_dirs;   // where the server looks for the parents of an incremental checkpoint
  std::vector<std::string> reader_flags;  // ImageServerReaderFlags
  uint64_t exit_when_unused_s = 30;       // a started server stops once no file was open that long (0: never)
  int start_timeout_s = 15;
};

// A checkpoint's image server, found serving or started.
struct ImageServerHandle {
  std::string mount;  // IMAGE_DIR/FILE_ID: region R of the checkpoint is the file MOUNT/ckpt.R ('/' reads %2f)
  std::string log;    // MOUNT.log, the started server's output
  pid_t pid = 0;      // the started server (0 when one was serving already)
  bool started = false;
};

// The file name of region `region` of the checkpoint served as `name`: NAME.REGION, with '/' in the region's name
// as %2f and '%' as %25 (QEMU names some RAMBlocks like paths, "/rom@etc/acpi/tables").
std::string ImageFileName(const std::string& name, const std::string& region);
// The file a region is under the mount of FindOrStartImageServer (which serves the checkpoint as "ckpt").
inline std::string ServedImagePath(const std::string& mount, const std::string& region) {
  return mount + "/" + ImageFileName("ckpt", region);
}

// One server per checkpoint and host: under IMAGE_DIR/FILE_ID.lock, either one serves `reader`'s checkpoint at
// IMAGE_DIR/FILE_ID already (its first region's file exists) or one is started and waited for. Errors: kIoError
// naming the path (directories, the lock, a server that did not come up within start_timeout_s, with the end of
// its log), kNotFound when no daemon is found.
Result<ImageServerHandle> FindOrStartImageServer(const ImageServerRequest& request, const CheckpointReader& reader);

}  // namespace halite

#endif  // HALITE_IMAGE_SERVER_PROCESS_H_
