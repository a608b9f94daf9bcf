// Where each module lives. Plans produce this; the scheduler consumes it. Model code never sees it.
#pragma once

#include <string>
#include <unordered_map>

#include "core/device.h"

namespace ferry {

struct Placement {
  std::unordered_map<std::string, Device*> module_device;  // module name -> device
  Device* fallback = nullptr;                              // for modules not listed (may be nullptr)

  // Throws Error(Usage) naming the module when it is unplaced and there is no fallback.
  Device& device_of(const std::string& module) const;

  static Placement single(Device& device) { return Placement{{}, &device}; }
};

}  // namespace ferry
