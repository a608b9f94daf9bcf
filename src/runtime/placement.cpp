#include "runtime/placement.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace ferry {

Device& Placement::device_of(const std::string& module) const {
  auto it = module_device.find(module);
  if (it != module_device.end() && it->second != nullptr) return *it->second;
  if (fallback != nullptr) return *fallback;

  std::vector<std::string> placed;
  for (const auto& [name, device] : module_device) {
    if (device != nullptr) placed.push_back(name + "=" + device->name());
  }
  std::sort(placed.begin(), placed.end());
  std::string listed;
  for (const auto& p : placed) listed += (listed.empty() ? "" : ", ") + p;
  fail(ErrorKind::Usage,
       "module '{}' is not placed on any device and the placement has no fallback device; placed modules: {}. "
       "Add '{}' to the placement or give it a fallback device",
       module, listed.empty() ? std::string("(none)") : listed, module);
}

}  // namespace ferry
