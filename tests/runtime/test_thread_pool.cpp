// The thread pool under the load a decode step puts on it: many short jobs back to back, jobs of
// one task, exceptions, idle workers going to sleep and waking, pools used in turn.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

using namespace ferry;

namespace {

// Runs `jobs` jobs of 1..max_tasks tasks and checks that every task of every job ran exactly once
// and on a thread index inside the pool.
void run_many_jobs(ThreadPool& pool, int jobs, int64_t max_tasks) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(max_tasks));
  for (int j = 0; j < jobs; ++j) {
    const int64_t n = 1 + j % max_tasks;
    for (int64_t t = 0; t < n; ++t) hits[static_cast<size_t>(t)].store(0, std::memory_order_relaxed);
    std::atomic<int> bad_thread{0};
    pool.parallel_for(n, [&](int64_t task, int thread) {
      if (thread < 0 || thread >= pool.size()) bad_thread.fetch_add(1);
      hits[static_cast<size_t>(task)].fetch_add(1, std::memory_order_relaxed);
    });
    ASSERT_EQ(bad_thread.load(), 0) << "job " << j;
    for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[static_cast<size_t>(t)].load(), 1) << "job " << j << " task " << t;
  }
}

}  // namespace

TEST(ThreadPoolJobs, ManyShortJobsRunEveryTaskOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    run_many_jobs(pool, 20000, 7);
  }
}

TEST(ThreadPoolJobs, WorkersThatSleptWakeForTheNextJob) {
  ThreadPool pool(3);
  run_many_jobs(pool, 10, 16);
  // Long enough for idle workers to stop spinning and sleep.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::atomic<int> distinct{0};
  std::vector<std::atomic<int>> by_thread(3);
  pool.parallel_for(3000, [&](int64_t, int thread) {
    if (by_thread[static_cast<size_t>(thread)].fetch_add(1) == 0) distinct.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  });
  int total = 0;
  for (auto& n : by_thread) total += n.load();
  EXPECT_EQ(total, 3000);
  EXPECT_GE(distinct.load(), 2) << "a woken worker takes part in a long job";
  run_many_jobs(pool, 1000, 5);
}

TEST(ThreadPoolJobs, FirstExceptionIsRethrownAndThePoolStaysUsable) {
  ThreadPool pool(2);
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> ran{0};
    try {
      pool.parallel_for(10, [&](int64_t t, int) {
        ran.fetch_add(1);
        if (t == round % 10) throw std::runtime_error("task failed");
      });
      ADD_FAILURE() << "no exception in round " << round;
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "task failed");
    }
    EXPECT_EQ(ran.load(), 10) << "the other tasks still run";
  }
  run_many_jobs(pool, 1000, 9);
}

TEST(ThreadPoolJobs, AcceptsStdFunctionAndMutableCallables) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  const std::function<void(int64_t, int)> fn = [&](int64_t t, int) { sum.fetch_add(t); };
  pool.parallel_for(100, fn);
  EXPECT_EQ(sum.load(), 4950);
  int64_t calls = 0;  // a one-thread pool runs every task on the caller, in order
  ThreadPool single(1);
  single.parallel_for(5, [&calls, step = 1](int64_t, int) mutable { calls += step++; });
  EXPECT_EQ(calls, 1 + 2 + 3 + 4 + 5);
}

TEST(ThreadPoolJobs, RangesCoverEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 100, 12345}) {
      for (int64_t min_chunk : {1, 16, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_range(n, min_chunk, [&](int64_t begin, int64_t end, int) {
          ASSERT_LT(begin, end);
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << min_chunk;
      }
    }
  }
}

TEST(ThreadPoolJobs, TwoPoolsUsedInTurnAndFromTwoThreads) {
  // Two devices each own a pool; their jobs may come from different caller threads at once.
  ThreadPool a(2), b(2);
  std::thread other([&] { run_many_jobs(b, 5000, 6); });
  run_many_jobs(a, 5000, 6);
  other.join();
  for (int i = 0; i < 1000; ++i) {
    run_many_jobs(a, 1, 4);
    run_many_jobs(b, 1, 4);
  }
}

TEST(ThreadPoolJobs, DestroyedWhileWorkersSpinOrSleep) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(3);
    if (i % 2 == 0) run_many_jobs(pool, 3, 4);
    if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}
