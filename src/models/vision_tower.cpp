#include "models/vision_tower.h"

#include <cmath>

#include "core/error.h"
#include "models/spec_collector.h"

namespace ferry {

namespace {

enum class TowerTensor : uint8_t {
  PatchWeight,
  PatchBias,
  ClassToken,
  Positions,
  Norm1Weight,  // the attention sublayer's norm (before it in SigLIP, on its output in EVA2-CLIP)
  Norm1Bias,
  Qkv,
  QkvBias,
  Q,
  QBias,
  K,
  KBias,
  V,
  VBias,
  Out,
  OutBias,
  Norm2Weight,  // the MLP's
  Norm2Bias,
  Fc1,
  Fc1Bias,
  Fc2,
  Fc2Bias,
  FinalNormWeight,
  FinalNormBias,
  Count,
};

struct TowerNameRow {
  const char* eva2clip;
  const char* siglip;
};

// The checkpoint names, "{}" standing for the layer.
constexpr TowerNameRow kTowerNames[] = {
    {"transformer.vision.patch_embedding.proj.weight", "vpm.embeddings.patch_embedding.weight"},
    {"transformer.vision.patch_embedding.proj.bias", "vpm.embeddings.patch_embedding.bias"},
    {"transformer.vision.patch_embedding.cls_embedding", nullptr},
    {"transformer.vision.patch_embedding.position_embedding.weight", "vpm.embeddings.position_embedding.weight"},
    {"transformer.vision.transformer.layers.{}.input_layernorm.weight", "vpm.encoder.layers.{}.layer_norm1.weight"},
    {"transformer.vision.transformer.layers.{}.input_layernorm.bias", "vpm.encoder.layers.{}.layer_norm1.bias"},
    {"transformer.vision.transformer.layers.{}.attention.query_key_value.weight", nullptr},
    {"transformer.vision.transformer.layers.{}.attention.query_key_value.bias", nullptr},
    {nullptr, "vpm.encoder.layers.{}.self_attn.q_proj.weight"},
    {nullptr, "vpm.encoder.layers.{}.self_attn.q_proj.bias"},
    {nullptr, "vpm.encoder.layers.{}.self_attn.k_proj.weight"},
    {nullptr, "vpm.encoder.layers.{}.self_attn.k_proj.bias"},
    {nullptr, "vpm.encoder.layers.{}.self_attn.v_proj.weight"},
    {nullptr, "vpm.encoder.layers.{}.self_attn.v_proj.bias"},
    {"transformer.vision.transformer.layers.{}.attention.dense.weight",
     "vpm.encoder.layers.{}.self_attn.out_proj.weight"},
    {"transformer.vision.transformer.layers.{}.attention.dense.bias", "vpm.encoder.layers.{}.self_attn.out_proj.bias"},
    {"transformer.vision.transformer.layers.{}.post_attention_layernorm.weight",
     "vpm.encoder.layers.{}.layer_norm2.weight"},
    {"transformer.vision.transformer.layers.{}.post_attention_layernorm.bias",
     "vpm.encoder.layers.{}.layer_norm2.bias"},
    {"transformer.vision.transformer.layers.{}.mlp.fc1.weight", "vpm.encoder.layers.{}.mlp.fc1.weight"},
    {"transformer.vision.transformer.layers.{}.mlp.fc1.bias", "vpm.encoder.layers.{}.mlp.fc1.bias"},
    {"transformer.vision.transformer.layers.{}.mlp.fc2.weight", "vpm.encoder.layers.{}.mlp.fc2.weight"},
    {"transformer.vision.transformer.layers.{}.mlp.fc2.bias", "vpm.encoder.layers.{}.mlp.fc2.bias"},
    {nullptr, "vpm.post_layernorm.weight"},
    {nullptr, "vpm.post_layernorm.bias"},
};
static_assert(std::size(kTowerNames) == static_cast<size_t>(TowerTensor::Count), "every tower tensor needs a row");

std::string tower_name(const VisionConfig& v, TowerTensor t, int layer = -1) {
  const TowerNameRow& row = kTowerNames[static_cast<size_t>(t)];
  const char* pattern = v.layout == VisionLayout::Eva2Clip ? row.eva2clip : row.siglip;
  if (pattern == nullptr) {
    fail(ErrorKind::Internal, "the {} vision tower has no tensor #{}", vision_family_name(v.family),
         static_cast<int>(t));
  }
  return layer < 0 ? std::string(pattern) : fmt::format(fmt::runtime(pattern), layer);
}

}  // namespace

int64_t tower_tokens(const VisionConfig& v, const VisionGrid& grid) {
  return grid.patches() + (v.class_token ? 1 : 0);
}

ValueId vision_weight(GraphBuilder& b, const ModelSpec& spec, const std::string& name) {
  for (const auto& m : spec.modules) {
    if (m.name != vision_module() && m.name != projector_module()) continue;
    for (const auto& p : m.params) {
      if (p.name == name) return b.weight(p.name, p.compute_dtype, p.shape);
    }
  }
  fail(ErrorKind::Internal, "vision weight '{}' is not in the model spec", name);
}

void add_tower_params(ModelSpec& spec, SpecCollector& c) {
  const VisionConfig& v = spec.config.vision;
  const int64_t D = v.hidden;
  const int64_t F = v.ffn;
  const auto vec = [](int64_t n) { return Shape{n}; };
  ModuleSpec tower{vision_module(), {}, 0};
  // The patch conv [D, C, p, p] is read as the matrix [D, C*p*p] it is for a matmul.
  const std::string patch = tower_name(v, TowerTensor::PatchWeight);
  c.add_transformed(tower, patch, patch, Shape{D, v.in_channels, v.patch, v.patch}, {},
                    Shape{D, int64_t{v.in_channels} * v.patch * v.patch});
  c.add_named(tower, tower_name(v, TowerTensor::PatchBias), vec(D));
  if (v.class_token) c.add_named(tower, tower_name(v, TowerTensor::ClassToken), Shape{1, D});
  c.add_named(tower, tower_name(v, TowerTensor::Positions), Shape{v.n_positions, D});
  for (int l = 0; l < v.n_layer; ++l) {
    const auto add = [&](TowerTensor t, const Shape& shape) { c.add_named(tower, tower_name(v, t, l), shape); };
    add(TowerTensor::Norm1Weight, vec(D));
    add(TowerTensor::Norm1Bias, vec(D));
    if (v.fused_qkv) {
      add(TowerTensor::Qkv, Shape{3 * D, D});
      add(TowerTensor::QkvBias, vec(3 * D));
    } else {
      for (auto [w, bias] :
           {std::pair{TowerTensor::Q, TowerTensor::QBias}, std::pair{TowerTensor::K, TowerTensor::KBias},
            std::pair{TowerTensor::V, TowerTensor::VBias}}) {
        add(w, Shape{D, D});
        add(bias, vec(D));
      }
    }
    add(TowerTensor::Out, Shape{D, D});
    add(TowerTensor::OutBias, vec(D));
    add(TowerTensor::Norm2Weight, vec(D));
    add(TowerTensor::Norm2Bias, vec(D));
    add(TowerTensor::Fc1, Shape{F, D});
    add(TowerTensor::Fc1Bias, vec(F));
    add(TowerTensor::Fc2, Shape{D, F});
    add(TowerTensor::Fc2Bias, vec(D));
  }
  if (v.final_norm) {
    c.add_named(tower, tower_name(v, TowerTensor::FinalNormWeight), vec(D));
    c.add_named(tower, tower_name(v, TowerTensor::FinalNormBias), vec(D));
  }
  spec.modules.push_back(std::move(tower));
}

TowerOutput build_tower(GraphBuilder& b, const ModelSpec& spec, std::span<const VisionGrid> inputs) {
  const VisionConfig& v = spec.config.vision;
  Graph& g = b.graph();
  const auto w = [&](TowerTensor t, int layer = -1) { return vision_weight(b, spec, tower_name(v, t, layer)); };
  const int64_t D = v.hidden;
  const int64_t row_width = int64_t{v.in_channels} * v.patch * v.patch;
  int64_t patches = 0;
  int64_t tokens = 0;
  SegmentAttentionParams attn;
  attn.n_head = v.n_head;
  attn.n_kv_head = v.n_head;
  attn.head_dim = static_cast<int>(D / v.n_head);
  attn.scale = 1.0f / std::sqrt(static_cast<float>(attn.head_dim));
  for (const VisionGrid& grid : inputs) {
    patches += grid.patches();
    tokens += tower_tokens(v, grid);
    attn.segments.push_back({tower_tokens(v, grid), tower_tokens(v, grid)});
  }
  const ValueId pixels = g.input("patches", DType::F32, Shape{patches, row_width});
  const ValueId positions = g.input("vision_positions", DType::I32, Shape{tokens});

  b.set_module(vision_module());
  const ValueId embedded =
      b.matmul(pixels, w(TowerTensor::PatchWeight), w(TowerTensor::PatchBias), "vision.patch_embed");
  ValueId x = embedded;  // [patches, D]
  if (v.class_token) {
    // Each input's class token before its patches. The token's row is looked up by the first
    // input's first position (0): an embedding lookup also widens a bf16/f16 parameter to f32.
    const ValueId zero_id = b.slice(positions, 0, 0, 1, "vision.cls_id");
    const ValueId cls = b.embedding(w(TowerTensor::ClassToken), zero_id, "vision.cls");  // [1, D]
    std::vector<ValueId> rows;
    int64_t at = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t n = inputs[i].patches();
      rows.push_back(cls);
      rows.push_back(inputs.size() == 1 ? embedded
                                        : b.slice(embedded, 0, at, n, fmt::format("vision.patch_embed.{}", i)));
      at += n;
    }
    x = b.concat(rows, 0, "vision.tokens");
  }
  x = b.add(x, b.embedding(w(TowerTensor::Positions), positions, "vision.positions"), "vision.embed");

  const auto act = [&](ValueId m, const std::string& name) {
    return v.gelu_tanh ? b.gelu_tanh(m, name) : b.gelu(m, name);
  };
  for (int l = 0; l < v.n_layer; ++l) {
    const std::string n = fmt::format("vision.layers.{}", l);
    // SigLIP normalises each sublayer's input; EVA2-CLIP its output, before the residual add.
    const ValueId h = v.norm_after_sublayer ? x
                                            : b.layer_norm(x, w(TowerTensor::Norm1Weight, l),
                                                           w(TowerTensor::Norm1Bias, l), v.norm_eps, n + ".attn_norm");
    ValueId q, k, val;
    if (v.fused_qkv) {
      const ValueId qkv = b.matmul(h, w(TowerTensor::Qkv, l), w(TowerTensor::QkvBias, l), n + ".qkv");
      q = b.slice(qkv, 1, 0, D, n + ".q");
      k = b.slice(qkv, 1, D, D, n + ".k");
      val = b.slice(qkv, 1, 2 * D, D, n + ".v");
    } else {
      q = b.matmul(h, w(TowerTensor::Q, l), w(TowerTensor::QBias, l), n + ".q");
      k = b.matmul(h, w(TowerTensor::K, l), w(TowerTensor::KBias, l), n + ".k");
      val = b.matmul(h, w(TowerTensor::V, l), w(TowerTensor::VBias, l), n + ".v");
    }
    const ValueId a = b.segment_attention(q, k, val, attn, n + ".attn");
    ValueId o = b.matmul(a, w(TowerTensor::Out, l), w(TowerTensor::OutBias, l), n + ".attn_out");
    if (v.norm_after_sublayer) {
      o = b.layer_norm(o, w(TowerTensor::Norm1Weight, l), w(TowerTensor::Norm1Bias, l), v.norm_eps, n + ".attn_norm");
    }
    x = b.add(x, o, n + ".attn_residual");

    const ValueId hm = v.norm_after_sublayer ? x
                                             : b.layer_norm(x, w(TowerTensor::Norm2Weight, l),
                                                            w(TowerTensor::Norm2Bias, l), v.norm_eps, n + ".mlp_norm");
    ValueId m = b.matmul(hm, w(TowerTensor::Fc1, l), w(TowerTensor::Fc1Bias, l), n + ".fc1");
    m = act(m, n + ".gelu");
    m = b.matmul(m, w(TowerTensor::Fc2, l), w(TowerTensor::Fc2Bias, l), n + ".fc2");
    if (v.norm_after_sublayer) {
      m = b.layer_norm(m, w(TowerTensor::Norm2Weight, l), w(TowerTensor::Norm2Bias, l), v.norm_eps, n + ".mlp_norm");
    }
    x = b.add(x, m, n + ".mlp_residual");
  }
  if (v.final_norm) {
    x = b.layer_norm(x, w(TowerTensor::FinalNormWeight), w(TowerTensor::FinalNormBias), v.norm_eps, "vision.post_norm");
  }
  return {x, positions};
}

}  // namespace ferry
