#include "models/presets.h"

#include <array>
#include <utility>

namespace ferry {

namespace {

// The fields of each model's published config.json that describe its shape (values copied from
// the public model cards: THUDM/glm-4-9b-chat, THUDM/glm-4v-9b, THUDM/chatglm3-6b,
// meta-llama/Meta-Llama-3-8B, meta-llama/Llama-3.1-8B, Qwen/Qwen2-7B, Qwen/Qwen3-8B,
// openbmb/MiniCPM-V-2_6).
constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kPresets{{
    {"glm-4-9b-chat", R"({
  "architectures": ["ChatGLMModel"], "model_type": "chatglm",
  "add_bias_linear": false, "add_qkv_bias": true, "apply_residual_connection_post_layernorm": false,
  "ffn_hidden_size": 13696, "hidden_size": 4096, "kv_channels": 128, "layernorm_epsilon": 1.5625e-07,
  "multi_query_attention": true, "multi_query_group_num": 2, "num_attention_heads": 32,
  "num_hidden_layers": 40, "num_layers": 40, "rope_ratio": 500, "original_rope": true,
  "padded_vocab_size": 151552, "post_layer_norm": true, "rmsnorm": true, "seq_length": 131072,
  "torch_dtype": "bfloat16", "tie_word_embeddings": false,
  "eos_token_id": [151329, 151336, 151338], "pad_token_id": 151329
})"},
    {"glm-4v-9b", R"({
  "architectures": ["ChatGLMModel"], "model_type": "chatglm",
  "add_bias_linear": false, "add_qkv_bias": true, "apply_residual_connection_post_layernorm": false,
  "boi_token_id": 151339, "eoi_token_id": 151340, "eos_token_id": [151329, 151336, 151338],
  "ffn_hidden_size": 13696, "hidden_size": 4096, "kv_channels": 128, "layernorm_epsilon": 1.5625e-07,
  "multi_query_attention": true, "multi_query_group_num": 2, "num_attention_heads": 32,
  "num_hidden_layers": 40, "num_layers": 40, "original_rope": true, "pad_token_id": 151329,
  "padded_vocab_size": 151552, "post_layer_norm": true, "pre_seq_len": null, "prefix_projection": false,
  "rmsnorm": true, "rope_ratio": 1, "seq_length": 8192, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vision_config": {"dropout_prob": 0.0, "hidden_act": "gelu", "in_channels": 3, "num_hidden_layers": 63,
    "hidden_size": 1792, "patch_size": 14, "num_heads": 16, "intermediate_size": 15360,
    "layer_norm_eps": 1e-06, "num_positions": 6401, "image_size": 1120, "scaling_factor": 8}
})"},
    {"chatglm3-6b", R"({
  "architectures": ["ChatGLMModel"], "model_type": "chatglm",
  "add_bias_linear": false, "add_qkv_bias": true, "apply_residual_connection_post_layernorm": false,
  "ffn_hidden_size": 13696, "hidden_size": 4096, "kv_channels": 128, "layernorm_epsilon": 1e-05,
  "multi_query_attention": true, "multi_query_group_num": 2, "num_attention_heads": 32, "num_layers": 28,
  "original_rope": true, "padded_vocab_size": 65024, "post_layer_norm": true, "rmsnorm": true,
  "seq_length": 8192, "torch_dtype": "float16", "tie_word_embeddings": false, "eos_token_id": 2, "pad_token_id": 0
})"},
    {"llama-3-8b", R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256
})"},
    {"llama-3.1-8b", R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false, "mlp_bias": false,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256
})"},
    {"qwen3-8b", R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": false, "bos_token_id": 151643,
  "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
  "max_position_embeddings": 40960, "max_window_layers": 36, "num_attention_heads": 32, "num_hidden_layers": 36,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
  "vocab_size": 151936
})"},
    {"qwen2-7b", R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 151643, "eos_token_id": 151643,
  "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 131072,
  "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 152064
})"},
    {"minicpm-v-2_6", R"({
  "architectures": ["MiniCPMV"], "model_type": "minicpmv", "version": 2.6, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944,
  "max_position_embeddings": 32768, "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151666,
  "query_num": 64, "image_size": 448, "patch_size": 14, "drop_vision_last_layer": false, "slice_mode": true,
  "batch_vision_input": true, "use_image_id": true,
  "slice_config": {"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448, "model_type": "minicpmv"},
  "vision_config": {"hidden_size": 1152, "image_size": 980, "intermediate_size": 4304, "model_type": "siglip",
    "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14}
})"},
}};

}  // namespace

std::optional<std::string> preset_config(std::string_view name) {
  for (const auto& [preset, text] : kPresets) {
    if (preset == name) return std::string(text);
  }
  return std::nullopt;
}

std::string preset_names() {
  std::string s;
  for (const auto& [preset, text] : kPresets) s += (s.empty() ? "" : ", ") + std::string(preset);
  return s;
}

}  // namespace ferry
