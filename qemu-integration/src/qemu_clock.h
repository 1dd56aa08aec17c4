// Time measurements shared by the QEMU conversations (internal to halite_qemu): durations on the steady clock,
// and wall-clock stamps, which is what QEMU's QMP events carry and what benchmarks line up with other processes.
#ifndef HALITE_QEMU_SRC_QEMU_CLOCK_H_
#define HALITE_QEMU_SRC_QEMU_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace halite::qemu {

using Clock = std::chrono::steady_clock;

inline uint64_t MicrosSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

// Microseconds since the Unix epoch.
inline int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace halite::qemu

#endif  // HALITE_QEMU_SRC_QEMU_CLOCK_H_
