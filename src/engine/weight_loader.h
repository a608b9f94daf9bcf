// Materialises every parameter of a checkpoint onto the device its module is placed on.
#pragma once

#include <functional>

#include "engine/checkpoint.h"
#include "runtime/placement.h"
#include "runtime/weight_store.h"

namespace ferry {

// Called after each tensor: bytes done, bytes total.
using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;

// Loads the parameters of every module of ckpt.spec onto placement.device_of(module). A tied
// parameter (one name read by two modules) is loaded once, on its first module's device.
// Matrices keep their stored dtype; vectors are widened to f32.
void load_weights(const Checkpoint& ckpt, const Placement& placement, WeightStore& weights,
                  const LoadProgress& progress = {});

}  // namespace ferry
