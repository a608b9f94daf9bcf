// A device's worker threads. Each Device owns one; there is no global pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

class ThreadPool {
 public:
  // n_threads counts the calling thread: n_threads - 1 workers are started.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, thread) for task in [0, n_tasks) across the pool, the caller included, and
  // returns when all are done. thread is in [0, size()). Tasks are handed out dynamically.
  // An exception thrown by a task is rethrown here (the first one; the rest of the tasks still run).
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

  // Splits [0, n) into about size() * chunks_per_thread ranges of at least min_chunk and runs
  // fn(begin, end, thread) on each.
  void parallel_range(int64_t n, int64_t min_chunk,
                      const std::function<void(int64_t begin, int64_t end, int thread)>& fn, int chunks_per_thread = 4);

 private:
  void worker_loop(int thread);
  void run_tasks(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;

  // The current job.
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> active_workers_{0};
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace ferry
