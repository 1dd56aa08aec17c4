// The serve loop of the RAM directory server (halite/image_server/ram_dir_server.h): signals, --exit-when-unused.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "halite/image_server/ram_dir_server.h"

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
  using Clock = std::chrono::steady_clock;
  auto first_refusal = Clock::time_point{};
  int handled = 0;
  auto last_used = Clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!server.Serving()) break;  // unmounted from outside
    if (!server.Idle()) last_used = Clock::now();
    if (o.exit_when_unused_s > 0 && Clock::now() - last_used > std::chrono::seconds(o.exit_when_unused_s)) {
      if (StopWhenIdleUnderLock(server, o.lock_path)) break;
      last_used = Clock::now();
    }
    if (o.signals == nullptr || o.signals->load() == handled) continue;
    handled = o.signals->load();
    const bool again = first_refusal != Clock::time_point{} && Clock::now() - first_refusal < std::chrono::seconds(5);
    if (server.Idle() || again) {
      server.Stop();
      break;
    }
    if (o.on_refused) o.on_refused(server.Counts());
    first_refusal = Clock::now();
  }
}

}  // namespace halite::image_server
