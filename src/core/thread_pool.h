// A device's worker threads. Each Device owns one; there is no global pool.
//
// Decode runs hundreds of short jobs per token, so a job costs no allocation (the callable is
// passed by reference, not wrapped in a std::function), and the caller never waits for a worker
// that has not started on the job: a worker joins a job only while it is open, and the caller
// closes it once every task is taken. On a shared machine a worker that the OS has descheduled
// then costs nothing, where waiting for it would stall every job by a time slice.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
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
  // Not reentrant: a task must not call parallel_for on the same pool.
  template <typename F>
  void parallel_for(int64_t n_tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(
        n_tasks,
        [](const void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(const_cast<void*>(ctx)))(task, thread); },
        &fn);
  }

  // Splits [0, n) into about size() * chunks_per_thread ranges of at least min_chunk and runs
  // fn(begin, end, thread) on each.
  template <typename F>
  void parallel_range(int64_t n, int64_t min_chunk, F&& fn, int chunks_per_thread = 4) {
    if (n <= 0) return;
    const int64_t chunk = range_chunk(n, min_chunk, chunks_per_thread);
    parallel_for((n + chunk - 1) / chunk, [&](int64_t c, int thread) {
      const int64_t begin = c * chunk;
      fn(begin, begin + chunk < n ? begin + chunk : n, thread);
    });
  }

 private:
  using TaskFn = void (*)(const void* ctx, int64_t task, int thread);

  void run(int64_t n_tasks, TaskFn fn, const void* ctx);
  int64_t range_chunk(int64_t n, int64_t min_chunk, int chunks_per_thread) const;
  void worker_loop(int thread);
  void run_tasks(int thread);
  void stop_workers();

  // state_: the job generation in the high 32 bits, kClosed, and the number of workers that
  // joined the job in the low bits.
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kJoinedMask = kClosed - 1;

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> stop_{false};

  // Sleeping workers (after a while without jobs) wait here.
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};

  // The current job: written by the caller before it opens the job, read by the workers that join.
  TaskFn job_fn_ = nullptr;
  const void* job_ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<uint32_t> finished_{0};  // joined workers done with the job
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace ferry
