// Persistent per-module state the runtime owns (each layer's KV cache): name -> tensor on the
// device of the module that owns it. Created zero-filled the first time a graph reads it and kept
// across runs until clear().
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/device.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "runtime/placement.h"
#include "runtime/tensor_map.h"

namespace ferry {

class StateStore {
 public:
  // Allocates every State value of `graph` that is missing, zero-filled, on the device of its owning
  // module. An existing one must have the dtype and shape the graph declares (Error(Shape) otherwise).
  // Throws Error(OutOfMemory) from the allocator when the device cannot hold it.
  void ensure(const Graph& graph, const Placement& placement);

  // nullptr if absent. The tensor's contents may be written; the tensor itself is replaced only
  // through ensure() and clear(), so executors can keep pointers to it (see generation()).
  Tensor* find(const std::string& name);
  const Tensor* find(const std::string& name) const;

  size_t size() const { return states_.size(); }
  size_t bytes_on(const Device& device) const { return ferry::bytes_on(states_, device); }
  std::map<std::string, size_t> bytes_by_device() const { return ferry::bytes_by_device(states_); }
  void clear();  // frees every state tensor

  // Changes whenever a tensor is created or freed: a plan that points at state tensors is valid
  // while this stays the same.
  uint64_t generation() const { return generation_; }

 private:
  TensorMap states_;
  uint64_t generation_ = 0;
};

}  // namespace ferry
