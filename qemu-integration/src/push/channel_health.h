// The one failure of a push restore channel, and the lock its parts share to wait for each other's news.
//
// Errors are sticky: the first failure is kept, the socket is shut down (a postcopy destination then pauses with
// its guest frozen instead of running on incomplete memory), and every later call returns it. The section
// writer, the return-path listener and the request workers all report here, and everything that waits (for a
// request, a SHUT, the end of the return path, a failure) waits on this object's condition variable, so that one
// failure wakes every waiter.
#ifndef HALITE_QEMU_PUSH_CHANNEL_HEALTH_H_
#define HALITE_QEMU_PUSH_CHANNEL_HEALTH_H_

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "halite/status.h"

namespace halite::qemu::push {

class ChannelHealth {
 public:
  explicit ChannelHealth(int fd) : fd_(fd) {}

  // Keeps `why` if nothing failed before, wakes every waiter and shuts the socket down. Not with Lock() held.
  void Fail(const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.ok()) error_ = why.ok() ? Status::Internal("restore channel failed without a reason") : why;
      failed_.store(true, std::memory_order_release);
      cv_.notify_all();
    }
    // Unblocks a destination waiting for pages and our own threads blocked on the socket.
    shutdown(fd_, SHUT_RDWR);
  }

  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The first error (ok while healthy). Not with Lock() held.
  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  // Ok while healthy, else the first error: what every public call returns once the channel failed.
  Status Sticky() const { return failed() ? status() : Status::Ok(); }
  // The first error, with Lock() held.
  const Status& error_locked() const { return error_; }

  // The shared lock. Whoever changes something another part waits for does it under this lock and calls
  // NotifyAll() before releasing it.
  std::unique_lock<std::mutex> Lock() const { return std::unique_lock<std::mutex>(mu_); }
  void NotifyAll() { cv_.notify_all(); }
  // Waits (with Lock() held) until `ready()` or a failure.
  template <typename Ready>
  void Wait(std::unique_lock<std::mutex>& lock, Ready ready) {
    cv_.wait(lock, [&] { return failed() || ready(); });
  }
  // The same for at most `timeout`; returns whether ready() or a failure ended the wait.
  template <typename Ready>
  bool WaitFor(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout, Ready ready) {
    return cv_.wait_for(lock, timeout, [&] { return failed() || ready(); });
  }

 private:
  const int fd_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status error_;
  std::atomic<bool> failed_{false};
};

}  // namespace halite::qemu::push

#endif  // HALITE_QEMU_PUSH_CHANNEL_HEALTH_H_
