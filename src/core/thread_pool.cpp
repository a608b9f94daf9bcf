#include "core/thread_pool.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"

namespace ferry {

namespace {
// Spinning before sleeping keeps back-to-back small jobs cheap; yielding now and then lets a
// descheduled worker run when another process shares the cores, instead of burning the time slice
// it needs.
constexpr int kSpins = 4096;
inline void relax(int spin) {
  if ((spin & 63) == 63) {
    std::this_thread::yield();
  } else {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  try {
    for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
  } catch (const std::system_error& e) {
    // Stop the workers that did start before the members they wait on are destroyed.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    fail(ErrorKind::Usage, "could not start {} worker threads ({} started: {}); use fewer threads", n_threads_ - 1,
         workers_.size(), e.what());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks(int thread) {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    try {
      (*job_)(task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: decode issues many small jobs back to back, and a sleep/wake costs more
    // than the job itself.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpins; ++spin) {
      relax(spin);
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
    }
    run_tasks(thread);
    if (active_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_task_.store(0);
    error_ = nullptr;
    active_workers_.store(n_threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_tasks(0);
  // Wait for the workers: spin first, then sleep.
  for (int spin = 0; spin < kSpins && active_workers_.load(std::memory_order_acquire) != 0; ++spin) relax(spin);
  if (active_workers_.load() != 0) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_workers_.load() == 0; });
  }
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_range(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t, int)>& fn,
                                int chunks_per_thread) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  int64_t chunks = std::max<int64_t>(1, static_cast<int64_t>(n_threads_) * chunks_per_thread);
  int64_t chunk = std::max(min_chunk, (n + chunks - 1) / chunks);
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  parallel_for(n_chunks, [&](int64_t c, int thread) {
    const int64_t begin = c * chunk;
    fn(begin, std::min(n, begin + chunk), thread);
  });
}

}  // namespace ferry
