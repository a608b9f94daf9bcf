// A device's stream: one thread that runs the work queued for the device, in order, and drives the
// device's thread pool (it is thread 0 of every parallel job). The thread that queues work goes on
// at once, so two devices compute at the same time; it waits only at an event or synchronize().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/device.h"

namespace ferry {

// Done once the stream has reached it; usable by any thread and any device.
class StreamEvent final : public Event {
 public:
  void wait() const override;
  void signal();
  bool done() const { return done_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> done_{false};
};

class Stream {
 public:
  explicit Stream(std::string name);
  ~Stream();  // waits for the queued work (its errors are dropped), then stops the thread
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues `task`. After a task throws, the stream skips the tasks queued after it (events still
  // complete) until synchronize() reports the error.
  void submit(std::function<void()> task);
  // Queues `task` to run even after an error (freeing memory the queued work may still use).
  void submit_always(std::function<void()> task);
  std::shared_ptr<const Event> record();
  void wait(std::shared_ptr<const Event> event);  // later tasks wait until `event` is done
  // Blocks until every task queued so far has run; rethrows the first error since the last call.
  void synchronize();

 private:
  struct Task {
    std::function<void()> fn;
    bool always = false;  // runs even after an error (signals an event)
  };
  void loop();
  void push(Task task);

  std::string name_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  bool stop_ = false;
  bool sleeping_ = false;
  std::atomic<uint64_t> queued_{0};           // tasks ever queued
  alignas(64) std::atomic<uint64_t> ran_{0};  // tasks ever finished (run or skipped)
  std::exception_ptr error_;                  // the first error since synchronize(); guarded by mutex_
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace ferry
