#include "models/tensor_names.h"

#include <fmt/format.h>

#include <iterator>
#include <string_view>

namespace ferry {

namespace {

struct NameRow {
  LogicalTensor tensor;
  LayerClass layer_class;
  const char* hf_decoder;  // nullptr: not in this layout
  const char* hf_chatglm;
  const char* gguf;
};

// {} stands for the layer index.
constexpr NameRow kNames[] = {
    {LogicalTensor::TokenEmbedding, LayerClass::Input, "model.embed_tokens.weight",
     "transformer.embedding.word_embeddings.weight", "token_embd.weight"},
    {LogicalTensor::OutputNorm, LayerClass::Output, "model.norm.weight", "transformer.encoder.final_layernorm.weight",
     "output_norm.weight"},
    {LogicalTensor::Output, LayerClass::Output, "lm_head.weight", "transformer.output_layer.weight", "output.weight"},
    {LogicalTensor::AttnNorm, LayerClass::Repeating, "model.layers.{}.input_layernorm.weight",
     "transformer.encoder.layers.{}.input_layernorm.weight", "blk.{}.attn_norm.weight"},
    {LogicalTensor::AttnQ, LayerClass::Repeating, "model.layers.{}.self_attn.q_proj.weight", nullptr,
     "blk.{}.attn_q.weight"},
    {LogicalTensor::AttnK, LayerClass::Repeating, "model.layers.{}.self_attn.k_proj.weight", nullptr,
     "blk.{}.attn_k.weight"},
    {LogicalTensor::AttnV, LayerClass::Repeating, "model.layers.{}.self_attn.v_proj.weight", nullptr,
     "blk.{}.attn_v.weight"},
    {LogicalTensor::AttnQkv, LayerClass::Repeating, nullptr,
     "transformer.encoder.layers.{}.self_attention.query_key_value.weight", "blk.{}.attn_qkv.weight"},
    {LogicalTensor::AttnQBias, LayerClass::Repeating, "model.layers.{}.self_attn.q_proj.bias", nullptr,
     "blk.{}.attn_q.bias"},
    {LogicalTensor::AttnKBias, LayerClass::Repeating, "model.layers.{}.self_attn.k_proj.bias", nullptr,
     "blk.{}.attn_k.bias"},
    {LogicalTensor::AttnVBias, LayerClass::Repeating, "model.layers.{}.self_attn.v_proj.bias", nullptr,
     "blk.{}.attn_v.bias"},
    {LogicalTensor::AttnQkvBias, LayerClass::Repeating, nullptr,
     "transformer.encoder.layers.{}.self_attention.query_key_value.bias", "blk.{}.attn_qkv.bias"},
    {LogicalTensor::AttnOut, LayerClass::Repeating, "model.layers.{}.self_attn.o_proj.weight",
     "transformer.encoder.layers.{}.self_attention.dense.weight", "blk.{}.attn_output.weight"},
    {LogicalTensor::AttnOutBias, LayerClass::Repeating, "model.layers.{}.self_attn.o_proj.bias", nullptr,
     "blk.{}.attn_output.bias"},
    {LogicalTensor::AttnPostNorm, LayerClass::Repeating, "model.layers.{}.post_self_attn_layernorm.weight", nullptr,
     "blk.{}.post_attention_norm.weight"},
    {LogicalTensor::FfnNorm, LayerClass::Repeating, "model.layers.{}.post_attention_layernorm.weight",
     "transformer.encoder.layers.{}.post_attention_layernorm.weight", "blk.{}.ffn_norm.weight"},
    {LogicalTensor::FfnGate, LayerClass::Repeating, "model.layers.{}.mlp.gate_proj.weight", nullptr,
     "blk.{}.ffn_gate.weight"},
    {LogicalTensor::FfnUp, LayerClass::Repeating, "model.layers.{}.mlp.up_proj.weight", nullptr,
     "blk.{}.ffn_up.weight"},
    // GGUF stores the fused gate+up matrix under ffn_up (llama.cpp's SWIGLU splits it in halves).
    {LogicalTensor::FfnGateUp, LayerClass::Repeating, "model.layers.{}.mlp.gate_up_proj.weight",
     "transformer.encoder.layers.{}.mlp.dense_h_to_4h.weight", "blk.{}.ffn_up.weight"},
    {LogicalTensor::FfnDown, LayerClass::Repeating, "model.layers.{}.mlp.down_proj.weight",
     "transformer.encoder.layers.{}.mlp.dense_4h_to_h.weight", "blk.{}.ffn_down.weight"},
    {LogicalTensor::FfnPostNorm, LayerClass::Repeating, "model.layers.{}.post_mlp_layernorm.weight", nullptr,
     "blk.{}.post_ffw_norm.weight"},
    {LogicalTensor::AttnQNorm, LayerClass::Repeating, "model.layers.{}.self_attn.q_norm.weight", nullptr,
     "blk.{}.attn_q_norm.weight"},
    {LogicalTensor::AttnKNorm, LayerClass::Repeating, "model.layers.{}.self_attn.k_norm.weight", nullptr,
     "blk.{}.attn_k_norm.weight"},
    {LogicalTensor::RopeFreqs, LayerClass::Input, nullptr, nullptr, "rope_freqs.weight"},
};
static_assert(std::size(kNames) == static_cast<size_t>(LogicalTensor::Count), "every logical tensor needs names");

constexpr bool rows_follow_enum_order() {
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (static_cast<size_t>(kNames[i].tensor) != i) return false;
  }
  return true;
}
static_assert(rows_follow_enum_order(), "kNames rows must follow the LogicalTensor order");

const NameRow& row(LogicalTensor t) {
  return kNames[static_cast<size_t>(t)];
}

constexpr const char* kLogicalNames[] = {
    "token_embedding", "output_norm",   "output",         "attn_norm",   "attn_q",      "attn_k",
    "attn_v",          "attn_qkv",      "attn_q_bias",    "attn_k_bias", "attn_v_bias", "attn_qkv_bias",
    "attn_out",        "attn_out_bias", "attn_post_norm", "ffn_norm",    "ffn_gate",    "ffn_up",
    "ffn_gate_up",     "ffn_down",      "ffn_post_norm",  "attn_q_norm", "attn_k_norm", "rope_freqs",
};
static_assert(std::size(kLogicalNames) == static_cast<size_t>(LogicalTensor::Count),
              "every logical tensor needs a name");

}  // namespace

const char* logical_tensor_name(LogicalTensor t) {
  return kLogicalNames[static_cast<size_t>(t)];
}

LayerClass layer_class(LogicalTensor t) {
  return row(t).layer_class;
}

std::optional<std::string> tensor_name(TensorLayout layout, LogicalTensor t, int layer) {
  const NameRow& r = row(t);
  const char* pattern = nullptr;
  switch (layout) {
    case TensorLayout::HfDecoder:
      pattern = r.hf_decoder;
      break;
    case TensorLayout::HfChatGlm:
      pattern = r.hf_chatglm;
      break;
    case TensorLayout::Gguf:
      pattern = r.gguf;
      break;
  }
  if (pattern == nullptr) return std::nullopt;
  if (r.layer_class != LayerClass::Repeating) return std::string(pattern);
  return fmt::format(fmt::runtime(pattern), layer);
}

std::optional<std::string> tensor_name(const ModelConfig& config, LogicalTensor t, int layer) {
  auto name = tensor_name(config.layout, t, layer);
  if (name && !config.tensor_prefix.empty()) name = config.tensor_prefix + *name;
  return name;
}

}  // namespace ferry
