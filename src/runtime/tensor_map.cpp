#include "runtime/tensor_map.h"

namespace ferry {

size_t bytes_on(const TensorMap& tensors, const Device& device) {
  size_t total = 0;
  for (const auto& [name, t] : tensors) {
    if (t.device() == &device) total += t.nbytes();
  }
  return total;
}

std::map<std::string, size_t> bytes_by_device(const TensorMap& tensors) {
  std::map<std::string, size_t> out;
  for (const auto& [name, t] : tensors) out[t.device_name()] += t.nbytes();
  return out;
}

}  // namespace ferry
