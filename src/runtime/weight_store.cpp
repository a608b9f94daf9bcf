#include "runtime/weight_store.h"

#include <algorithm>

#include "core/error.h"

namespace ferry {

void WeightStore::add(const std::string& name, Tensor tensor) {
  if (!tensor.defined()) fail(ErrorKind::Usage, "weight '{}' has no data", name);
  if (tensor.device() == nullptr) {
    fail(ErrorKind::Usage,
         "weight '{}' is in host memory; the weight store holds device tensors only: put it on its module's "
         "device first (materialize_weight() in engine/weight_loader.h)",
         name);
  }
  if (weights_.count(name)) {
    fail(ErrorKind::Usage, "weight '{}' is added twice (first on {}, again on {})", name,
         weights_.at(name).device_name(), tensor.device_name());
  }
  tensor.set_name(name);
  weights_.emplace(name, std::move(tensor));
  generation_++;
}

void WeightStore::clear() {
  weights_.clear();
  generation_++;
}

const Tensor* WeightStore::find(const std::string& name) const {
  auto it = weights_.find(name);
  return it == weights_.end() ? nullptr : &it->second;
}

}  // namespace ferry
