#include "serve_loop.h"

#include <chrono>
#include <thread>

namespace halite::image_server {

void RunServeLoop(const std::atomic<int>* signals, uint64_t exit_when_unused_s, const ServeLoopHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  auto first_refusal = Clock::time_point{};
  int handled = 0;
  auto last_used = Clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (hooks.gone && hooks.gone()) break;
    if (hooks.in_use()) last_used = Clock::now();
    if (exit_when_unused_s > 0 && Clock::now() - last_used > std::chrono::seconds(exit_when_unused_s)) {
      if (hooks.stop_unused()) break;
      last_used = Clock::now();
    }
    if (signals == nullptr || signals->load() == handled) continue;
    handled = signals->load();
    const bool insist = first_refusal != Clock::time_point{} && Clock::now() - first_refusal < std::chrono::seconds(5);
    if (hooks.stop_on_signal(insist)) break;
    first_refusal = Clock::now();
  }
}

}  // namespace halite::image_server
