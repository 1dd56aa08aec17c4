// halite-image-server: the host image server as libhalite's own daemon (installed in PREFIX/libexec/halite1, in the
// library's package). Restores with shared memory start it on demand (halite/image_server_process.h): the C API's
// sessions and hlt_server_*, the Python bindings and hlt-restore, whose `serve` and `serve-ram-dir` modes run it.
#include <cstring>
#include <iostream>

#include "daemon_modes.h"

namespace {
const char* kUsage =
    "usage: halite-image-server MODE ...\n"
    "modes:\n"
    "  serve MOUNT CKPT...      serve checkpoints as image files clones map and share (FUSE)\n"
    "  serve --image-dir DIR CKPT  serve one checkpoint where shared-memory restores look for its server\n"
    "  serve-ram-dir RAMDIR     serve libvirt's memory backing directory for libvirt restores with shared memory\n"
    "Run `halite-image-server MODE --help` for a mode's options; `--version` for the versions.\n"
    "Exit codes: 0 success, 2 usage error, 3 I/O error, 4 invalid or corrupt checkpoint.\n";
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    (argc < 2 ? std::cerr : std::cout) << kUsage;
    return argc < 2 ? halite::cli::kExitUsage : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::cout << halite::cli::VersionText("halite-image-server");
    return 0;
  }
  halite::cli::Args args(argc, argv, 2);
  const std::string mode = argv[1];
  if (mode == "serve") return halite::image_server::Serve(args);
  if (mode == "serve-ram-dir") return halite::image_server::ServeRamDir(args);
  std::cerr << "halite-image-server: unknown mode \"" << mode << "\"\n" << kUsage;
  return halite::cli::kExitUsage;
}
