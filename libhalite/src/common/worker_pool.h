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
  explicit WorkerPool(unsigned threads);
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
