// The loop both servers' processes run until they stop (hlt-restore serve, serve-ram-dir): every 100 ms it notes
// whether the server is in use, stops it once unused for long enough, and on each new signal asks it to stop; a
// refused stop is reported by the server's hook, and a second signal within 5 s insists.
#ifndef HALITE_IMAGE_SERVER_SERVE_LOOP_H_
#define HALITE_IMAGE_SERVER_SERVE_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>

namespace halite::image_server {

struct ServeLoopHooks {
  std::function<bool()> gone;        // the server went away by itself (unmounted from outside); null: never
  std::function<bool()> in_use;      // clients still use it: unused time starts again
  std::function<bool()> stop_unused;  // unused long enough: stop if still so; true when it stopped
  // A signal came: stop (`insist`: a second signal within 5 s of a refusal); false when refused (the hook says why).
  std::function<bool(bool insist)> stop_on_signal;
};

// `signals` counts the caller's signals (null: none); exit_when_unused_s 0: never by itself.
void RunServeLoop(const std::atomic<int>* signals, uint64_t exit_when_unused_s, const ServeLoopHooks& hooks);

}  // namespace halite::image_server

#endif  // HALITE_IMAGE_SERVER_SERVE_LOOP_H_
