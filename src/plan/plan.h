// A plan: which device each placement unit lives on, and what that costs each device. Plans are
// data, made before any weight is read (from checkpoint headers or config.json alone), saved and
// replayed as JSON, and checked against the budgets before loading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "models/decoder.h"
#include "plan/limits.h"

namespace ferry {

enum class UnitKind : uint8_t { Vision, Projector, Embed, Layer, Head };

// What one placement unit (a ModuleSpec) costs wherever it goes.
struct UnitCost {
  std::string module;
  UnitKind kind = UnitKind::Layer;
  uint64_t weight_bytes = 0;  // as loaded (compute dtype), each tensor rounded to the allocator's alignment
  uint64_t kv_bytes = 0;      // KV cache for max_batch x max_context
};

struct DevicePlan {
  DeviceSpec device;
  std::vector<std::string> modules;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  // The workspace buffer the runtime allocates: the largest of the steps' packed activations (the
  // logits buffer on the head's device included).
  uint64_t workspace_bytes = 0;
  uint64_t logits_bytes = 0;        // of which: the logits the step leaves on this device
  uint64_t vision_bytes = 0;        // the vision tower + projector step's activations here, at the most images
                                    // (workspace covers it: workspace is the largest of all steps)
  uint64_t image_embeds_bytes = 0;  // image embeddings held here from the vision step to the prefill
  uint64_t reserve_bytes = 0;

  uint64_t total() const { return weight_bytes + kv_bytes + workspace_bytes + image_embeds_bytes + reserve_bytes; }
  bool over_budget() const { return device.budget != Allocator::kUnlimited && total() > device.budget; }
};

// An activation crossing from one unit to the next on another device.
struct Crossing {
  std::string from_module, to_module;
  int from_device = 0, to_device = 0;
  uint64_t bytes = 0;      // per decoded token; per image when per_image
  bool per_image = false;  // the projector's image features, moved once per image
};

struct Plan {
  std::string strategy;
  RunLimits limits;
  std::vector<DevicePlan> devices;
  std::vector<std::pair<std::string, int>> assignment;  // module -> index into devices, in model order
  std::vector<Crossing> crossings;
  std::vector<UnitCost> units;            // what each unit costs, in model order (estimate_plan)
  uint64_t crossing_bytes_per_token = 0;  // activations moved between devices for one decoded token
  int64_t context = 0;                    // = limits.max_context
  int64_t images = 0;                     // images the vision step is planned for (the model's most; 0: no tower)

  int device_index_of(const std::string& module) const;  // -1 if absent
  bool fits() const;                                     // no device over its budget
  // A table: device, modules, weights, KV, workspace, total, budget; then the crossings.
  std::string describe() const;
};

// Per-unit costs of `spec` under `limits` (weight dtype conversion applied).
std::vector<UnitCost> unit_costs(const ModelSpec& spec, const RunLimits& limits);

// Fills a plan's memory figures for its assignment: weights and KV by unit, workspace by simulating
// the largest step's graph (plan/step_memory.h), the reserve, and the crossings.
void estimate_plan(Plan& plan, const ModelSpec& spec);

}  // namespace ferry
