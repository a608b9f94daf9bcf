#include "models/decoder.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"
#include "models/spec_collector.h"
#include "models/vision.h"

namespace ferry {

std::string embed_module() {
  return "embed";
}
std::string layer_module(int layer) {
  return fmt::format("layers.{}", layer);
}
std::string head_module() {
  return "head";
}
std::string vision_module() {
  return "vision";
}
std::string projector_module() {
  return "projector";
}
std::string k_cache_name(int layer) {
  return fmt::format("layers.{}.k_cache", layer);
}
std::string v_cache_name(int layer) {
  return fmt::format("layers.{}.v_cache", layer);
}

void check_kv_cache_dtype(const ModelConfig& config, DType dtype) {
  if (!is_kv_cache_dtype(dtype)) {
    fail(ErrorKind::Usage, "a KV cache of {} is not supported: use f32, f16, bf16 or q8_0", dtype_name(dtype));
  }
  const int block = dtype_traits(dtype).block_size;
  if (config.kv_width() % block != 0) {
    fail(ErrorKind::Usage,
         "a {} KV cache stores each cache row in blocks of {}, but this model's kv width ({} kv heads x head_dim {} "
         "= {}) is not a multiple of {}; use an f16 KV cache instead (--kv-dtype f16)",
         dtype_name(dtype), block, config.n_kv_head, config.head_dim, config.kv_width(), block);
  }
}

const ParamSpec* ModelSpec::find(LogicalTensor role, int layer) const {
  const auto in = [&](const ModuleSpec& m) -> const ParamSpec* {
    for (const auto& p : m.params) {
      if (p.role == role && p.layer == layer) return &p;
    }
    return nullptr;
  };
  // A layer is one module, which make_decoder_spec puts at modules[first_layer + layer]: when that
  // module is the layer's, it alone answers, so building a graph stays linear in the number of layers.
  const size_t at = static_cast<size_t>(first_layer) + static_cast<size_t>(layer);
  if (layer >= 0 && first_layer >= 0 && at < modules.size()) {
    const ModuleSpec& m = modules[at];
    if (std::any_of(m.params.begin(), m.params.end(), [&](const ParamSpec& p) { return p.layer == layer; })) {
      return in(m);
    }
  }
  for (const auto& m : modules) {
    if (const ParamSpec* p = in(m)) return p;
  }
  return nullptr;
}

uint64_t ModelSpec::parameter_count() const {
  std::unordered_set<std::string> seen;
  uint64_t n = 0;
  for (const auto& m : modules) {
    for (const auto& p : m.params) {
      if (seen.insert(p.name).second) n += static_cast<uint64_t>(p.shape.numel());
    }
  }
  return n;
}

namespace {

// Layers the checkpoint holds, counted by their first norm (bounded by what exists, so a config
// that claims a billion layers costs nothing).
int count_layers(const ModelConfig& config, const TensorLookup& lookup) {
  int n = 0;
  while (n < config.n_layer) {
    const auto name = tensor_name(config, LogicalTensor::AttnNorm, n);
    if (!name || !lookup(*name)) break;
    ++n;
  }
  return n;
}

}  // namespace

namespace {

ModelSpec build_spec(const ModelConfig& config, const TensorLookup& lookup, const std::string& source,
                     std::optional<DType> assumed_dtype) {
  config.validate(source);
  ModelSpec spec;
  spec.config = config;
  SpecCollector c(config, lookup, assumed_dtype);
  const int64_t H = config.hidden;
  const int64_t V = config.vocab;
  const int64_t F = config.ffn;
  const int64_t QW = config.q_width();
  const int64_t KVW = config.kv_width();

  // A config that declares more layers than the file holds is one error, found before the
  // per-layer checks list thousands of missing names.
  if (const int present = assumed_dtype ? config.n_layer : count_layers(config, lookup);
      present < config.n_layer && present > 0) {
    fail(ErrorKind::Shape,
         "{}: the config declares {} layers but the checkpoint holds {} (layers 0..{}); check that the config "
         "belongs to these weights and that every shard is present",
         source, config.n_layer, present, present - 1);
  }

  if (config.vision.present()) add_vision_modules(spec, c);

  ModuleSpec embed{embed_module(), {}, 0};
  c.add(embed, LogicalTensor::TokenEmbedding, -1, Shape{V, H});
  spec.modules.push_back(std::move(embed));
  spec.first_layer = static_cast<int>(spec.modules.size());

  for (int l = 0; l < config.n_layer; ++l) {
    ModuleSpec m{layer_module(l), {}, config.kv_bytes_per_token()};
    c.add(m, LogicalTensor::AttnNorm, l, Shape{H});
    if (config.fused_qkv) {
      c.add(m, LogicalTensor::AttnQkv, l, Shape{QW + 2 * KVW, H});
      if (config.qkv_bias) c.add(m, LogicalTensor::AttnQkvBias, l, Shape{QW + 2 * KVW});
    } else {
      c.add(m, LogicalTensor::AttnQ, l, Shape{QW, H});
      c.add(m, LogicalTensor::AttnK, l, Shape{KVW, H});
      c.add(m, LogicalTensor::AttnV, l, Shape{KVW, H});
      if (config.qkv_bias) {
        c.add(m, LogicalTensor::AttnQBias, l, Shape{QW});
        c.add(m, LogicalTensor::AttnKBias, l, Shape{KVW});
        c.add(m, LogicalTensor::AttnVBias, l, Shape{KVW});
      }
    }
    if (config.qk_norm) {
      c.add(m, LogicalTensor::AttnQNorm, l, Shape{config.head_dim});
      c.add(m, LogicalTensor::AttnKNorm, l, Shape{config.head_dim});
    }
    c.add(m, LogicalTensor::AttnOut, l, Shape{H, QW});
    if (config.out_bias) c.add(m, LogicalTensor::AttnOutBias, l, Shape{H});
    if (config.post_norms) c.add(m, LogicalTensor::AttnPostNorm, l, Shape{H});
    c.add(m, LogicalTensor::FfnNorm, l, Shape{H});
    if (config.fused_gate_up) {
      c.add(m, LogicalTensor::FfnGateUp, l, Shape{2 * F, H});
    } else {
      c.add(m, LogicalTensor::FfnGate, l, Shape{F, H});
      c.add(m, LogicalTensor::FfnUp, l, Shape{F, H});
    }
    c.add(m, LogicalTensor::FfnDown, l, Shape{H, F});
    if (config.post_norms) c.add(m, LogicalTensor::FfnPostNorm, l, Shape{H});
    spec.modules.push_back(std::move(m));
  }

  ModuleSpec head{head_module(), {}, 0};
  c.add(head, LogicalTensor::OutputNorm, -1, Shape{H});
  if (!config.tied_embeddings) c.add(head, LogicalTensor::Output, -1, Shape{V, H});
  spec.modules.push_back(std::move(head));
  c.finish(source);
  return spec;
}

}  // namespace

ModelSpec make_decoder_spec(const ModelConfig& config, const TensorLookup& lookup, const std::string& source) {
  return build_spec(config, lookup, source, std::nullopt);
}

ModelSpec make_decoder_spec_from_config(const ModelConfig& config, DType matrix_dtype, const std::string& source) {
  return build_spec(config, TensorLookup(), source, matrix_dtype);
}

namespace {

ValueId weight_of(GraphBuilder& b, const ModelSpec& spec, LogicalTensor role, int layer = -1) {
  const ParamSpec* p = spec.find(role, layer);
  if (p == nullptr) return kNoValue;
  return b.weight(p->name, p->compute_dtype, p->shape);
}

}  // namespace

namespace {

// image_rows > 0: the GLM-4V variant whose embed module splices image embeddings in.
Graph decoder_graph(const ModelSpec& spec, const StepShape& step, int64_t image_rows) {
  const ModelConfig& c = spec.config;
  if (step.n_tokens <= 0 || step.kv_offset < 0 || step.kv_offset + step.n_tokens > step.kv_capacity) {
    fail(ErrorKind::Usage, "a step of {} token(s) after {} cached does not fit a context of {} tokens", step.n_tokens,
         step.kv_offset, step.kv_capacity);
  }
  Graph g;
  GraphBuilder b(g);
  const int64_t T = step.n_tokens;
  const int64_t QW = c.q_width();
  const int64_t KVW = c.kv_width();
  check_kv_cache_dtype(c, step.kv_dtype);

  const ValueId tokens = g.input("tokens", DType::I32, Shape{T});            // [T] token ids
  const ValueId positions = g.input("positions", DType::I32, Shape{T});      // [T] position ids
  const ValueId kv_position = g.input("kv_position", DType::I32, Shape{1});  // [1] first cache row written

  b.set_module(embed_module());
  ValueId x = b.embedding(weight_of(b, spec, LogicalTensor::TokenEmbedding), tokens, "embed.out");  // [T, H]
  if (image_rows > 0) {
    // Token and image rows stacked, then gathered in sequence order: a row map picks each input row.
    const ValueId images = g.input("image_embeds", DType::F32, Shape{image_rows, c.hidden});
    const ValueId rows = g.input("embed_rows", DType::I32, Shape{T});
    x = b.embedding(b.concat({x, images}, 0, "embed.with_images"), rows, "embed.spliced");
  }

  const RopeParams rope = rope_params(c);
  AttentionParams attn;
  attn.n_head = c.n_head;
  attn.n_kv_head = c.n_kv_head;
  attn.head_dim = c.head_dim;
  attn.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = layer_module(l);
    b.set_module(p);
    const auto w = [&](LogicalTensor role) { return weight_of(b, spec, role, l); };

    const ValueId h = b.rms_norm(x, w(LogicalTensor::AttnNorm), c.norm_eps, p + ".attn_norm");
    ValueId q, k, v;
    if (c.fused_qkv) {
      const ValueId qkv = b.matmul(h, w(LogicalTensor::AttnQkv), w(LogicalTensor::AttnQkvBias), p + ".qkv");
      q = b.slice(qkv, 1, 0, QW, p + ".q");
      k = b.slice(qkv, 1, QW, KVW, p + ".k");
      v = b.slice(qkv, 1, QW + KVW, KVW, p + ".v");
    } else {
      q = b.matmul(h, w(LogicalTensor::AttnQ), w(LogicalTensor::AttnQBias), p + ".q");
      k = b.matmul(h, w(LogicalTensor::AttnK), w(LogicalTensor::AttnKBias), p + ".k");
      v = b.matmul(h, w(LogicalTensor::AttnV), w(LogicalTensor::AttnVBias), p + ".v");
    }
    if (c.qk_norm) {
      // Qwen3: RMSNorm over each head's head_dim values, one weight shared by the heads: the rows
      // [T, heads * hd] read as [T * heads, hd] for the norm, then back.
      const auto per_head_norm = [&](ValueId x_in, int heads, LogicalTensor role, const std::string& name) {
        const ValueId rows = b.reshape(x_in, Shape{T * heads, c.head_dim}, name + ".heads");
        const ValueId normed = b.rms_norm(rows, w(role), c.norm_eps, name);
        return b.reshape(normed, Shape{T, int64_t{heads} * c.head_dim}, name + ".rows");
      };
      q = per_head_norm(q, c.n_head, LogicalTensor::AttnQNorm, p + ".q_norm");
      k = per_head_norm(k, c.n_kv_head, LogicalTensor::AttnKNorm, p + ".k_norm");
    }
    q = b.rope(q, positions, rope, p + ".q_rope");
    k = b.rope(k, positions, rope, p + ".k_rope");
    const ValueId k_cache = b.state(k_cache_name(l), step.kv_dtype, Shape{step.kv_capacity, KVW});
    const ValueId v_cache = b.state(v_cache_name(l), step.kv_dtype, Shape{step.kv_capacity, KVW});
    const ValueId a = b.attention(q, k, v, k_cache, v_cache, attn, p + ".attn", kv_position);
    ValueId o = b.matmul(a, w(LogicalTensor::AttnOut), w(LogicalTensor::AttnOutBias), p + ".attn_out");
    if (c.post_norms) o = b.rms_norm(o, w(LogicalTensor::AttnPostNorm), c.norm_eps, p + ".attn_post_norm");
    x = b.add(x, o, p + ".attn_residual");

    const ValueId hf = b.rms_norm(x, w(LogicalTensor::FfnNorm), c.norm_eps, p + ".ffn_norm");
    ValueId m;
    if (c.fused_gate_up) {
      m = b.swiglu(b.matmul(hf, w(LogicalTensor::FfnGateUp), kNoValue, p + ".gate_up"), p + ".swiglu");
    } else {
      const ValueId gate = b.matmul(hf, w(LogicalTensor::FfnGate), kNoValue, p + ".gate");
      const ValueId up = b.matmul(hf, w(LogicalTensor::FfnUp), kNoValue, p + ".up");
      m = b.swiglu(gate, up, p + ".swiglu");
    }
    ValueId d = b.matmul(m, w(LogicalTensor::FfnDown), kNoValue, p + ".down");
    if (c.post_norms) d = b.rms_norm(d, w(LogicalTensor::FfnPostNorm), c.norm_eps, p + ".ffn_post_norm");
    x = b.add(x, d, p + ".ffn_residual");
  }

  b.set_module(head_module());
  if (!step.all_logits && T > 1) {
    // The row that gives logits is an input too ([1] i32, normally T - 1), not a node parameter.
    x = b.embedding(x, g.input("logit_rows", DType::I32, Shape{1}), "head.logit_rows");
  }
  const ValueId normed = b.rms_norm(x, weight_of(b, spec, LogicalTensor::OutputNorm), c.norm_eps, "head.norm");
  const ValueId out_w =
      c.tied_embeddings ? weight_of(b, spec, LogicalTensor::TokenEmbedding) : weight_of(b, spec, LogicalTensor::Output);
  const ValueId logits = b.matmul(normed, out_w, kNoValue, "logits");
  g.mark_output(logits);
  return g;
}

}  // namespace

Graph build_decoder_graph(const ModelSpec& spec, const StepShape& step) {
  return decoder_graph(spec, step, 0);
}

Graph build_decoder_graph_with_images(const ModelSpec& spec, const StepShape& step, int64_t image_rows) {
  if (image_rows <= 0) fail(ErrorKind::Usage, "a step with images needs at least one image row, got {}", image_rows);
  return decoder_graph(spec, step, image_rows);
}

}  // namespace ferry
