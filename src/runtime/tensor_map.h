// Name -> tensor maps, as the weight and state stores keep them, and the byte counts both report.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>

#include "core/device.h"
#include "core/tensor.h"

namespace ferry {

using TensorMap = std::unordered_map<std::string, Tensor>;

size_t bytes_on(const TensorMap& tensors, const Device& device);          // bytes of the tensors on `device`
std::map<std::string, size_t> bytes_by_device(const TensorMap& tensors);  // device name -> bytes there

}  // namespace ferry
