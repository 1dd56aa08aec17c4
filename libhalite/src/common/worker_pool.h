// A fixed pool of worker threads running submitted tasks in FIFO order. Thread-safe.
#ifndef HALITE_COMMON_WORKER_POOL_H_
#define HALITE_COMMON_WORKER_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace halite {

class WorkerPool {
 public:
  // `low_priority`: the workers run at nice 10 (their own threads only), so next to a normal thread on one CPU
  // they get about a tenth of it (a save of a running guest leaves the guest's vCPU threads their CPUs) but still
  // progress on a busy host. Best effort: a refusal leaves them as they were.
  explicit WorkerPool(unsigned threads, bool low_priority = false);
  ~WorkerPool();  // finishes queued tasks, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn on a worker; the future yields its result.
  template <typename F>
  auto Submit(F fn) -> std::future<decltype(fn())> {
    using R = decltype(fn());
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    std::future<R> f = task->get_future();
    Enqueue([task] { (*task)(); });
    return f;
  }
  unsigned size() const { return unsigned(threads_.size()); }

  // 0 means "one per online CPU".
  static unsigned ResolveThreads(unsigned requested);

 private:
  void Enqueue(std::function<void()> job);
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace halite

#endif  // HALITE_COMMON_WORKER_POOL_H_
