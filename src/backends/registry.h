// The device registry: each device kind to the factory of its backend, and the set of devices one
// run owns. A new backend is a room under backends/ and one entry in registry.cpp.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"

namespace ferry {

// Makes a device of spec.id.type with spec.budget and `threads` worker threads. Error(Unsupported)
// for a kind this build cannot run (cuda: a planning target only).
using DeviceFactory = std::function<std::unique_ptr<Device>(const DeviceSpec& spec, int threads)>;
std::unique_ptr<Device> create_device(const DeviceSpec& spec, int threads);
bool can_create(DeviceType type);  // whether this build has a backend for the kind

// Owns the devices of one run.
class DeviceSet {
 public:
  DeviceSet() = default;
  // Threads: a spec's own count, else total_threads split evenly (at least one each).
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
