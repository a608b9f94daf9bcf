#include "core/thread_pool.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"
#include "core/spin.h"

namespace ferry {

namespace {
// Steps a worker spins for the next job before it sleeps (see spin_relax).
constexpr uint32_t kSpins = 4096;

uint64_t generation_of(uint64_t state) {
  return state >> 32;
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  try {
    for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
  } catch (const std::system_error& e) {
    // Stop the workers that did start before the members they wait on are destroyed.
    const size_t started = workers_.size();
    stop_workers();
    fail(ErrorKind::Usage, "could not start {} worker threads ({} started: {}); use fewer threads", n_threads_ - 1,
         started, e.what());
  }
}

ThreadPool::~ThreadPool() {
  stop_workers();
}

void ThreadPool::stop_workers() {
  stop_.store(true, std::memory_order_seq_cst);
  // A new generation, closed at once: every worker wakes, none joins.
  const uint64_t next = generation_of(state_.load(std::memory_order_relaxed)) + 1;
  state_.store((next << 32) | kClosed, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    wake_.notify_all();
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void ThreadPool::run_tasks(int thread) {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    try {
      job_fn_(job_ctx_, task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;  // the last generation this worker looked at
  for (;;) {
    // Spin briefly: decode issues many small jobs back to back, and a sleep/wake costs more
    // than the job itself. Then sleep until the next job.
    uint64_t s = state_.load(std::memory_order_acquire);
    for (uint32_t spin = 0; generation_of(s) == seen && spin < kSpins; ++spin) {
      spin_relax(spin);
      s = state_.load(std::memory_order_acquire);
    }
    if (generation_of(s) == seen) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return generation_of(state_.load(std::memory_order_seq_cst)) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      s = state_.load(std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_of(s);
    // Join the job unless the caller has already closed it (then every task is taken, and the
    // caller does not wait for this worker).
    bool joined = false;
    while (generation_of(s) == seen && (s & kClosed) == 0) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    run_tasks(thread);
    finished_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, const void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  // Every worker that joined the previous job has finished it, so nobody reads these now.
  job_fn_ = fn;
  job_ctx_ = ctx;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  const uint64_t next = generation_of(state_.load(std::memory_order_relaxed)) + 1;
  state_.store(next << 32, std::memory_order_seq_cst);  // open: joined 0, not closed
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    wake_.notify_all();
  }
  run_tasks(0);
  // Every task is taken: close the job and wait only for the workers that joined it.
  const uint64_t closed = state_.fetch_or(kClosed, std::memory_order_acq_rel);
  const auto joined = static_cast<uint32_t>(closed & kJoinedMask);
  for (uint32_t spin = 0; finished_.load(std::memory_order_acquire) != joined; ++spin) spin_relax(spin);
  job_fn_ = nullptr;
  job_ctx_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

int64_t ThreadPool::range_chunk(int64_t n, int64_t min_chunk, int chunks_per_thread) const {
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t chunks = std::max<int64_t>(1, static_cast<int64_t>(n_threads_) * chunks_per_thread);
  return std::max(min_chunk, (n + chunks - 1) / chunks);
}

}  // namespace ferry
