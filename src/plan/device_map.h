// Device maps in accelerate's format: {"model.embed_tokens": 0, "model.layers.0": "cuda:1", ...},
// module-name prefixes (Hugging Face names of the checkpoint's layout, or ferry's unit names) to
// devices. Read to pin units (partial maps allowed), written to hand a plan to transformers'
// from_pretrained(device_map=...).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace ferry {

// The Hugging Face module paths of one unit in `config`'s layout, e.g. layers.3 ->
// ["model.layers.3"], head -> ["model.norm", "lm_head"] (ChatGLM: transformer.encoder.layers.3,
// transformer.encoder.final_layernorm + transformer.output_layer; GGUF: blk.3, output_norm + output).
// Buffers without parameters that accelerate also places (rotary embeddings) go with the embedding.
std::vector<std::string> unit_paths(const ModelConfig& config, const std::string& unit);

// Pins from a device map: entry i is the device index (into `devices`) of spec.modules[i], or
// nullopt when the map does not place it. Errors (ErrorKind::Usage), each naming the key and the
// fix: a key naming nothing in the model (with the nearest real name), a device that is not in
// `devices` (listing them), "disk"/"meta" offload, a unit cut in two (keys below one unit pointing
// at different devices), tied embedding and head on different devices. `source` names the file.
std::vector<std::optional<int>> pins_from_device_map(const nlohmann::json& map, const ModelSpec& spec,
                                                     const std::vector<DeviceSpec>& devices, const std::string& source);

// Requires every unit pinned (a complete map): otherwise Error(Usage) listing the missing units
// grouped by prefix, with the assignment `suggestion` (a plan of the rest) would give them.
void require_complete(const std::vector<std::optional<int>>& pins, const ModelSpec& spec, const Plan& suggestion);

// accelerate's device_map for `plan`: every unit's paths -> GPU ordinal (cuda:N, vulkan:N and its
// partitions vulkan:N.K) or "cpu".
nlohmann::ordered_json export_device_map(const Plan& plan, const ModelSpec& spec);

}  // namespace ferry
