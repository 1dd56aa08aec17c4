#include "common/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace halite {

RateLimiter::RateLimiter(uint64_t bytes_per_second, uint64_t burst_bytes)
    : rate_(bytes_per_second), last_(std::chrono::steady_clock::now()) {
  burst_ = burst_bytes ? double(burst_bytes) : std::max(double(bytes_per_second) / 10.0, double(1 << 20));
  tokens_ = burst_;
}

void RateLimiter::Refill(std::chrono::steady_clock::time_point now) {
  double secs = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  tokens_ = std::min(burst_, tokens_ + secs * double(rate_));
}

std::chrono::nanoseconds RateLimiter::WaitTime(uint64_t bytes) {
  if (rate_ == 0) return std::chrono::nanoseconds(0);
  std::lock_guard<std::mutex> lock(mu_);
  Refill(std::chrono::steady_clock::now());
  if (tokens_ >= 0 && (tokens_ >= double(bytes) || tokens_ >= burst_)) return std::chrono::nanoseconds(0);
  double need = tokens_ < 0 ? -tokens_ : double(bytes) - tokens_;
  return std::chrono::nanoseconds(int64_t(need / double(rate_) * 1e9));
}

void RateLimiter::Acquire(uint64_t bytes) {
  if (rate_ == 0) return;
  for (;;) {
    std::chrono::nanoseconds wait;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Refill(std::chrono::steady_clock::now());
      // Spend as soon as the bucket is full or holds enough; oversized requests go into debt.
      if (tokens_ >= double(bytes) || tokens_ >= burst_) {
        tokens_ -= double(bytes);
        return;
      }
      double need = std::min(double(bytes), burst_) - tokens_;
      wait = std::chrono::nanoseconds(int64_t(need / double(rate_) * 1e9) + 1);
    }
    std::this_thread::sleep_for(wait);
  }
}

}  // namespace halite
