#include "runtime/state_store.h"

#include "core/error.h"

namespace ferry {

void StateStore::ensure(const Graph& graph, const Placement& placement) {
  for (const Value& v : graph.values()) {
    if (v.kind != ValueKind::State) continue;
    if (v.module < 0 || static_cast<size_t>(v.module) >= graph.modules().size()) {
      fail(ErrorKind::Internal, "state '{}' has no owning module", v.name);
    }
    const std::string& module = graph.modules()[static_cast<size_t>(v.module)];
    auto it = states_.find(v.name);
    if (it != states_.end()) {
      const Tensor& t = it->second;
      if (t.dtype() != v.dtype || !(t.shape() == v.shape)) {
        fail(ErrorKind::Shape,
             "state '{}' (module '{}') exists as {} {} but this graph declares it as {} {}; clear the state "
             "(start a new session) when the context length or dtype changes",
             v.name, module, dtype_name(t.dtype()), t.shape().str(), dtype_name(v.dtype), v.shape.str());
      }
      continue;
    }
    Device& device = placement.device_of(module);
    Tensor t = Tensor::empty(device, v.dtype, v.shape, v.name);
    device.fill_zero(t);
    device.synchronize();
    states_.emplace(v.name, std::move(t));
    generation_++;
  }
}

void StateStore::clear() {
  states_.clear();
  generation_++;
}

Tensor* StateStore::find(const std::string& name) {
  auto it = states_.find(name);
  return it == states_.end() ? nullptr : &it->second;
}

const Tensor* StateStore::find(const std::string& name) const {
  auto it = states_.find(name);
  return it == states_.end() ? nullptr : &it->second;
}

}  // namespace ferry
