// A plan: which device each module (placement unit) lives on, and what that costs each device.
// Plans are data, made before any weight is read. This is the first strategy (contiguous,
// balanced by bytes); the placement issue adds the estimator's workspace terms, more strategies,
// custom maps and validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "models/decoder.h"

namespace ferry {

struct ModuleCost {
  std::string module;
  uint64_t weight_bytes = 0;  // as the module will hold them (compute dtype)
  uint64_t kv_bytes = 0;      // KV cache at the planned context
};

struct DevicePlan {
  DeviceSpec device;
  std::vector<std::string> modules;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
};

struct Plan {
  std::vector<DevicePlan> devices;
  std::vector<std::pair<std::string, int>> assignment;  // module -> index into devices, in model order
  int64_t context = 0;
  uint64_t crossing_bytes_per_token = 0;  // activations moved between devices for one decoded token

  int device_index_of(const std::string& module) const;  // -1 if absent
  std::string describe() const;                          // a table: device, modules, weights, KV, total, budget
};

// Per-module costs for `spec` at `context` tokens of f32 KV cache.
std::vector<ModuleCost> module_costs(const ModelSpec& spec, int64_t context);

// Splits the modules in order over the devices so each gets a share of the bytes proportional to
// its budget (equal shares when budgets are unlimited), keeping tied weights with their first
// module. Throws Error(OutOfMemory) naming the device, the overshoot and what would fit when a
// device's share exceeds its budget.
Plan plan_balanced(const ModelSpec& spec, const std::vector<DeviceSpec>& devices, int64_t context);

}  // namespace ferry
