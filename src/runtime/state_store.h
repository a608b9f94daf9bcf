// Persistent per-module state the runtime owns (each layer's KV cache): name -> tensor on the
// device of the module that owns it. Created zero-filled the first time a graph reads it and kept
// across runs until clear().
#pragma once

#include <map>
#include <string>
#include <unordered_map>

#include "core/device.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "runtime/placement.h"

namespace ferry {

class StateStore {
 public:
  // Allocates every State value of `graph` that is missing, zero-filled, on the device of its owning
  // module. An existing one must have the dtype and shape the graph declares (Error(Shape) otherwise).
  // Throws Error(OutOfMemory) from the allocator when the device cannot hold it.
  void ensure(const Graph& graph, const Placement& placement);

  Tensor* find(const std::string& name);  // nullptr if absent
  const Tensor* find(const std::string& name) const;

  size_t size() const { return states_.size(); }
  size_t bytes_on(const Device& device) const;
  std::map<std::string, size_t> bytes_by_device() const;  // device name -> bytes of state there
  void clear() { states_.clear(); }                       // frees every state tensor

 private:
  std::unordered_map<std::string, Tensor> states_;
};

}  // namespace ferry
