// A token bucket limiting bytes per second, shared by threads. Used to throttle live saves and the restore
// engine's background loader so the guest keeps its I/O and CPU.
#ifndef HALITE_COMMON_RATE_LIMITER_H_
#define HALITE_COMMON_RATE_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <mutex>

namespace halite {

class RateLimiter {
 public:
  // 0 bytes per second means unlimited. The bucket holds at most `burst_bytes` (default: 1/10 s worth, at
  // least 1 MiB) so a long idle period does not allow an unthrottled burst afterwards.
  explicit RateLimiter(uint64_t bytes_per_second, uint64_t burst_bytes = 0);
  // Blocks until `bytes` may be spent. Requests larger than the burst are allowed to go into debt.
  void Acquire(uint64_t bytes);
  // How long Acquire(bytes) would wait now, without spending.
  std::chrono::nanoseconds WaitTime(uint64_t bytes);
  bool unlimited() const { return rate_ == 0; }
  uint64_t rate() const { return rate_; }

 private:
  void Refill(std::chrono::steady_clock::time_point now);
  uint64_t rate_;
  double burst_;
  double tokens_;
  std::chrono::steady_clock::time_point last_;
  std::mutex mu_;
};

}  // namespace halite

#endif  // HALITE_COMMON_RATE_LIMITER_H_
