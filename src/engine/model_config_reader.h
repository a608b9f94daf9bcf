// Fills ModelConfig from what a checkpoint declares: config.json (+ generation_config.json) for
// Hugging Face directories, metadata keys for GGUF. The family decides which fields are read.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "models/model_config.h"

namespace ferry {

class GgufFile;

// `generation_config` may be null (absent file). `source` names the file in errors.
ModelConfig model_config_from_hf(const nlohmann::json& config, const nlohmann::json* generation_config,
                                 const std::string& source);

// `has_tensor` tells which optional tensors the file holds (fused qkv, biases, tied output).
ModelConfig model_config_from_gguf(const GgufFile& gguf, const std::function<bool(const std::string&)>& has_tensor,
                                   const std::string& source);

}  // namespace ferry
