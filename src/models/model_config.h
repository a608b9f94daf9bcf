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

// A vision-language model's image side. The tower is one transformer for every family, its
// differences flags (as the decoder's are); the projector that maps its output into the text's
// width and the way a prompt makes room for images are per family.
enum class VisionFamily : uint8_t {
  None,
  Glm4v,     // EVA2-CLIP tower; 2x2 conv + GLU projector; <|begin_of_image|> x <|end_of_image|> spans
  MiniCpmv,  // SigLIP NaViT tower; perceiver resampler; <image>/<slice> spans of query_num <unk> rows
};
const char* vision_family_name(VisionFamily family);

// Which tensor names the tower uses.
enum class VisionLayout : uint8_t {
  Eva2Clip,  // transformer.vision.transformer.layers.N.attention.query_key_value ... (THUDM visual.py)
  Siglip,    // vpm.encoder.layers.N.self_attn.q_proj ... (SigLIP / MiniCPM-V's vpm)
};

struct VisionConfig {
  VisionFamily family = VisionFamily::None;
  VisionLayout layout = VisionLayout::Eva2Clip;
  int n_layer = 0;
  int hidden = 0;
  int n_head = 0;
  int ffn = 0;
  int patch = 0;       // patch side in pixels
  int image_size = 0;  // GLM-4V: the input side (square); MiniCPM-V: side of the position table in pixels
  int in_channels = 3;
  int n_positions = 0;  // rows of the learned position table
  float norm_eps = 1e-6f;

  // Tower structure (EVA2-CLIP / SigLIP).
  bool class_token = true;          // a learned class token before each image's patches
  bool bucketed_positions = false;  // NaViT: positions bucketised over an N x N table (else 0..n)
  bool norm_after_sublayer = true;  // EVA2-CLIP: x + norm(f(x)); SigLIP: x + f(norm(x))
  bool gelu_tanh = false;           // GELU's tanh approximation (SigLIP gelu_pytorch_tanh) instead of erf
  bool fused_qkv = true;
  bool final_norm = false;  // SigLIP post_layernorm

  // GLM-4V's projector and prompt.
  float scaling_factor = 8.0f;
  int32_t boi_id = -1;  // begin / end-of-image token ids (MiniCPM-V: <image> / </image>)
  int32_t eoi_id = -1;

  // MiniCPM-V's resampler, slicing and prompt.
  int query_num = 0;  // resampler queries: embeddings per vision input
  int scale_resolution = 0;
  int max_slices = 0;           // cells an image may be cut into (besides the whole image); 0: never sliced
  int32_t slice_start_id = -1;  // <slice> / </slice>
  int32_t slice_end_id = -1;
  int32_t unk_id = -1;  // the placeholder rows' id

  int max_images = 1;  // images one prompt may carry

  bool present() const { return n_layer > 0; }
  // GLM-4V: the patches of the fixed input; MiniCPM-V: rows of the position table.
  int64_t patches() const { return image_size / patch * (image_size / patch); }
  int64_t table_side() const { return image_size / patch; }
  // Vision inputs (tower runs) an image may need: the whole image plus its cells.
  int64_t max_inputs_per_image() const { return 1 + max_slices; }
  // The most patches one vision input may have.
  int64_t max_patches_per_input() const;
  // Embeddings an image adds to the text at most (GLM-4V: the 2x2-downsampled grid plus boi and eoi;
  // MiniCPM-V: query_num per vision input).
  int64_t text_tokens() const;
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

  // Prefix of every text-model tensor name ("llm." in MiniCPM-V, whose Qwen2 sits under llm.).
  std::string tensor_prefix;

  VisionConfig vision;  // vision-language models only

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
