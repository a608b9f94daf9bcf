// The hyper-parameters of a decoder, in one struct for every supported family. Readers of
// config.json (HF) and GGUF metadata fill it (src/engine/); the decoder builder reads only this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/op.h"

namespace ferry {

enum class Family : uint8_t {
  Llama,    // LlamaForCausalLM, GGUF llama
  Qwen2,    // Qwen2ForCausalLM, GGUF qwen2 (q/k/v bias)
  Glm,      // GlmForCausalLM (glm-4-9b-chat-hf): partial adjacent RoPE, q/k/v bias, fused gate_up
  Glm4,     // Glm4ForCausalLM (GLM-4-0414): as Glm plus post-attention and post-MLP norms
  ChatGlm,  // THUDM ChatGLMModel (ChatGLM3, glm-4-9b-chat, GLM-4V's LM): fused query_key_value
};
const char* family_name(Family family);

// Which tensor names the checkpoint uses (see models/tensor_names.h).
enum class TensorLayout : uint8_t {
  HfDecoder,  // model.layers.N.self_attn.q_proj.weight ... (Llama, Qwen2, Glm, Glm4)
  HfChatGlm,  // transformer.encoder.layers.N.self_attention.query_key_value.weight ...
  Gguf,       // blk.N.attn_q.weight ... (llama.cpp names)
};

// GLM-4V's EVA2-CLIP vision tower (config.json "vision_config"); absent when n_layer is 0.
struct VisionConfig {
  int n_layer = 0;
  int hidden = 0;
  int n_head = 0;
  int ffn = 0;
  int patch = 0;       // patch side in pixels
  int image_size = 0;  // input side in pixels (square)
  int in_channels = 3;
  int n_positions = 0;  // learned positions: patches + the class token
  float norm_eps = 1e-6f;
  float scaling_factor = 8.0f;
  int32_t boi_id = -1;  // begin / end-of-image token ids in the text
  int32_t eoi_id = -1;
  int max_images = 1;  // images one prompt may carry (GLM-4V: one)

  bool present() const { return n_layer > 0; }
  int64_t patches() const { return image_size / patch * (image_size / patch); }
  // Embeddings an image adds to the text: the 2x2-downsampled patch grid plus boi and eoi.
  int64_t text_tokens() const { return image_size / patch / 2 * (image_size / patch / 2) + 2; }
};

struct ModelConfig {
  std::string architecture;  // as the checkpoint names it: "LlamaForCausalLM", GGUF "llama", ...
  Family family = Family::Llama;
  TensorLayout layout = TensorLayout::HfDecoder;

  int n_layer = 0;
  int hidden = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int ffn = 0;
  int vocab = 0;
  int max_context = 0;  // the model's trained context (max_position_embeddings / seq_length)

  // RoPE
  int n_rot = 0;  // rotated dims at the start of each head
  RopeStyle rope_style = RopeStyle::HalfSplit;
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear scaling: 1 / factor

  float norm_eps = 1e-5f;

  // Structure flags (the differences between families are data, not code paths).
  bool qkv_bias = false;         // biases on q/k/v (or on the fused qkv)
  bool out_bias = false;         // bias on the attention output projection (Llama attention_bias)
  bool fused_qkv = false;        // one [ (nh + 2 nkv) * hd, H ] matrix
  bool fused_gate_up = false;    // one [2F, H] matrix, gate rows first
  bool post_norms = false;       // GLM-4-0414: norms on the attention and MLP outputs before the adds
  bool tied_embeddings = false;  // the head reads the token embedding matrix

  VisionConfig vision;  // GLM-4V only

  // Generation
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;  // every end-of-generation id the checkpoint declares

  // Throws Error(Config) naming `source` when the numbers are inconsistent (heads not dividing,
  // n_rot odd or > head_dim, non-positive sizes, non-finite RoPE or norm constants).
  void validate(const std::string& source) const;
  // Bytes of KV cache one layer keeps per token (f32 keys and values).
  int64_t kv_bytes_per_token() const { return 2ll * kv_width() * 4; }
  int q_width() const { return n_head * head_dim; }
  int kv_width() const { return n_kv_head * head_dim; }
};

}  // namespace ferry
