// The loaded model parameters: name -> tensor living on the device of the module that owns it.
// The store never moves a weight; materialize_weight() is how a weight reaches a device.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "runtime/tensor_map.h"

namespace ferry {

class WeightStore {
 public:
  // Takes a device-resident tensor. Throws Error(Usage) for a duplicate name, an undefined tensor
  // or one in host memory (materialise it onto a device first).
  void add(const std::string& name, Tensor tensor);
  const Tensor* find(const std::string& name) const;  // nullptr if absent

  size_t size() const { return weights_.size(); }
  size_t bytes_on(const Device& device) const { return ferry::bytes_on(weights_, device); }
  std::map<std::string, size_t> bytes_by_device() const { return ferry::bytes_by_device(weights_); }
  const TensorMap& all() const { return weights_; }
  void clear();

  // Changes whenever a weight is added or freed: a plan that points at weights is valid while this
  // stays the same.
  uint64_t generation() const { return generation_; }

 private:
  TensorMap weights_;
  uint64_t generation_ = 0;
};

// Copies `source` (typically a host view of a memory-mapped checkpoint tensor) onto `device`,
// allocated on the device's allocator (counted against its budget) and converted to `dtype` when it
// differs from the stored one (through f32, a bounded number of rows at a time). Throws
// Error(Shape) when `dtype` cannot hold the tensor's rows, Error(OutOfMemory) from the allocator.
Tensor materialize_weight(const Tensor& source, Device& device, DType dtype, const std::string& name);

}  // namespace ferry
