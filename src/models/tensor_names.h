// Tensor names are data: for each checkpoint layout, the name of every logical tensor, its layer
// class and whether it may be absent. The decoder builder asks this table; nothing else in ferry
// spells a checkpoint name.
#pragma once

#include <optional>
#include <string>

#include "models/model_config.h"

namespace ferry {

enum class LogicalTensor : uint8_t {
  TokenEmbedding,
  OutputNorm,
  Output,  // lm_head; absent when embeddings are tied
  AttnNorm,
  AttnQ,
  AttnK,
  AttnV,
  AttnQkv,  // fused
  AttnQBias,
  AttnKBias,
  AttnVBias,
  AttnQkvBias,
  AttnOut,
  AttnOutBias,
  AttnPostNorm,  // GLM-4-0414 post_self_attn_layernorm
  FfnNorm,
  FfnGate,
  FfnUp,
  FfnGateUp,  // fused, gate rows first
  FfnDown,
  FfnPostNorm,  // GLM-4-0414 post_mlp_layernorm
  AttnQNorm,    // Qwen3 q_norm: RMSNorm weight [head_dim] shared by every query head
  AttnKNorm,    // Qwen3 k_norm
  RopeFreqs,    // GGUF rope_freqs: per-pair RoPE frequency divisors, read into ModelConfig (not a weight)
  Count,
};

enum class LayerClass : uint8_t { Input, Repeating, Output };

const char* logical_tensor_name(LogicalTensor t);
LayerClass layer_class(LogicalTensor t);

// The checkpoint name of `t` (layer index used for Repeating tensors), or nullopt if this layout
// has no such tensor.
std::optional<std::string> tensor_name(TensorLayout layout, LogicalTensor t, int layer = 0);
// The same under the config's layout and tensor prefix ("llm." for MiniCPM-V's Qwen2).
std::optional<std::string> tensor_name(const ModelConfig& config, LogicalTensor t, int layer = 0);

}  // namespace ferry
