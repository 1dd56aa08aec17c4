// hlt-restore: read, check and restore libhalite checkpoints.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "halite/image_server_process.h"

#include "hlt-restore/restore_modes.h"

namespace {
const char* kUsage =
    "usage: hlt-restore MODE ...\n"
    "modes:\n"
    "  raw CKPT -o IMAGE        write the full memory back as a flat image\n"
    "  xen CKPT -o STREAM       write the Xen save stream back for `xl restore` (file, FIFO or - for stdout)\n"
    "  qemu CKPT (--qmp S | -- QEMU ARGS)  restore into QEMU, lazily through its postcopy (or --eager)\n"
    "  libvirt CKPT [--connect URI] [--clone]  restore a libvirt domain (or a clone of it), lazily\n"
    "  serve MOUNT CKPT...      serve checkpoints as image files clones map and share (FUSE)\n"
    "  serve-ram-dir RAMDIR     serve libvirt's memory backing directory for libvirt --memory shared (FUSE)\n"
    "                           (both run libhalite's image server daemon, halite-image-server)\n"
    "  info CKPT [--json]       describe a checkpoint\n"
    "  verify CKPT              read every byte and check every checksum and rule\n"
    "  replay CKPT --trace F    restore lazily (userfaultfd), touch the trace's pages, check them, print stats\n"
    "CKPT is a file, s3://BUCKET/KEY (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL)\n"
    "or rados://POOL/NAME (ceph.conf from CEPH_CONF).\n"
    "Run `hlt-restore MODE --help` for a mode's options; `hlt-restore --version` for the versions.\n"
    "Exit codes: 0 success, 2 usage error, 3 I/O error, 4 invalid or corrupt checkpoint.\n";

// `serve` and `serve-ram-dir` are the library's daemon (halite/image_server_process.h), run in this process's place.
int RunImageServer(int argc, char** argv) {
  auto program = halite::FindImageServerProgram();
  if (!program) return halite::cli::Fail("hlt-restore " + std::string(argv[1]), program.error());
  argv[0] = const_cast<char*>(program->c_str());
  execv(program->c_str(), argv);
  return halite::cli::Fail("hlt-restore " + std::string(argv[1]), halite::Status::IoError(*program, errno));
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    (argc < 2 ? std::cerr : std::cout) << kUsage;
    return argc < 2 ? halite::cli::kExitUsage : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::cout << halite::cli::VersionText("hlt-restore");
    return 0;
  }
  halite::cli::Args args(argc, argv, 2);
  std::string mode = argv[1];
  if (mode == "raw") return halite::restore::RestoreRaw(args);
#ifdef HALITE_TOOLS_WITH_XEN
  if (mode == "xen") return halite::restore::RestoreXen(args);
#endif
#ifdef HALITE_TOOLS_WITH_QEMU
  if (mode == "qemu") return halite::restore::RestoreQemu(args);
#endif
#ifdef HALITE_TOOLS_WITH_LIBVIRT
  if (mode == "libvirt") return halite::restore::RestoreLibvirt(args);
#endif
#ifdef HALITE_TOOLS_WITH_IMAGE_SERVER
  if (mode == "serve" || mode == "serve-ram-dir") return RunImageServer(argc, argv);
#endif
  if (mode == "info") return halite::restore::Info(args);
  if (mode == "verify") return halite::restore::Verify(args);
  if (mode == "replay") return halite::restore::Replay(args);
  std::cerr << "hlt-restore: unknown mode \"" << mode << "\"\n" << kUsage;
  return halite::cli::kExitUsage;
}
