// The serve loop of the RAM directory server (halite/image_server/ram_dir_server.h): signals, --exit-when-unused.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "halite/image_server/ram_dir_server.h"
#include "serve_loop.h"

namespace halite::image_server {
namespace {

// Stops the server when it is still idle under the restores' lock (none is between finding this mount and
// registering in it). True when it stopped.
bool StopWhenIdleUnderLock(RamDirServer& server, const std::string& lock_path) {
  const int lock = lock_path.empty() ? -1 : open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
  bool stopped = false;
  if ((lock < 0 || flock(lock, LOCK_EX | LOCK_NB) == 0) && server.Idle()) {
    server.Stop();
    stopped = true;
  }
  if (lock >= 0) close(lock);
  return stopped;
}

}  // namespace

void RamDirServeUntilStopped(RamDirServer& server, const RamDirServeOptions& o) {
  ServeLoopHooks hooks;
  hooks.gone = [&] { return !server.Serving(); };  // unmounted from outside
  hooks.in_use = [&] { return !server.Idle(); };
  hooks.stop_unused = [&] { return StopWhenIdleUnderLock(server, o.lock_path); };
  hooks.stop_on_signal = [&](bool insist) {
    if (server.Idle() || insist) {
      server.Stop();
      return true;
    }
    if (o.on_refused) o.on_refused(server.Counts());
    return false;
  };
  RunServeLoop(o.signals, o.exit_when_unused_s, hooks);
}

}  // namespace halite::image_server
