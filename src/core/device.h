// Devices own their resources: an allocator with a byte budget and live/peak accounting, and a
// thread pool. There is no current device, no global allocator and no global thread count.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace ferry {

// Cpu devices run here. Cuda devices exist only as planning targets (`ferry plan --devices
// cuda:0=24GiB,...`): ferry has no CUDA kernels, and DeviceSet refuses to create one.
enum class DeviceType : uint8_t { Cpu, Cuda };

// A value type naming a device: "cpu:0", "cpu:1", "cuda:0", ... Comparable and hashable.
struct DeviceId {
  DeviceType type = DeviceType::Cpu;
  int index = 0;

  static DeviceId parse(std::string_view text);  // throws Error(Usage) with the accepted forms
  std::string str() const;
  friend bool operator==(const DeviceId&, const DeviceId&) = default;
  friend auto operator<=>(const DeviceId&, const DeviceId&) = default;
};

// Counts bytes against a budget. Allocations are 64-byte aligned.
class Allocator {
 public:
  static constexpr size_t kUnlimited = SIZE_MAX;
  static constexpr size_t kAlignment = 64;

  Allocator(std::string device_name, size_t budget);
  ~Allocator();

  // Throws Error(OutOfMemory) naming the device, the request, what is live and the budget.
  // `what` names the tensor or purpose, for the message.
  void* allocate(size_t bytes, std::string_view what);
  void release(void* ptr, size_t bytes);

  size_t budget() const { return budget_; }
  size_t live() const { return live_.load(); }
  size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  std::string device_name_;
  size_t budget_;
  std::atomic<size_t> live_{0};
  std::atomic<size_t> peak_{0};
};

class Device {
 public:
  Device(DeviceId id, size_t budget_bytes, int n_threads);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceId& id() const { return id_; }
  std::string name() const { return id_.str(); }
  Allocator& allocator() { return allocator_; }
  const Allocator& allocator() const { return allocator_; }
  ThreadPool& threads() { return threads_; }

 private:
  DeviceId id_;
  Allocator allocator_;
  ThreadPool threads_;
};

// Parses "1.5GiB", "512MiB", "6GB", "1024" (bytes). Throws Error(Usage).
size_t parse_byte_size(std::string_view text);
std::string format_bytes(size_t bytes);  // "1.50 GiB"

struct DeviceSpec {
  DeviceId id;
  size_t budget = Allocator::kUnlimited;
  int threads = 0;  // 0: decided by the caller
};

// Parses "cpu:0=6GiB,cpu:1=6GiB" or "cpu:0,cpu:1" (budgets optional), each entry optionally ending
// in "@N" for that device's worker threads ("cpu:0=6GiB@2"). Duplicate ids are an error.
std::vector<DeviceSpec> parse_device_list(std::string_view text);

// The devices to use when none are given: one CPU device per NUMA node, each with its node's
// memory as budget (read from /sys/devices/system/node), or one unlimited cpu:0 when that is
// unavailable.
std::vector<DeviceSpec> default_devices();

// "cpu:0=6GiB@2,cpu:1": the inverse of parse_device_list (unlimited budgets and default threads omitted).
std::string format_device_list(const std::vector<DeviceSpec>& specs);

// Owns the devices of one run.
class DeviceSet {
 public:
  // Threads: a spec's own count, else total_threads split evenly (at least one each). Only CPU
  // devices can be created (Error(Unsupported) for others: they are planning targets).
  DeviceSet(const std::vector<DeviceSpec>& specs, int total_threads);
  size_t size() const { return devices_.size(); }
  Device& at(size_t i) { return *devices_.at(i); }
  Device& get(const DeviceId& id);  // throws Error(Usage) if absent
  std::vector<Device*> all();

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace ferry

template <>
struct std::hash<ferry::DeviceId> {
  size_t operator()(const ferry::DeviceId& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.type) * 1000003 + d.index);
  }
};
