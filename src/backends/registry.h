// The device registry: each device kind to the factory of its backend, and the set of devices one
// run owns. A new backend is a room under backends/ and one entry in registry.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/device_description.h"

namespace ferry {

// Makes a device of spec.id.type with spec.budget and `threads` worker threads. Error(Unsupported)
// for a kind this build cannot run (cuda: a planning target only).
using DeviceFactory = std::function<std::unique_ptr<Device>(const DeviceSpec& spec, int threads)>;
std::unique_ptr<Device> create_device(const DeviceSpec& spec, int threads);
bool can_create(DeviceType type);  // whether this build has a backend for the kind

// Gives every spec without a budget on a device that can tell its free memory (vulkan:N, and its
// partitions vulkan:N.K) the default: free memory less a reserve for the driver, shared equally by
// the unbudgeted partitions of one device after the budgeted ones take theirs. CPU devices keep
// theirs. Error(Unsupported) saying what is missing when such a device is not on this machine.
void resolve_default_budgets(std::vector<DeviceSpec>& specs);

// Warnings for budgets this machine cannot back: CPU devices whose budgets add up to more than its
// memory (MemTotal). Planning against them succeeds and the run would swap or be killed.
std::vector<std::string> budget_warnings(const std::vector<DeviceSpec>& specs);

struct DeviceListing {
  std::vector<DeviceDescription> devices;
  std::vector<std::string> unavailable;  // kinds this machine or build cannot run, and why
};
// Every device this machine has: the CPU devices (one per NUMA node) and each Vulkan device.
DeviceListing list_devices();

// The read bandwidth of `device`'s memory in bytes per second, measured now by its own backend: a
// SIMD sum on the device's worker threads for host memory, a shader on a GPU. Decode's ceiling.
double measure_read_bandwidth(Device& device);

// Owns the devices of one run.
class DeviceSet {
 public:
  DeviceSet() = default;
  // Threads: a spec's own count, else total_threads split evenly (at least one each). Specs
  // without a budget get resolve_default_budgets's.
  DeviceSet(const std::vector<DeviceSpec>& specs, int total_threads);
  size_t size() const { return devices_.size(); }
  Device& at(size_t i) { return *devices_.at(i); }
  Device& get(const DeviceId& id);  // throws Error(Usage) if absent
  std::vector<Device*> all();
  void add(std::unique_ptr<Device> device);

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace ferry
