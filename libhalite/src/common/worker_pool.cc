#include "common/worker_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

namespace halite {

unsigned WorkerPool::ResolveThreads(unsigned requested) {
  if (requested > 0) return requested;
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? n : 1;
}

WorkerPool::WorkerPool(unsigned threads, bool low_priority) {
  threads = ResolveThreads(threads);
  for (unsigned i = 0; i < threads; ++i) {
    threads_.emplace_back([this, low_priority] {
      // Linux: a thread id names one thread for setpriority, not the process. Never raised back above the
      // caller's own niceness.
      if (low_priority) (void)setpriority(PRIO_PROCESS, id_t(gettid()), std::max(10, getpriority(PRIO_PROCESS, 0)));
      Run();
    });
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::Enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void WorkerPool::Run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace halite
