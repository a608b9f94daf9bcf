#include "core/stream.h"

#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/spin.h"

namespace ferry {

namespace {
// Steps the stream spins for the next submission before it sleeps: decode submits a few per token.
constexpr uint32_t kSpins = 2048;
}  // namespace

void StreamEvent::wait() const {
  done_.wait(false, std::memory_order_acquire);
}

void StreamEvent::signal() {
  done_.store(true, std::memory_order_release);
  done_.notify_all();
}

Stream::Stream(std::string name) : name_(std::move(name)) {
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (const std::system_error& e) {
    fail(ErrorKind::Usage, "could not start the thread of device {}: {}", name_, e.what());
  }
}

Stream::~Stream() {
  try {
    synchronize();
  } catch (...) {  // nobody is left to report it to
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Stream::push(Task task) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    wake = sleeping_;
  }
  queued_.fetch_add(1, std::memory_order_release);
  if (wake) wake_.notify_one();
}

void Stream::submit(std::function<void()> task) {
  push(Task{std::move(task), false});
}

void Stream::submit_always(std::function<void()> task) {
  push(Task{std::move(task), true});
}

std::shared_ptr<const Event> Stream::record() {
  auto event = std::make_shared<StreamEvent>();
  push(Task{[event] { event->signal(); }, true});
  return event;
}

void Stream::wait(std::shared_ptr<const Event> event) {
  push(Task{[event = std::move(event)] { event->wait(); }, true});
}

void Stream::synchronize() {
  const uint64_t target = queued_.load(std::memory_order_acquire);
  for (uint64_t ran = ran_.load(std::memory_order_acquire); ran < target; ran = ran_.load(std::memory_order_acquire)) {
    ran_.wait(ran, std::memory_order_acquire);
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = std::exchange(error_, nullptr);
    failed_.store(false, std::memory_order_relaxed);
  }
  if (error) std::rethrow_exception(error);
}

void Stream::loop() {
  for (;;) {
    Task task;
    {
      // Spin briefly for the next task, then sleep.
      for (uint32_t spin = 0;
           spin < kSpins && queued_.load(std::memory_order_acquire) == ran_.load(std::memory_order_relaxed); ++spin) {
        spin_relax(spin);
      }
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_ = true;
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      sleeping_ = false;
      if (queue_.empty()) return;  // stop_, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    if (task.always || !failed_.load(std::memory_order_relaxed)) {
      try {
        task.fn();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    ran_.fetch_add(1, std::memory_order_release);
    ran_.notify_all();
  }
}

}  // namespace ferry
