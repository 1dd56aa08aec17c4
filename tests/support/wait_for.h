// The C++ tests' clock seam: wait for a condition with a deadline instead of sleeping a fixed time.
//
// A test that waits for something to happen (a counter reaching a value, a server's handles closing) polls it
// with WaitFor, so it takes as long as that thing and no longer, and a loaded machine only makes it slower, not
// wrong. A fixed sleep stays only where a test means a moment (kill it 300 ms into the restore) or checks that
// nothing happens within one. The Python tests' counterpart is guest/hltharness/wait.py.
#ifndef HALITE_TESTS_WAIT_FOR_H_
#define HALITE_TESTS_WAIT_FOR_H_

#include <chrono>
#include <thread>

namespace halite::testing {

// Calls `done` every `poll` until it returns true or `timeout` has passed; returns its last answer.
template <typename Pred>
bool WaitFor(Pred&& done, std::chrono::milliseconds timeout = std::chrono::seconds(10),
             std::chrono::microseconds poll = std::chrono::milliseconds(1)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return done();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace halite::testing

#endif  // HALITE_TESTS_WAIT_FOR_H_
