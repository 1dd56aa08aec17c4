// hlt-save: create libhalite checkpoints.
#include <cstring>
#include <iostream>

#include "hlt-save/save_modes.h"

namespace {
const char* kUsage =
    "usage: hlt-save MODE ...\n"
    "modes:\n"
    "  raw IMAGE -o CKPT [writer options]     save a raw memory image\n"
    "  xen STREAM -o CKPT [writer options]    save an `xl save` stream (file, FIFO or - for stdin)\n"
    "  qemu --qmp SOCKET -o CKPT [--live]     save a running QEMU through its QMP socket\n"
    "  libvirt DOMAIN -o CKPT [--connect URI] save a running libvirt domain, its disks frozen with it\n"
    "  relayout CKPT -o NEW --access-trace F  re-plan a checkpoint around a trace recorded at restore time\n"
    "  flatten CKPT -o FULL                   write an incremental checkpoint's chain as one full checkpoint\n"
    "  rekey CKPT -o NEW --key-file NEW_KEY   re-encrypt under another key without recompressing\n"
    "  keygen -o KEY_FILE                     a new random key for encrypted checkpoints, and its key id\n"
    "  key-id KEY_FILE                        the key id of a key\n"
    "Every save mode takes --parent P to store only what changed since checkpoint P (an incremental child), and\n"
    "--encrypt-key-file K (or --key-command CMD, or HALITE_ENCRYPT_KEY) to encrypt it (format 1.5).\n"
    "CKPT is a file, s3://BUCKET/KEY (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL)\n"
    "or rados://POOL/NAME (ceph.conf from CEPH_CONF); a failed or killed save leaves no object.\n"
    "Run `hlt-save MODE --help` for a mode's options; `hlt-save --version` for the versions.\n"
    "Exit codes: 0 success, 2 usage error, 3 I/O error, 4 invalid or corrupt input.\n";
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    (argc < 2 ? std::cerr : std::cout) << kUsage;
    return argc < 2 ? halite::cli::kExitUsage : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::cout << halite::cli::VersionText("hlt-save");
    return 0;
  }
  halite::cli::Args args(argc, argv, 2);
  std::string mode = argv[1];
  if (mode == "raw") return halite::save::SaveRaw(args);
#ifdef HALITE_TOOLS_WITH_XEN
  if (mode == "xen") return halite::save::SaveXen(args);
#endif
  if (mode == "relayout") return halite::save::Relayout(args);
  if (mode == "flatten") return halite::save::Flatten(args);
  if (mode == "rekey") return halite::save::Rekey(args);
  if (mode == "keygen") return halite::save::KeyGen(args);
  if (mode == "key-id") return halite::save::KeyIdOf(args);
#ifdef HALITE_TOOLS_WITH_QEMU
  if (mode == "qemu") return halite::save::SaveQemu(args);
#endif
#ifdef HALITE_TOOLS_WITH_LIBVIRT
  if (mode == "libvirt") return halite::save::SaveLibvirt(args);
#endif
  std::cerr << "hlt-save: unknown mode \"" << mode << "\"\n" << kUsage;
  return halite::cli::kExitUsage;
}
