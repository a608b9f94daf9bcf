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
  Qwen3,    // Qwen3ForCausalLM, GGUF qwen3: per-head q/k RMSNorm, no q/k/v bias, head_dim of its own
};
const char* family_name(Family family);

// How RoPE's frequencies are stretched for a longer context than the model was pre-trained on.
enum class RopeScalingType : uint8_t {
  None,
  Linear,  // every frequency / factor (ModelConfig::rope_freq_scale)
  Llama3,  // Llama 3.1-3.3: low frequencies / factor, high ones kept, a smooth blend between
  Yarn,    // YaRN (Qwen2.5 long context): a per-pair blend of f and f / factor, cos/sin scaled
};
const char* rope_scaling_name(RopeScalingType type);

// The parameters of a RoPE scaling, as transformers' rope_scaling / GGUF rope.scaling.* give them.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::None;
  double factor = 1.0;
  int original_context = 0;  // Llama3 / Yarn: the context the model was pre-trained with
  // Llama3: wavelengths over original_context / low_freq_factor are divided by factor, those under
  // original_context / high_freq_factor kept.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // Yarn: the correction range, in rotations over original_context (beta_fast: where the blend
  // starts, beta_slow: where it ends); truncate rounds its bounds outward to whole pairs.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 1.0;  // Yarn: multiplies cos and sin (the readers resolve its default)
};

// Llama 3's per-pair frequency divisors (transformers' _compute_llama3_parameters), n_rot / 2 of
// them: factor where the pair's wavelength 2 pi / theta^(-2i/n_rot) exceeds original_context /
// low_freq_factor, 1 where it is under original_context / high_freq_factor, and in between the
// divisor of the blend (1 - s) f / factor + s f, s = (original_context / wavelength -
// low_freq_factor) / (high_freq_factor - low_freq_factor).
std::vector<double> llama3_rope_divisors(int n_rot, double theta, const RopeScaling& s);
// YaRN's per-pair frequency divisors (transformers' _compute_yarn_parameters), n_rot / 2 of them:
// pair i gets f / factor * r_i + f * (1 - r_i), r_i = clamp((i - low) / (high - low), 0, 1), the
// correction range [low, high] where beta_fast and beta_slow rotations fit in original_context.
std::vector<double> yarn_rope_divisors(int n_rot, double theta, const RopeScaling& s);
// YaRN's default attention factor: 0.1 * mscale * ln(factor) + 1 (1 for factor <= 1).
double yarn_mscale(double factor, double mscale = 1.0);

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
  RopeScaling rope_scaling;      // Llama3 and Yarn (Linear only names rope_freq_scale's origin)
  // Per-pair frequency divisors the checkpoint stores (GGUF rope_freqs.weight: how llama.cpp's
  // converter writes Llama 3's scaling), n_rot / 2 of them; empty: none.
  std::vector<float> rope_freq_factors;

  float norm_eps = 1e-5f;

  // Structure flags (the differences between families are data, not code paths).
  bool qkv_bias = false;         // biases on q/k/v (or on the fused qkv)
  bool out_bias = false;         // bias on the attention output projection (Llama attention_bias)
  bool fused_qkv = false;        // one [ (nh + 2 nkv) * hd, H ] matrix
  bool fused_gate_up = false;    // one [2F, H] matrix, gate rows first
  bool post_norms = false;       // GLM-4-0414: norms on the attention and MLP outputs before the adds
  bool tied_embeddings = false;  // the head reads the token embedding matrix
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k (one [head_dim] weight each) before RoPE

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

// The RoPE op's parameters for `config`: dims, pair layout, base, linear scaling, and the other
// scalings (Llama3, Yarn, the stored rope_freqs) folded into per-pair divisors and the attention factor.
RopeParams rope_params(const ModelConfig& config);

}  // namespace ferry
