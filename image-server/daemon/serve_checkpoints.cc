// halite-image-server serve MOUNTPOINT CKPT[=NAME]... [--prefetch-rate BYTES/S] [--owner-only] [--no-pin]
//                           [--stats-json FILE] [--exit-when-unused S]
// halite-image-server serve --image-dir DIR CKPT [options]   (one checkpoint where restores look for it: a service's form)
// The host image server in the foreground: each region of each checkpoint as a read-only file NAME.REGION under
// MOUNTPOINT, for QEMUs that map it privately (hlt-restore qemu --memory shared).
#include <malloc.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>

#include "halite/image_server/fuse_image_server.h"
#include "halite/image_server/image_service.h"
#include "common/cli_parser.h"
#include "daemon_modes.h"

namespace halite::image_server {
namespace {

const char* kServeUsage =
    "usage: halite-image-server serve MOUNTPOINT CKPT[=NAME]... [--prefetch-rate BYTES/S] [--owner-only] [--no-pin]\n"
    "                                 [--stats-json FILE] [--exit-when-unused S] [--key-file K] [--parent-dir DIR]\n"
    "       halite-image-server serve --image-dir DIR CKPT [options]\n"
    "Serves each region of each checkpoint as a read-only file NAME.REGION under MOUNTPOINT (FUSE; '/' in a\n"
    "region name reads %2f), until\n"
    "SIGINT/SIGTERM. QEMUs that map a file privately (memory-backend-file,share=off) share its pages through the\n"
    "page cache: the first touch of a page decodes its locality block once for the whole host. Writes and hole\n"
    "punching are refused; a block that fails verification fails the read (the QEMU that touched it stops).\n"
    "MOUNTPOINT/.stats is a JSON document of the counters. While a file is open (a clone maps it) the first\n"
    "signal is refused; a second one within 5 s stops anyway.\n"
    "  CKPT[=NAME]            a checkpoint (a file, s3://BUCKET/KEY or rados://POOL/NAME); NAME defaults to its\n"
    "                         file name without .hlt\n"
    "  --prefetch-rate N      bytes a second of decoded blocks to bring in ahead of the guests, in restore order\n"
    "                         (default 0: only what the guests touch)\n"
    "  --owner-only           only this user may open the files (default: every user, as libvirt's QEMU user)\n"
    "  --no-pin               leave decoded pages to the kernel's reclaim (default: locked in memory while the\n"
    "                         server runs, so a page no clone maps yet is not dropped and decoded again; needs\n"
    "                         CAP_IPC_LOCK or RLIMIT_MEMLOCK room, else pinning stops and .stats counts pin_errors)\n"
    "  --stats-json FILE      the final counters, written at exit\n"
    "  --exit-when-unused S   stop by itself once no file has been open for S seconds (the server hlt-restore\n"
    "                         qemu --memory shared starts on demand uses 30)\n"
    "  --image-dir DIR        serve one CKPT where `--memory shared` restores look for its server: mounted at\n"
    "                         DIR/FILE_ID as ckpt.REGION (restores use /run/halite/images), so that they find it\n"
    "                         instead of starting one (halite-image-server@.service runs this form)\n";

std::atomic<int> g_signals{0};

void OnSignal(int) { g_signals++; }

}  // namespace

int Serve(cli::Args& args) {
  const std::string tool = "halite-image-server serve";
  std::string mountpoint, stats_path, image_dir, prefetch_rate, exit_when_unused;
  uint64_t exit_when_unused_s = 0;
  std::vector<std::string> checkpoints;
  ImageServerOptions options;
  ReaderOptions reader_options;
  bool no_pin = false, owner_only = false;
  cli::Parser p(tool, std::string(kServeUsage) + cli::kReaderFlagsHelp);
  cli::ReaderFlagValues reader_flags;
  p.app().add_option("CKPT", checkpoints)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  p.app().add_option("--prefetch-rate", prefetch_rate);
  p.app().add_flag("--no-pin", no_pin);
  p.app().add_flag("--owner-only", owner_only);
  p.app().add_option("--stats-json", stats_path);
  p.app().add_option("--image-dir", image_dir);
  p.app().add_option("--exit-when-unused", exit_when_unused);
  p.AddReaderFlags(&reader_flags);  // --key-file, --parent-dir, --block-cache
  if (int rc = p.Parse(args); rc >= 0) return rc;
  if (p.app().count("--prefetch-rate") && !cli::ParseU64(prefetch_rate, &options.prefetch_bytes_per_s)) {
    return p.UsageError("--prefetch-rate: bad value \"" + prefetch_rate + "\"");
  }
  if (p.app().count("--exit-when-unused") && !cli::ParseU64(exit_when_unused, &exit_when_unused_s)) {
    return p.UsageError("--exit-when-unused: bad value \"" + exit_when_unused + "\"");
  }
  options.pin_page_cache = !no_pin;
  options.allow_other = !owner_only;
  if (image_dir.empty()) {
    if (checkpoints.size() < 2) {
      return cli::UsageError(tool, "MOUNTPOINT and at least one CKPT are required", kServeUsage);
    }
    mountpoint = checkpoints.front();
    checkpoints.erase(checkpoints.begin());
  } else {
    if (checkpoints.size() != 1) return cli::UsageError(tool, "--image-dir serves exactly one CKPT", kServeUsage);
    checkpoints.front() += "=ckpt";  // the name restores map (ckpt.pc.ram); the last '=' is ours
  }
  if (int rc = p.FinishReaderFlags(reader_flags, &reader_options); rc >= 0) return rc;
  std::vector<ServedImage> images;
  for (const std::string& arg : checkpoints) {
    // The last '=' ends the checkpoint: an s3:// key may hold '=' itself, a NAME never does.
    const size_t eq = arg.rfind('=');
    const std::string path = arg.substr(0, eq);
    const std::string name = eq == std::string::npos ? ImageBaseName(path) : arg.substr(eq + 1);
    if (name.empty() || name.find('/') != std::string::npos) {
      return cli::UsageError(tool, "\"" + arg + "\": NAME (after the last '=') must be a file name", kServeUsage);
    }
    auto reader = CheckpointReader::Open(path, reader_options);
    if (!reader) return cli::Fail(tool, reader.error());
    std::shared_ptr<const CheckpointReader> shared(std::move(*reader));
    if (!image_dir.empty()) mountpoint = image_dir + "/" + cli::HexBytes(shared->file_id());
    auto served = CheckpointImages(shared, name);
    if (!served) return cli::Fail(tool, served.error());
    images.insert(images.end(), served->begin(), served->end());
  }
  // A decoded block is a few hundred KiB, made and dropped by many threads for as long as the server runs. glibc
  // raises its mmap threshold after the first such free and then keeps every later one in per-thread heaps; with a
  // fixed threshold they are mapped and unmapped, and the server's own memory stays the few blocks in flight.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  ImageDirLock lock;
  if (!image_dir.empty()) {
    if (Status s = lock.Take(mountpoint, images.front().name); !s.ok()) return cli::Fail(tool, s);
  }
  options.mountpoint = mountpoint;
  // Before the mount: a signal from the moment it serves is counted and stops it (unmounting), never kills it.
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  auto server = FuseImageServer::Start(std::move(images), options);
  if (!server) return cli::Fail(tool, server.error());
  lock.Release();
  std::printf("serving at %s:", mountpoint.c_str());
  for (const auto& s : (*server)->Stats()) std::printf(" %s (%llu MiB)", s.name.c_str(), (unsigned long long)(s.size >> 20));
  std::printf("\n");
  std::fflush(stdout);
  ServeLoopOptions loop;
  loop.signals = &g_signals;
  loop.exit_when_unused_s = exit_when_unused_s;
  loop.on_refused = [&tool](const Status& s) {
    std::fprintf(stderr, "%s: %s; signal again within 5 s to stop anyway\n", tool.c_str(), s.message().c_str());
  };
  ServeUntilStopped(**server, loop);
  const std::string json = (*server)->StatsJson();
  std::fputs(json.c_str(), stdout);
  if (!stats_path.empty()) {
    FILE* f = std::fopen(stats_path.c_str(), "w");
    if (f == nullptr || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
      return cli::Fail(tool, Status::IoError(stats_path + ": cannot write the statistics"));
    }
  }
  return cli::kExitOk;
}

}  // namespace halite::image_server
