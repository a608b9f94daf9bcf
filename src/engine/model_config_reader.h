// Fills ModelConfig from what a checkpoint declares: config.json (+ generation_config.json) for
// Hugging Face directories, metadata keys for GGUF. The family decides which fields are read.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "models/model_config.h"

namespace ferry {

class GgufFile;

// `generation_config` may be null (absent file). `source` names the file in errors.
ModelConfig model_config_from_hf(const nlohmann::json& config, const nlohmann::json* generation_config,
                                 const std::string& source);

// The shape of a tensor the file holds, or nullopt.
using TensorShapeLookup = std::function<std::optional<Shape>(const std::string& name)>;

// `tensor_shape` tells which optional tensors the file holds (fused qkv, biases, tied output) and
// the embedding's row count (the vocabulary).
ModelConfig model_config_from_gguf(const GgufFile& gguf, const TensorShapeLookup& tensor_shape,
                                   const std::string& source);

}  // namespace ferry
