// Puts every parameter of a checkpoint on the device its module is placed on: in place from the
// memory-mapped file where the device can use host memory as it is, else written through the
// device interface (converted on the host first when the dtype changes, repacked on the device
// where its backend keeps matrices in a layout of its own).
#pragma once

#include <functional>
#include <string>

#include "core/thread_pool.h"
#include "engine/checkpoint.h"
#include "runtime/placement.h"
#include "runtime/weight_store.h"

namespace ferry {

// Called after each tensor: bytes done, bytes total.
using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;

// Loads the parameters of every module of ckpt.spec onto placement.device_of(module). A tied
// parameter (one name read by two modules) is loaded once, on its first module's device.
// Each parameter gets its spec's compute dtype: matrices as stored, or as --dtype chose
// (apply_weight_quant); vectors widened to f32. On a host-addressable device
// (CPU), a tensor whose stored dtype is the dtype it runs in is used in place from the mapped file
// (charged against the device's budget), unless the device repacks it (Device::repacks_weight:
// matrices the graph multiplies by; a token embedding table only where the head shares it); every
// other tensor is copied or converted, and the mapping's pages it came from are released.
void load_weights(const Checkpoint& ckpt, const Placement& placement, WeightStore& weights,
                  const LoadProgress& progress = {});

// Copies `source` (a host-addressable tensor, e.g. a view of a mapped checkpoint) onto `device`,
// allocated there (charged against its budget) and converted to `dtype` on the host when it differs
// from the stored one (through f32, a bounded number of rows at a time). Returns once the bytes
// are on the device. Conversions run on `pool` (nullptr: one thread). Throws Error(Shape) when
// `dtype` cannot hold the tensor's rows, Error(OutOfMemory) from the device's budget.
Tensor materialize_weight(const Tensor& source, Device& device, DType dtype, const std::string& name,
                          ThreadPool* pool = nullptr);

}  // namespace ferry
