#include "engine/model_config_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/json_file.h"
#include "models/tensor_names.h"

namespace ferry {

namespace {

int to_int(int64_t v, std::string_view what, const std::string& source) {
  if (v <= 0 || v > (1 << 30)) fail(ErrorKind::Config, "{}: {} = {} is out of range", source, what, v);
  return static_cast<int>(v);
}

void add_eos(std::vector<int32_t>& ids, int64_t id) {
  if (id >= 0 && id <= INT32_MAX && std::find(ids.begin(), ids.end(), static_cast<int32_t>(id)) == ids.end()) {
    ids.push_back(static_cast<int32_t>(id));
  }
}

// config.json's rope_scaling (transformers 5 writes rope_parameters, with rope_theta inside), its
// type under "rope_type" or the legacy "type": none/default, linear, llama3 and yarn, with the
// defaults transformers gives them. Any other type is refused by name, never ignored. Needs
// n_rot, rope_theta and max_context already read.
void read_hf_rope_scaling(ModelConfig& c, const nlohmann::json& config, const std::string& source) {
  const nlohmann::json* rs = nullptr;
  std::string key = "rope_scaling";
  if (auto it = config.find("rope_scaling"); it != config.end() && !it->is_null()) {
    rs = &*it;
  } else if (auto jt = config.find("rope_parameters"); jt != config.end() && !jt->is_null()) {
    rs = &*jt;
    key = "rope_parameters";
  }
  if (rs == nullptr) return;
  if (!rs->is_object()) fail(ErrorKind::Config, "{}: {} must be an object or null", source, key);
  const std::string s = source + " (" + key + ")";
  if (const auto theta = json_opt_float(*rs, "rope_theta", s)) c.rope_theta = static_cast<float>(*theta);
  std::string type = json_opt_string(*rs, "rope_type", s).value_or("");
  if (type.empty()) type = json_opt_string(*rs, "type", s).value_or("");
  RopeScaling& r = c.rope_scaling;
  if (type == "default" || type == "none" || (type.empty() && key == "rope_parameters")) return;
  if (type == "linear") {
    r.type = RopeScalingType::Linear;
    r.factor = json_float(*rs, "factor", s, "linear RoPE scaling");
    if (!(r.factor > 0) || !std::isfinite(r.factor)) {
      fail(ErrorKind::Config, "{}: the linear RoPE scaling factor must be positive, got {}", s, r.factor);
    }
    c.rope_freq_scale = static_cast<float>(1.0 / r.factor);
  } else if (type == "llama3") {
    // transformers' _compute_llama3_parameters reads all four; none has a default.
    r.type = RopeScalingType::Llama3;
    r.factor = json_float(*rs, "factor", s, "llama3 RoPE scaling");
    r.low_freq_factor = json_float(*rs, "low_freq_factor", s, "llama3 RoPE scaling");
    r.high_freq_factor = json_float(*rs, "high_freq_factor", s, "llama3 RoPE scaling");
    r.original_context = to_int(json_int(*rs, "original_max_position_embeddings", s, "llama3 RoPE scaling"),
                                "original_max_position_embeddings", s);
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters: original_max_position_embeddings falls back on
    // max_position_embeddings, beta_fast/beta_slow (0 or absent) on 32/1; the attention factor is
    // given, or the ratio of mscale and mscale_all_dim's, or 0.1 ln(factor) + 1.
    r.type = RopeScalingType::Yarn;
    r.factor = json_float(*rs, "factor", s, "yarn RoPE scaling");
    const int64_t orig = json_opt_int(*rs, "original_max_position_embeddings", s).value_or(0);
    r.original_context = orig != 0 ? to_int(orig, "original_max_position_embeddings", s) : c.max_context;
    const double beta_fast = json_opt_float(*rs, "beta_fast", s).value_or(0.0);
    const double beta_slow = json_opt_float(*rs, "beta_slow", s).value_or(0.0);
    r.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
    r.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
    r.truncate = json_opt_bool(*rs, "truncate", s).value_or(true);
    const double mscale = json_opt_float(*rs, "mscale", s).value_or(0.0);
    const double mscale_all_dim = json_opt_float(*rs, "mscale_all_dim", s).value_or(0.0);
    if (const auto given = json_opt_float(*rs, "attention_factor", s)) {
      r.attention_factor = *given;
    } else if (mscale != 0.0 && mscale_all_dim != 0.0) {
      r.attention_factor = yarn_mscale(r.factor, mscale) / yarn_mscale(r.factor, mscale_all_dim);
    } else {
      r.attention_factor = yarn_mscale(r.factor);
    }
    // The context YaRN stretches the model to (Qwen2.5's configs keep max_position_embeddings at the
    // original 32768 and add rope_scaling for 128K).
    if (std::isfinite(r.factor) && r.factor > 1.0 && r.original_context > 0) {
      const double stretched = std::floor(r.factor * r.original_context);
      if (stretched > c.max_context && stretched <= (1 << 30)) c.max_context = static_cast<int>(stretched);
    }
  } else if (type.empty()) {
    fail(ErrorKind::Config, "{}: {} names no type (rope_type or type); ferry supports linear, llama3 and yarn", source,
         key);
  } else {
    fail(ErrorKind::Unsupported,
         "{}: RoPE scaling type '{}' is not supported; ferry supports linear, llama3 and yarn (or none: {} null)",
         source, type, key);
  }
}

// Sliding-window attention, which ferry does not have: a config whose window could bite within
// the model's context is refused, naming the field and what to do, never run with full attention.
void refuse_sliding_window(const ModelConfig& c, const nlohmann::json& j, const std::string& s, bool mistral) {
  if (json_opt_bool(j, "use_sliding_window", s).value_or(false)) {
    fail(ErrorKind::Unsupported,
         "{}: use_sliding_window: true (sliding-window attention) is not supported: ferry has no sliding-window "
         "attention and would compute other logits; use a config with use_sliding_window false (as the released "
         "Qwen2, Qwen2.5 and Qwen3 configs are)",
         s);
  }
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_string() && t.get<std::string>() != "full_attention") {
        fail(ErrorKind::Unsupported,
             "{}: layer_types has '{}' layers; ferry runs full attention only (every layer 'full_attention')", s,
             t.get<std::string>());
      }
    }
  }
  if (!mistral) return;
  // MistralConfig's sliding_window defaults to 4096 when the field is absent; null means none.
  const auto field = j.find("sliding_window");
  if (field != j.end() && field->is_null()) return;
  const int64_t window = field == j.end() ? 4096 : json_int(j, "sliding_window", s);
  if (window >= c.max_context) return;  // the window never bites within the model's context
  fail(ErrorKind::Unsupported,
       "{}: sliding_window {} is smaller than max_position_embeddings {}: each token attends only to the last {} "
       "tokens, and ferry has no sliding-window attention (it would attend to all of them and compute other "
       "logits past {} tokens). To run it within the window, set max_position_embeddings to {} or less in "
       "config.json (ferry then refuses longer contexts, and within them the window changes nothing); or use a "
       "checkpoint without a window (sliding_window: null, as Mistral-7B v0.2 and later)",
       s, window, c.max_context, window, window, window);
}

// The file beside config.json that generation ids come from, for errors that name it.
std::string generation_source(const std::string& config_source) {
  const std::filesystem::path p(config_source);
  if (p.filename() == "config.json") return (p.parent_path() / "generation_config.json").string();
  return config_source + " (generation_config.json)";
}

// An id must name a row of the embedding: a bos or eos id past it would be looked up (or never
// match) at run time. GGUF metadata is held to the same rule.
int64_t checked_token_id(int64_t id, const ModelConfig& c, const char* field, const std::string& source) {
  if (id >= 0 && c.vocab > 0 && id >= c.vocab) {
    fail(ErrorKind::Config, "{}: {} {} is outside the vocabulary of {} tokens (ids 0..{}); fix {} there", source, field,
         id, c.vocab, c.vocab - 1, field);
  }
  return id;
}

void read_generation_ids(ModelConfig& c, const nlohmann::json& config, const nlohmann::json* generation,
                         const std::string& source) {
  // generation_config.json is what generate() honours; config.json is the fallback.
  if (generation != nullptr) {
    const std::string gs = generation_source(source);
    for (int64_t id : json_opt_int_list(*generation, "eos_token_id", gs)) {
      add_eos(c.eos_ids, checked_token_id(id, c, "eos_token_id", gs));
    }
    if (auto bos = json_opt_int(*generation, "bos_token_id", gs); bos && *bos >= 0 && *bos <= INT32_MAX) {
      c.bos_id = static_cast<int32_t>(checked_token_id(*bos, c, "bos_token_id", gs));
    }
  }
  for (int64_t id : json_opt_int_list(config, "eos_token_id", source)) {
    add_eos(c.eos_ids, checked_token_id(id, c, "eos_token_id", source));
  }
  if (c.bos_id < 0) {
    if (auto bos = json_opt_int(config, "bos_token_id", source); bos && *bos >= 0 && *bos <= INT32_MAX) {
      c.bos_id = static_cast<int32_t>(checked_token_id(*bos, c, "bos_token_id", source));
    }
  }
}

// GLM-4V's EVA2-CLIP tower; its hyper-parameters sit in config.json's "vision_config".
VisionConfig glm4v_vision_from_hf(const nlohmann::json& j, const nlohmann::json& v, const std::string& s) {
  if (!v.is_object()) fail(ErrorKind::Config, "{}: vision_config must be an object", s);
  const std::string vs = s + " (vision_config)";
  VisionConfig c;
  c.family = VisionFamily::Glm4v;
  c.layout = VisionLayout::Eva2Clip;
  c.class_token = true;
  c.norm_after_sublayer = true;
  c.fused_qkv = true;
  c.n_layer = to_int(json_int(v, "num_hidden_layers", vs, "the vision tower's depth"), "num_hidden_layers", vs);
  c.hidden = to_int(json_int(v, "hidden_size", vs, "the vision tower's width"), "hidden_size", vs);
  c.n_head = to_int(json_int(v, "num_heads", vs, "the vision tower's attention"), "num_heads", vs);
  c.ffn = to_int(json_int(v, "intermediate_size", vs, "the vision MLP width"), "intermediate_size", vs);
  c.patch = to_int(json_int(v, "patch_size", vs, "the patch size"), "patch_size", vs);
  c.image_size = to_int(json_int(v, "image_size", vs, "the input image size"), "image_size", vs);
  c.in_channels = to_int(json_opt_int(v, "in_channels", vs).value_or(3), "in_channels", vs);
  c.n_positions = to_int(json_int(v, "num_positions", vs, "the learned positions"), "num_positions", vs);
  c.norm_eps = static_cast<float>(json_opt_float(v, "layer_norm_eps", vs).value_or(1e-6));
  c.scaling_factor = static_cast<float>(json_opt_float(v, "scaling_factor", vs).value_or(8.0));
  c.boi_id = to_int(json_int(j, "boi_token_id", s, "GLM-4V's begin-of-image token"), "boi_token_id", s);
  c.eoi_id = to_int(json_int(j, "eoi_token_id", s, "GLM-4V's end-of-image token"), "eoi_token_id", s);
  if (const std::string act = json_opt_string(v, "hidden_act", vs).value_or("gelu"); act != "gelu") {
    fail(ErrorKind::Unsupported, "{}: vision hidden_act '{}' is not supported (GLM-4V uses gelu)", vs, act);
  }
  return c;
}

// MiniCPM-V 2.6's SigLIP NaViT tower ("vision_config"), its resampler and slicing (config.json's
// query_num and slice_config). The token ids of <image>, <slice> ... come from the tokenizer
// (resolve_image_tokens in engine/checkpoint.cpp).
VisionConfig minicpmv_vision_from_hf(const nlohmann::json& j, const std::string& s) {
  const auto it = j.find("vision_config");
  if (it == j.end() || !it->is_object()) fail(ErrorKind::Config, "{}: MiniCPM-V needs a vision_config object", s);
  const nlohmann::json& v = *it;
  const std::string vs = s + " (vision_config)";
  if (const std::string type = json_opt_string(v, "model_type", vs).value_or("siglip"); type != "siglip") {
    fail(ErrorKind::Unsupported, "{}: vision model_type '{}' is not supported (MiniCPM-V 2.6 uses siglip)", vs, type);
  }
  VisionConfig c;
  c.family = VisionFamily::MiniCpmv;
  c.layout = VisionLayout::Siglip;
  c.class_token = false;
  c.bucketed_positions = true;
  c.norm_after_sublayer = false;
  c.fused_qkv = false;
  c.final_norm = true;
  c.n_layer = to_int(json_int(v, "num_hidden_layers", vs, "the vision tower's depth"), "num_hidden_layers", vs);
  c.hidden = to_int(json_int(v, "hidden_size", vs, "the vision tower's width"), "hidden_size", vs);
  c.n_head = to_int(json_int(v, "num_attention_heads", vs, "the vision tower's attention"), "num_attention_heads", vs);
  c.ffn = to_int(json_int(v, "intermediate_size", vs, "the vision MLP width"), "intermediate_size", vs);
  c.patch = to_int(json_int(v, "patch_size", vs, "the patch size"), "patch_size", vs);
  c.image_size = to_int(json_int(v, "image_size", vs, "the position table's side in pixels"), "image_size", vs);
  c.in_channels = to_int(json_opt_int(v, "num_channels", vs).value_or(3), "num_channels", vs);
  c.n_positions = static_cast<int>(c.patches());
  c.norm_eps = static_cast<float>(json_opt_float(v, "layer_norm_eps", vs).value_or(1e-6));
  // SigLIP's default activation is the tanh approximation; 2.6's vision_config does not name one.
  const std::string act = json_opt_string(v, "hidden_act", vs).value_or("gelu_pytorch_tanh");
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") {
    c.gelu_tanh = true;
  } else if (act != "gelu") {
    fail(ErrorKind::Unsupported, "{}: vision hidden_act '{}' is not supported (gelu_pytorch_tanh or gelu)", vs, act);
  }
  c.query_num = to_int(json_int(j, "query_num", s, "the resampler's queries"), "query_num", s);
  if (json_opt_bool(j, "drop_vision_last_layer", s).value_or(false)) {
    fail(ErrorKind::Unsupported, "{}: drop_vision_last_layer: true (MiniCPM-Llama3-V 2.5) is not supported", s);
  }
  const bool slicing = json_opt_bool(j, "slice_mode", s).value_or(true);
  const std::string ss = s + " (slice_config)";
  const auto sc = j.find("slice_config");
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& slice = sc != j.end() && sc->is_object() ? *sc : empty;
  c.scale_resolution = to_int(json_opt_int(slice, "scale_resolution", ss).value_or(448), "scale_resolution", ss);
  const int64_t slices = json_opt_int(slice, "max_slice_nums", ss).value_or(9);
  if (slices < 0 || slices > 64) fail(ErrorKind::Config, "{}: max_slice_nums {} is outside 0..64", ss, slices);
  c.max_slices = slicing ? static_cast<int>(slices) : 0;
  if (const int64_t p = json_opt_int(slice, "patch_size", ss).value_or(c.patch); p != c.patch) {
    fail(ErrorKind::Config, "{}: patch_size {} differs from the vision tower's {}", ss, p, c.patch);
  }
  return c;
}

ModelConfig chatglm_from_hf(const nlohmann::json& j, const std::string& s) {
  ModelConfig c;
  c.family = Family::ChatGlm;
  c.layout = TensorLayout::HfChatGlm;
  c.n_layer = to_int(json_int(j, "num_layers", s, "the number of layers"), "num_layers", s);
  c.hidden = to_int(json_int(j, "hidden_size", s, "the hidden width"), "hidden_size", s);
  c.ffn = to_int(json_int(j, "ffn_hidden_size", s, "the MLP width"), "ffn_hidden_size", s);
  c.n_head = to_int(json_int(j, "num_attention_heads", s, "attention"), "num_attention_heads", s);
  c.head_dim = to_int(json_opt_int(j, "kv_channels", s).value_or(c.hidden / c.n_head), "kv_channels", s);
  c.n_kv_head = json_opt_bool(j, "multi_query_attention", s).value_or(false)
                    ? to_int(json_int(j, "multi_query_group_num", s, "grouped attention"), "multi_query_group_num", s)
                    : c.n_head;
  const auto padded = json_opt_int(j, "padded_vocab_size", s);
  c.vocab = to_int(padded ? *padded : json_int(j, "vocab_size", s, "the vocabulary"), "padded_vocab_size", s);
  c.norm_eps = static_cast<float>(json_opt_float(j, "layernorm_epsilon", s).value_or(1e-5));
  c.max_context = to_int(json_opt_int(j, "seq_length", s).value_or(8192), "seq_length", s);
  if (!json_opt_bool(j, "rmsnorm", s).value_or(true)) {
    fail(ErrorKind::Unsupported, "{}: ChatGLM with LayerNorm (rmsnorm: false, the first ChatGLM-6B) is not supported",
         s);
  }
  if (json_opt_bool(j, "apply_residual_connection_post_layernorm", s).value_or(false)) {
    fail(ErrorKind::Unsupported, "{}: apply_residual_connection_post_layernorm: true is not supported", s);
  }
  if (json_opt_bool(j, "add_bias_linear", s).value_or(false)) {
    fail(ErrorKind::Unsupported, "{}: add_bias_linear: true (biases on dense layers) is not supported", s);
  }
  if (!json_opt_bool(j, "post_layer_norm", s).value_or(true)) {
    fail(ErrorKind::Unsupported, "{}: post_layer_norm: false (no final norm) is not supported", s);
  }
  if (auto it = j.find("pre_seq_len"); it != j.end() && !it->is_null()) {
    fail(ErrorKind::Unsupported, "{}: pre_seq_len is set (P-tuning prefix); prefix-tuned ChatGLM is not supported", s);
  }
  c.qkv_bias = json_opt_bool(j, "add_qkv_bias", s).value_or(false);
  c.fused_qkv = true;
  c.fused_gate_up = true;
  // THUDM's RotaryEmbedding(kv_channels // 2): the first half of each head, adjacent pairs,
  // base 10000 * rope_ratio.
  c.n_rot = c.head_dim / 2;
  c.rope_style = RopeStyle::Adjacent;
  c.rope_theta = static_cast<float>(10000.0 * json_opt_float(j, "rope_ratio", s).value_or(1.0));
  c.tied_embeddings = false;
  if (auto it = j.find("vision_config"); it != j.end() && !it->is_null()) c.vision = glm4v_vision_from_hf(j, *it, s);
  return c;
}

ModelConfig decoder_from_hf(const nlohmann::json& j, const std::string& s, const std::string& model_type) {
  ModelConfig c;
  c.layout = TensorLayout::HfDecoder;
  const bool mistral = model_type == "mistral";  // the Llama maths under another model_type
  if (model_type == "llama" || mistral)
    c.family = Family::Llama;
  else if (model_type == "qwen2")
    c.family = Family::Qwen2;
  else if (model_type == "qwen3")
    c.family = Family::Qwen3;
  else if (model_type == "glm")
    c.family = Family::Glm;
  else
    c.family = Family::Glm4;
  c.n_layer = to_int(json_int(j, "num_hidden_layers", s, "the number of layers"), "num_hidden_layers", s);
  c.hidden = to_int(json_int(j, "hidden_size", s, "the hidden width"), "hidden_size", s);
  c.ffn = to_int(json_int(j, "intermediate_size", s, "the MLP width"), "intermediate_size", s);
  c.n_head = to_int(json_int(j, "num_attention_heads", s, "attention"), "num_attention_heads", s);
  // Defaults are those of each family's transformers config class (GlmConfig/Glm4Config,
  // MistralConfig and Qwen3Config differ).
  const bool glm = c.family == Family::Glm || c.family == Family::Glm4;
  const int default_kv = glm ? 2 : mistral ? 8 : c.n_head;
  c.n_kv_head = to_int(json_opt_int(j, "num_key_value_heads", s).value_or(default_kv), "num_key_value_heads", s);
  const int default_head_dim = glm || c.family == Family::Qwen3 ? 128 : c.hidden / c.n_head;
  c.head_dim = to_int(json_opt_int(j, "head_dim", s).value_or(default_head_dim), "head_dim", s);
  c.vocab = to_int(json_int(j, "vocab_size", s, "the vocabulary"), "vocab_size", s);
  c.norm_eps = static_cast<float>(json_opt_float(j, "rms_norm_eps", s).value_or(glm ? 1.5625e-7 : 1e-6));
  c.max_context = to_int(json_opt_int(j, "max_position_embeddings", s).value_or(4096), "max_position_embeddings", s);
  c.rope_theta = static_cast<float>(json_opt_float(j, "rope_theta", s).value_or(10000.0));
  c.tied_embeddings = json_opt_bool(j, "tie_word_embeddings", s).value_or(false);
  const std::string act = json_opt_string(j, "hidden_act", s).value_or("silu");
  if (act != "silu") fail(ErrorKind::Unsupported, "{}: hidden_act '{}' is not supported (ferry supports silu)", s, act);
  const double partial = json_opt_float(j, "partial_rotary_factor", s)
                             .value_or(c.family == Family::Glm || c.family == Family::Glm4 ? 0.5 : 1.0);
  c.n_rot = static_cast<int>(c.head_dim * partial);  // int() truncation, as transformers does
  read_hf_rope_scaling(c, j, s);
  switch (c.family) {
    case Family::Llama:
      c.rope_style = RopeStyle::HalfSplit;
      // MistralAttention has no biases; LlamaAttention gives o_proj the same bias flag as q/k/v.
      c.qkv_bias = !mistral && json_opt_bool(j, "attention_bias", s).value_or(false);
      c.out_bias = c.qkv_bias;
      if (json_opt_bool(j, "mlp_bias", s).value_or(false)) {
        fail(ErrorKind::Unsupported, "{}: mlp_bias: true is not supported", s);
      }
      refuse_sliding_window(c, j, s, mistral);
      break;
    case Family::Qwen2:
      c.rope_style = RopeStyle::HalfSplit;
      c.qkv_bias = true;  // Qwen2 always has q/k/v biases
      refuse_sliding_window(c, j, s, false);
      break;
    case Family::Qwen3:
      c.rope_style = RopeStyle::HalfSplit;
      c.qkv_bias = json_opt_bool(j, "attention_bias", s).value_or(false);
      c.out_bias = c.qkv_bias;  // Qwen3Attention's o_proj has the same bias flag
      c.qk_norm = true;
      refuse_sliding_window(c, j, s, false);
      break;
    case Family::Glm:
    case Family::Glm4:
      c.rope_style = RopeStyle::Adjacent;
      c.qkv_bias = json_opt_bool(j, "attention_bias", s).value_or(true);
      c.fused_gate_up = true;
      c.post_norms = c.family == Family::Glm4;
      break;
    case Family::ChatGlm:
      break;
  }
  return c;
}

// GGUF's RoPE scaling, as llama.cpp reads it: <arch>.rope.scaling.type (absent: linear when a
// factor is given), .factor (or the older rope.scale_linear; 0 means none), and for yarn
// .original_context_length (default: the context length), .yarn_beta_fast/.yarn_beta_slow (32/1)
// and .attn_factor (a multiplier on YaRN's 0.1 ln(factor) + 1). Llama 3's scaling comes as the
// rope_freqs.weight tensor (per-pair divisors) with no scaling keys. Needs n_rot and max_context.
void read_gguf_rope_scaling(ModelConfig& c, const GgufFile& g, const std::string& arch, const std::string& s) {
  const auto key = [&](const char* k) { return arch + "." + k; };
  const std::string type = g.opt_string(key("rope.scaling.type")).value_or("linear");
  const float factor =
      g.opt_f32(key("rope.scaling.factor")).value_or(g.opt_f32(key("rope.scale_linear")).value_or(0.0f));
  if (factor < 0.0f || !std::isfinite(factor)) {
    fail(ErrorKind::Config, "{}: {}.rope.scaling.factor must be a finite number >= 0, got {}", s, arch, factor);
  }
  RopeScaling& r = c.rope_scaling;
  if (type == "linear") {
    if (factor > 0.0f) {
      c.rope_freq_scale = 1.0f / factor;
      r.type = RopeScalingType::Linear;
      r.factor = factor;
    }
  } else if (type == "yarn") {
    if (!(factor > 0.0f)) fail(ErrorKind::Config, "{}: yarn RoPE scaling needs {}.rope.scaling.factor > 0", s, arch);
    if (const auto ext = g.opt_f32(key("rope.scaling.yarn_ext_factor")); ext && *ext >= 0.0f && *ext != 1.0f) {
      fail(ErrorKind::Unsupported, "{}: {}.rope.scaling.yarn_ext_factor {} is not supported (ferry runs YaRN with 1)",
           s, arch, *ext);
    }
    if (const auto mul = g.opt_f32(key("rope.scaling.yarn_log_multiplier")); mul && *mul != 0.0f) {
      fail(ErrorKind::Unsupported,
           "{}: {}.rope.scaling.yarn_log_multiplier {} (DeepSeek's mscale_all_dim) is not supported", s, arch, *mul);
    }
    r.type = RopeScalingType::Yarn;
    r.factor = factor;
    const auto orig = g.opt_int(key("rope.scaling.original_context_length"));
    r.original_context = orig && *orig > 0 ? to_int(*orig, "rope.scaling.original_context_length", s) : c.max_context;
    r.beta_fast = g.opt_f32(key("rope.scaling.yarn_beta_fast")).value_or(32.0f);
    r.beta_slow = g.opt_f32(key("rope.scaling.yarn_beta_slow")).value_or(1.0f);
    r.attention_factor = yarn_mscale(r.factor) * g.opt_f32(key("rope.scaling.attn_factor")).value_or(1.0f);
    const double stretched = std::floor(r.factor * r.original_context);
    if (stretched > c.max_context && stretched <= (1 << 30)) c.max_context = static_cast<int>(stretched);
  } else if (type != "none") {
    fail(ErrorKind::Unsupported,
         "{}: RoPE scaling type '{}' ({}.rope.scaling.type) is not supported; ferry supports "
         "linear, yarn and llama3 (as rope_freqs.weight)",
         s, type, arch);
  }
  const std::string freqs_name = *tensor_name(TensorLayout::Gguf, LogicalTensor::RopeFreqs, 0);
  if (const TensorRecord* t = g.tensors().find(freqs_name)) {
    const int64_t want = c.n_rot / 2;
    if (t->dtype != DType::F32 || t->shape.numel() != want) {
      fail(ErrorKind::Config,
           "{}: tensor '{}' is {} {}; llama.cpp's per-pair RoPE frequency factors are f32 [{}] (rotary dims / 2)", s,
           freqs_name, dtype_name(t->dtype), t->shape.str(), want);
    }
    c.rope_freq_factors.resize(static_cast<size_t>(want));
    std::memcpy(c.rope_freq_factors.data(), t->data, c.rope_freq_factors.size() * sizeof(float));
  }
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& config, const nlohmann::json* generation_config,
                                 const std::string& source) {
  if (!config.is_object()) fail(ErrorKind::Config, "{}: expected a JSON object", source);
  const std::string model_type = json_opt_string(config, "model_type", source).value_or("");
  std::string arch;
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    arch = (*it)[0].get<std::string>();
  }
  ModelConfig c;
  if (model_type == "chatglm" || arch.rfind("ChatGLM", 0) == 0) {
    c = chatglm_from_hf(config, source);
  } else if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3" ||
             model_type == "glm" || model_type == "glm4") {
    c = decoder_from_hf(config, source, model_type);
  } else if (model_type == "minicpmv") {
    // MiniCPM-V 2.6: a Qwen2 under "llm.", a SigLIP tower under "vpm.", a resampler.
    if (const double version = json_opt_float(config, "version", source).value_or(2.6); version != 2.6) {
      fail(ErrorKind::Unsupported, "{}: MiniCPM-V version {} is not supported (ferry runs 2.6)", source, version);
    }
    c = decoder_from_hf(config, source, "qwen2");
    c.tensor_prefix = "llm.";
    c.vision = minicpmv_vision_from_hf(config, source);
  } else {
    fail(
        ErrorKind::Unsupported,
        "{}: model_type '{}' (architecture '{}') is not supported; ferry runs llama, mistral, qwen2, qwen3, glm, glm4, "
        "chatglm and minicpmv checkpoints",
        source, model_type, arch);
  }
  c.architecture = arch.empty() ? model_type : arch;
  read_generation_ids(c, config, generation_config, source);
  c.validate(source);
  return c;
}

ModelConfig model_config_from_gguf(const GgufFile& g, const TensorShapeLookup& tensor_shape, const std::string& s) {
  const std::string arch = g.get_string("general.architecture");
  ModelConfig c;
  c.architecture = arch;
  c.layout = TensorLayout::Gguf;
  const auto key = [&](const char* k) { return arch + "." + k; };
  if (arch == "llama") {
    c.family = Family::Llama;
    c.rope_style = RopeStyle::Adjacent;  // the converter permuted q/k rows for adjacent-pair RoPE
  } else if (arch == "qwen2") {
    c.family = Family::Qwen2;
    c.rope_style = RopeStyle::HalfSplit;  // NEOX: no permutation in the converter
  } else if (arch == "qwen3") {
    c.family = Family::Qwen3;
    c.rope_style = RopeStyle::HalfSplit;  // NEOX, as qwen2
    c.qk_norm = true;                     // blk.N.attn_q_norm / attn_k_norm
  } else if (arch == "glm4") {
    c.family = Family::Glm4;
    c.rope_style = RopeStyle::Adjacent;
    c.post_norms = true;
  } else if (arch == "chatglm") {
    c.family = Family::ChatGlm;
    c.rope_style = RopeStyle::Adjacent;
  } else {
    fail(ErrorKind::Unsupported,
         "{}: GGUF architecture '{}' is not supported; ferry runs llama, qwen2, qwen3, glm4 and chatglm GGUF files", s,
         arch);
  }
  c.n_layer = to_int(g.get_int(key("block_count")), "block_count", s);
  c.hidden = to_int(g.get_int(key("embedding_length")), "embedding_length", s);
  c.ffn = to_int(g.get_int(key("feed_forward_length")), "feed_forward_length", s);
  c.n_head = to_int(g.get_int(key("attention.head_count")), "attention.head_count", s);
  const auto opt_count = [&](const char* k, int fallback) {
    const auto v = g.opt_int(key(k));
    return v ? to_int(*v, k, s) : fallback;
  };
  c.n_kv_head = opt_count("attention.head_count_kv", c.n_head);
  c.head_dim = opt_count("attention.key_length", c.hidden / c.n_head);
  c.n_rot = opt_count("rope.dimension_count", c.head_dim);
  c.rope_theta = g.opt_f32(key("rope.freq_base")).value_or(10000.0f);
  c.norm_eps = g.opt_f32(key("attention.layer_norm_rms_epsilon")).value_or(1e-5f);
  c.max_context = opt_count("context_length", 4096);
  read_gguf_rope_scaling(c, g, arch, s);
  if (const auto window = g.opt_int(key("attention.sliding_window"));
      window && *window > 0 && *window < c.max_context) {
    fail(ErrorKind::Unsupported,
         "{}: {}.attention.sliding_window is {}, under the context length {}: each token attends only to the last {} "
         "tokens, and ferry has no sliding-window attention (it would compute other logits past {} tokens)",
         s, arch, *window, c.max_context, *window, *window);
  }
  const auto stored = [&](LogicalTensor t) { return tensor_shape(*tensor_name(TensorLayout::Gguf, t, 0)); };
  c.fused_qkv = stored(LogicalTensor::AttnQkv).has_value();
  c.qkv_bias = stored(c.fused_qkv ? LogicalTensor::AttnQkvBias : LogicalTensor::AttnQBias).has_value();
  c.out_bias = stored(LogicalTensor::AttnOutBias).has_value();
  c.fused_gate_up = !stored(LogicalTensor::FfnGate).has_value();
  c.tied_embeddings = !stored(LogicalTensor::Output).has_value();
  // The vocabulary is the embedding's row count (the tokenizer list may be shorter or absent).
  if (const auto emb = stored(LogicalTensor::TokenEmbedding); emb && emb->rank == 2) {
    c.vocab = to_int((*emb)[0], "token_embd rows", s);
  } else if (const auto v = g.opt_int(key("vocab_size"))) {
    c.vocab = to_int(*v, "vocab_size", s);
  }
  if (const auto bos = g.opt_int("tokenizer.ggml.bos_token_id"); bos && *bos >= 0 && *bos <= INT32_MAX) {
    c.bos_id = static_cast<int32_t>(checked_token_id(*bos, c, "tokenizer.ggml.bos_token_id", s));
  }
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (const auto id = g.opt_int(k)) add_eos(c.eos_ids, checked_token_id(*id, c, k, s));
  }
  c.validate(s);
  return c;
}

}  // namespace ferry
