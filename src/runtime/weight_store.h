// The loaded model parameters: name -> tensor living on the device of the module that owns it.
// The store never moves a weight; the loader (engine/weight_loader.h) puts weights on devices.
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
  // or one in host memory (put it on a device first: engine/weight_loader.h).
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

}  // namespace ferry
