#include "engine/weight_loader.h"

#include "core/error.h"

namespace ferry {

void load_weights(const Checkpoint& ckpt, const Placement& placement, WeightStore& weights,
                  const LoadProgress& progress) {
  const uint64_t total = ckpt.weight_bytes();
  uint64_t done = 0;
  for (const auto& module : ckpt.spec.modules) {
    Device& device = placement.device_of(module.name);
    for (const auto& p : module.params) {
      if (weights.find(p.name) != nullptr) continue;  // tied: already loaded by an earlier module
      const TensorRecord* record = ckpt.tensors.find(p.name);
      if (record == nullptr) fail(ErrorKind::Internal, "{}: tensor '{}' vanished after validation", ckpt.path, p.name);
      // [1, N] vectors are read as [N].
      const Tensor source = record->view().reshape(p.shape);
      weights.add(p.name, materialize_weight(source, device, p.compute_dtype, p.name));
      done += record->nbytes;
      if (progress) progress(done, total);
    }
  }
}

}  // namespace ferry
