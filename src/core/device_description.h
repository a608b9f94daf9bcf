// What a machine can say about one of its devices before any is opened: what `ferry devices`
// lists, and where a default budget comes from.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"

namespace ferry {

struct DeviceDescription {
  DeviceId id;
  std::string name;
  std::string kind;            // "cpu" for a CPU device; a GPU's: "discrete", "integrated", "virtual", "cpu" (software)
  uint64_t total_bytes = 0;    // 0: not known
  uint64_t free_bytes = 0;     // 0: not known
  bool free_measured = false;  // free_bytes comes from the driver (VK_EXT_memory_budget), not the heap size
  size_t default_budget = 0;   // what the device gets when no budget is given (Allocator::kUnlimited: none)
  std::vector<std::pair<std::string, std::string>> features;  // e.g. {"subgroup", "32"}, {"f16", "yes"}
};

}  // namespace ferry
