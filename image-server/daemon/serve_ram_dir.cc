// halite-image-server serve-ram-dir RAMDIR [--exit-when-unused S] [--lock FILE]
// The RAM directory server in the foreground (halite/image_server/ram_dir_server.h): mounted over libvirt's memory
// backing directory so that `hlt-restore libvirt --memory shared` can point a domain's pc.ram at a checkpoint
// image.
#include <signal.h>

#include <atomic>
#include <cstdio>

#include "halite/image_server/ram_dir_server.h"
#include "common/cli_parser.h"
#include "daemon_modes.h"

namespace halite::image_server {
namespace {

const char* kServeRamDirUsage =
    "usage: halite-image-server serve-ram-dir RAMDIR [--exit-when-unused S] [--lock FILE]\n"
    "Mounts the RAM directory server over RAMDIR, libvirt's memory backing directory (qemu:///system:\n"
    "/var/lib/libvirt/qemu/ram, or memory_backing_dir/libvirt/qemu when qemu.conf sets it), until SIGINT/SIGTERM.\n"
    "libvirt makes and removes its per-domain directories there as usual; a domain registered in RAMDIR/.halite\n"
    "(hlt-restore libvirt --memory shared does it) finds its pc.ram as a symlink to a checkpoint image; any other\n"
    "domain with file-backed RAM fails to start (no file can be created). While a domain directory exists the first\n"
    "signal is refused; a second one within 5 s stops anyway. hlt-restore libvirt --memory shared starts one on\n"
    "demand with --exit-when-unused 30; run it yourself (e.g. as a service) to keep it mounted.\n"
    "  --exit-when-unused S   stop by itself once nothing has been registered and no domain directory has existed\n"
    "                         for S seconds\n"
    "  --lock FILE            take this lock (flock) before stopping by itself, so that a restore registering a\n"
    "                         domain under it never meets a server going away\n";

std::atomic<int> g_signals{0};
void OnSignal(int) { g_signals++; }

}  // namespace

int ServeRamDir(cli::Args& args) {
  const std::string tool = "halite-image-server serve-ram-dir";
  std::string ram_dir, lock_path, exit_when_unused;
  uint64_t exit_when_unused_s = 0;
  cli::Parser p(tool, kServeRamDirUsage);
  p.app().add_option("RAMDIR", ram_dir);
  p.app().add_option("--exit-when-unused", exit_when_unused);
  p.app().add_option("--lock", lock_path);
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (p.app().count("--exit-when-unused") && !cli::ParseU64(exit_when_unused, &exit_when_unused_s)) {
    return p.UsageError("--exit-when-unused: bad value \"" + exit_when_unused + "\"");
  }
  if (ram_dir.empty()) return p.UsageError("RAMDIR is required");
  // Before the mount: a signal from the moment it serves is counted and stops it (unmounting), never kills it.
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  auto server = RamDirServer::Start({ram_dir, true});
  if (!server) return cli::Fail(tool, server.error());
  std::printf("serving libvirt's memory backing directory %s (registry %s/%s)\n", ram_dir.c_str(), ram_dir.c_str(),
              kRamDirRegistry);
  std::fflush(stdout);
  RamDirServeOptions serve{&g_signals, exit_when_unused_s, lock_path, {}};
  serve.on_refused = [&tool](const RamDirCounts& c) {
    std::fprintf(stderr,
                 "%s: %llu domain director%s and %llu registration(s) still exist (domains with RAM from a checkpoint "
                 "run); signal again within 5 s to stop anyway\n",
                 tool.c_str(), (unsigned long long)c.directories, c.directories == 1 ? "y" : "ies",
                 (unsigned long long)c.registrations);
  };
  RamDirServeUntilStopped(**server, serve);
  const auto c = (*server)->Counts();
  std::printf("stopped: %llu pc.ram links made, %llu file creations refused\n", (unsigned long long)c.links_made,
              (unsigned long long)c.refused);
  return cli::kExitOk;
}

}  // namespace halite::image_server
