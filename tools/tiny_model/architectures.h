// What the test checkpoints hold for each architecture: hyper-parameters and presets, the tensor
// list in Hugging Face layout with each tensor's GGUF name and initialisation, and config.json (the
// GGUF metadata is written from it by engine/gguf_export.h, as `ferry convert` writes it). Names,
// shapes and config fields follow ../shared/golden (each case's README.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "tokenizer.h"

namespace ferry::tiny {

enum class Arch { Llama, Qwen2, Glm, Glm4, ChatGlm };

inline const std::vector<std::pair<std::string, Arch>>& arch_names() {
  static const std::vector<std::pair<std::string, Arch>> names = {{"llama", Arch::Llama},
                                                                  {"qwen2", Arch::Qwen2},
                                                                  {"glm", Arch::Glm},
                                                                  {"glm4", Arch::Glm4},
                                                                  {"chatglm", Arch::ChatGlm}};
  return names;
}

inline std::string arch_name(Arch arch) {
  for (const auto& [name, a] : arch_names()) {
    if (a == arch) return name;
  }
  return "?";
}

inline Arch parse_arch(const std::string& name) {
  for (const auto& [n, a] : arch_names()) {
    if (n == name) return a;
  }
  fail(ErrorKind::Usage, "unknown architecture '{}'; choose llama, qwen2, glm, glm4 or chatglm", name);
}

struct Hyper {
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 16;
  int64_t ffn = 160;
  int64_t vocab = 0;  // 0: the tokenizer's size rounded up to a multiple of 64
  int64_t max_context = 2048;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;  // chatglm: 10000 * rope_ratio
  double rope_ratio = 1.0;      // chatglm only
  bool tied = false;            // qwen2

  // Rotated dims per head: the full head (llama, qwen2) or the first half (glm, glm4, chatglm).
  int64_t rotary_dims(Arch arch) const { return arch == Arch::Llama || arch == Arch::Qwen2 ? head_dim : head_dim / 2; }
};

inline const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"tiny", "demo", "bench300m"};
  return names;
}

// tiny: what the unit tests load (about a megabyte); demo: the README demo; bench300m: about 300M
// parameters in llama proportions, for benchmarks. Architecture conventions (qwen2's tied
// embeddings and rope base, glm4's wide heads, chatglm's rope_ratio) are applied on top.
inline Hyper preset_hyper(const std::string& preset, Arch arch) {
  Hyper h;
  if (preset == "tiny") {
    h.layers = 2, h.hidden = 64, h.heads = 4, h.kv_heads = 2, h.head_dim = 16, h.ffn = 160, h.max_context = 2048;
    if (arch == Arch::Glm4) h.head_dim = 32;  // head_dim * heads != hidden, as GLM-4-0414 allows
  } else if (preset == "demo") {
    h.layers = 4, h.hidden = 256, h.heads = 8, h.kv_heads = 2, h.head_dim = 32, h.ffn = 704, h.max_context = 4096;
  } else if (preset == "bench300m") {
    // 20 * (2*1024*1024 + 2*512*1024 + 3*1024*2816 + 2*1024) + 2*32000*1024 + 1024 = 301.5M parameters
    h.layers = 20, h.hidden = 1024, h.heads = 16, h.kv_heads = 8, h.head_dim = 64, h.ffn = 2816, h.vocab = 32000;
    h.max_context = 4096;
  } else {
    fail(ErrorKind::Usage, "unknown preset '{}'; choose tiny, demo or bench300m", preset);
  }
  if (arch == Arch::Qwen2) {
    h.tied = true;
    h.rope_theta = 1e6;
    h.rms_eps = 1e-6;
  }
  if (arch == Arch::ChatGlm) {
    h.rope_ratio = 2.0;
    h.rope_theta = 10000.0 * h.rope_ratio;
  }
  return h;
}

enum class Init {
  Embedding,  // N(0, 1)
  Matrix,     // N(0, 1/fan_in) * gain
  Bias,       // N(0, 0.5^2)
  Norm,       // 1 + N(0, 0.1^2)
  InvFreq,    // chatglm's rotary buffer: 1 / 10000^(2i/d), d = rotary dims (ignores rope_ratio, as THUDM's code)
};

struct TensorSpec {
  std::string hf_name;
  std::string gguf_name;  // empty: not in the GGUF (chatglm's inv_freq)
  Shape shape;            // Hugging Face layout, outermost-first ([out, in] for matrices)
  Init init = Init::Matrix;
  float gain = 1.0f;          // rows [0, gain_rows) of a matrix get `gain`, the rest 1
  int64_t gain_rows = 0;      // (fused query_key_value: q and k rows have gain 2, v rows 1)
  int64_t permute_heads = 0;  // llama q/k: GGUF rows are permuted for adjacent-pair RoPE with this many heads
};

// Every tensor of the model in file order (as the goldens list them).
inline std::vector<TensorSpec> tensor_specs(Arch arch, const Hyper& h) {
  const int64_t H = h.hidden, F = h.ffn, V = h.vocab, hd = h.head_dim;
  const int64_t q_rows = h.heads * hd, kv_rows = h.kv_heads * hd;
  std::vector<TensorSpec> t;
  auto matrix = [&](std::string hf, std::string gguf, int64_t out, int64_t in, float gain = 1.0f) {
    t.push_back({std::move(hf), std::move(gguf), Shape{out, in}, Init::Matrix, gain, out, 0});
  };
  auto vec = [&](std::string hf, std::string gguf, int64_t n, Init init) {
    t.push_back({std::move(hf), std::move(gguf), Shape{n}, init, 1.0f, 0, 0});
  };

  if (arch == Arch::ChatGlm) {
    t.push_back({"transformer.embedding.word_embeddings.weight", "token_embd.weight", Shape{V, H}, Init::Embedding});
    vec("transformer.rotary_pos_emb.inv_freq", "", h.rotary_dims(arch) / 2, Init::InvFreq);
    for (int64_t l = 0; l < h.layers; ++l) {
      const std::string p = "transformer.encoder.layers." + std::to_string(l) + ".";
      const std::string g = "blk." + std::to_string(l) + ".";
      vec(p + "input_layernorm.weight", g + "attn_norm.weight", H, Init::Norm);
      t.push_back({p + "self_attention.query_key_value.weight", g + "attn_qkv.weight", Shape{q_rows + 2 * kv_rows, H},
                   Init::Matrix, 2.0f, q_rows + kv_rows, 0});
      vec(p + "self_attention.query_key_value.bias", g + "attn_qkv.bias", q_rows + 2 * kv_rows, Init::Bias);
      matrix(p + "self_attention.dense.weight", g + "attn_output.weight", H, q_rows);
      vec(p + "post_attention_layernorm.weight", g + "ffn_norm.weight", H, Init::Norm);
      matrix(p + "mlp.dense_h_to_4h.weight", g + "ffn_up.weight", 2 * F, H);
      matrix(p + "mlp.dense_4h_to_h.weight", g + "ffn_down.weight", H, F);
    }
    vec("transformer.encoder.final_layernorm.weight", "output_norm.weight", H, Init::Norm);
    matrix("transformer.output_layer.weight", "output.weight", V, H, 2.0f);
    return t;
  }

  const bool qkv_bias = arch != Arch::Llama;
  const bool fused_gate_up = arch == Arch::Glm || arch == Arch::Glm4;
  t.push_back({"model.embed_tokens.weight", "token_embd.weight", Shape{V, H}, Init::Embedding});
  for (int64_t l = 0; l < h.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string g = "blk." + std::to_string(l) + ".";
    vec(p + "input_layernorm.weight", g + "attn_norm.weight", H, Init::Norm);
    matrix(p + "self_attn.q_proj.weight", g + "attn_q.weight", q_rows, H, 2.0f);
    if (arch == Arch::Llama) t.back().permute_heads = h.heads;
    if (qkv_bias) vec(p + "self_attn.q_proj.bias", g + "attn_q.bias", q_rows, Init::Bias);
    matrix(p + "self_attn.k_proj.weight", g + "attn_k.weight", kv_rows, H, 2.0f);
    if (arch == Arch::Llama) t.back().permute_heads = h.kv_heads;
    if (qkv_bias) vec(p + "self_attn.k_proj.bias", g + "attn_k.bias", kv_rows, Init::Bias);
    matrix(p + "self_attn.v_proj.weight", g + "attn_v.weight", kv_rows, H);
    if (qkv_bias) vec(p + "self_attn.v_proj.bias", g + "attn_v.bias", kv_rows, Init::Bias);
    matrix(p + "self_attn.o_proj.weight", g + "attn_output.weight", H, q_rows);
    if (arch == Arch::Glm4) vec(p + "post_self_attn_layernorm.weight", g + "post_attention_norm.weight", H, Init::Norm);
    vec(p + "post_attention_layernorm.weight", g + "ffn_norm.weight", H, Init::Norm);
    if (fused_gate_up) {
      matrix(p + "mlp.gate_up_proj.weight", g + "ffn_up.weight", 2 * F, H);
    } else {
      matrix(p + "mlp.gate_proj.weight", g + "ffn_gate.weight", F, H);
      matrix(p + "mlp.up_proj.weight", g + "ffn_up.weight", F, H);
    }
    matrix(p + "mlp.down_proj.weight", g + "ffn_down.weight", H, F);
    if (arch == Arch::Glm4) vec(p + "post_mlp_layernorm.weight", g + "post_ffw_norm.weight", H, Init::Norm);
  }
  vec("model.norm.weight", "output_norm.weight", H, Init::Norm);
  if (!h.tied) matrix("lm_head.weight", "output.weight", V, H, 2.0f);
  return t;
}

inline int64_t parameter_count(const std::vector<TensorSpec>& specs) {
  int64_t n = 0;
  for (const TensorSpec& s : specs) {
    if (s.init != Init::InvFreq) n += s.shape.numel();
  }
  return n;
}

inline const char* torch_dtype_name(DType dtype) {
  return dtype == DType::F16 ? "float16" : dtype == DType::BF16 ? "bfloat16" : "float32";
}

// Hugging Face config.json, field for field as the golden configs (with this model's sizes and
// the tokenizer's ids). `hf_dtype` is the safetensors dtype.
inline nlohmann::ordered_json config_json(Arch arch, const Hyper& h, const Tokenizer& tok, DType hf_dtype) {
  using json = nlohmann::ordered_json;
  const json eos_list = tok.eos_ids();
  if (arch == Arch::ChatGlm) {
    return json{{"_name_or_path", "ferry-tiny-chatglm"},
                {"model_type", "chatglm"},
                {"architectures", {"ChatGLMModel"}},
                {"auto_map",
                 {{"AutoConfig", "configuration_chatglm.ChatGLMConfig"},
                  {"AutoModel", "modeling_chatglm.ChatGLMForConditionalGeneration"},
                  {"AutoModelForCausalLM", "modeling_chatglm.ChatGLMForConditionalGeneration"}}},
                {"num_layers", h.layers},
                {"hidden_size", h.hidden},
                {"ffn_hidden_size", h.ffn},
                {"kv_channels", h.head_dim},
                {"num_attention_heads", h.heads},
                {"multi_query_attention", true},
                {"multi_query_group_num", h.kv_heads},
                {"padded_vocab_size", h.vocab},
                {"vocab_size", h.vocab},
                {"seq_length", h.max_context},
                {"layernorm_epsilon", h.rms_eps},
                {"rmsnorm", true},
                {"apply_residual_connection_post_layernorm", false},
                {"post_layer_norm", true},
                {"add_bias_linear", false},
                {"add_qkv_bias", true},
                {"bias_dropout_fusion", true},
                {"apply_query_key_layer_scaling", true},
                {"attention_softmax_in_fp32", true},
                {"fp32_residual_connection", false},
                {"hidden_dropout", 0.0},
                {"attention_dropout", 0.0},
                {"original_rope", true},
                {"rope_ratio", h.rope_ratio},
                {"tie_word_embeddings", false},
                {"eos_token_id", eos_list},
                {"pad_token_id", tok.endoftext},
                {"torch_dtype", torch_dtype_name(hf_dtype)},
                {"transformers_version", "4.44.0"}};
  }
  static const char* kClass[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "GlmForCausalLM", "Glm4ForCausalLM"};
  const bool glm_family = arch == Arch::Glm || arch == Arch::Glm4;
  json c{{"model_type", arch_name(arch)},
         {"architectures", {kClass[static_cast<int>(arch)]}},
         {"vocab_size", h.vocab},
         {"hidden_size", h.hidden},
         {"intermediate_size", h.ffn},
         {"num_hidden_layers", h.layers},
         {"num_attention_heads", h.heads},
         {"num_key_value_heads", h.kv_heads},
         {"head_dim", h.head_dim},
         {"hidden_act", "silu"},
         {"max_position_embeddings", h.max_context},
         {"rms_norm_eps", h.rms_eps},
         {"rope_theta", h.rope_theta},
         {"rope_scaling", nullptr},
         {"tie_word_embeddings", h.tied},
         {"attention_dropout", 0.0},
         {"initializer_range", 0.02},
         {"use_cache", true},
         {"bos_token_id", tok.endoftext}};
  // GLM checkpoints list every EOS id in config.json too; Llama and Qwen2 name one there.
  c["eos_token_id"] = glm_family ? eos_list : json(tok.endoftext);
  c["torch_dtype"] = torch_dtype_name(hf_dtype);
  switch (arch) {
    case Arch::Llama:
      c["attention_bias"] = false;
      c["mlp_bias"] = false;
      c["pretraining_tp"] = 1;
      c["transformers_version"] = "4.46.0";
      break;
    case Arch::Qwen2:
      c["use_sliding_window"] = false;
      c["sliding_window"] = nullptr;
      c["max_window_layers"] = h.layers;
      c["transformers_version"] = "4.46.0";
      break;
    default:
      c["attention_bias"] = true;
      c["partial_rotary_factor"] = 0.5;
      c["pad_token_id"] = tok.endoftext;
      c["transformers_version"] = "4.51.3";
      break;
  }
  return c;
}

inline nlohmann::ordered_json generation_config_json(const Tokenizer& tok) {
  return nlohmann::ordered_json{{"_from_model_config", false},
                                {"bos_token_id", tok.endoftext},
                                {"eos_token_id", tok.eos_ids()},
                                {"pad_token_id", tok.endoftext},
                                {"do_sample", false}};
}

}  // namespace ferry::tiny
