#include "models/resampler.h"

#include <cmath>

#include "core/error.h"
#include "models/spec_collector.h"

namespace ferry {

namespace {

const std::string kRoot = "resampler.";
constexpr int kHeadDim = 128;  // the original hard-codes num_heads = embed_dim // 128

std::string part_name(const std::string& name, const char* part) {
  return fmt::format("{}[{}]", name, part);
}

}  // namespace

void add_resampler_params(ModelSpec& spec, SpecCollector& c) {
  const VisionConfig& v = spec.config.vision;
  const int64_t E = spec.config.hidden;
  const int64_t Q = v.query_num;
  const auto vec = [](int64_t n) { return Shape{n}; };
  ModuleSpec m{projector_module(), {}, 0};
  c.add_named(m, kRoot + "query", Shape{Q, E});
  // The queries are normalised as activations: read in f32 whatever the checkpoint stores, in rows.
  if (!m.params.empty()) {
    m.params.back().compute_dtype = DType::F32;
    m.params.back().read_as_activation = true;
  }
  c.add_named(m, kRoot + "kv_proj.weight", Shape{E, v.hidden});
  for (const char* norm : {"ln_q", "ln_kv", "ln_post"}) {
    c.add_named(m, fmt::format("{}{}.weight", kRoot, norm), vec(E));
    c.add_named(m, fmt::format("{}{}.bias", kRoot, norm), vec(E));
  }
  // nn.MultiheadAttention's packed projection [3E, E] = [Wq; Wk; Wv] and its bias, split at load.
  const std::string in_w = kRoot + "attn.in_proj_weight";
  const std::string in_b = kRoot + "attn.in_proj_bias";
  const char* parts[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const WeightTransform rows{i * E, E, false};
    c.add_transformed(m, part_name(in_w, parts[i]), in_w, Shape{3 * E, E}, rows, Shape{E, E});
    c.add_transformed(m, part_name(in_b, parts[i]), in_b, vec(3 * E), rows, vec(E));
  }
  c.add_named(m, kRoot + "attn.out_proj.weight", Shape{E, E});
  c.add_named(m, kRoot + "attn.out_proj.bias", vec(E));
  // y = x @ proj: transposed at load into the [out, in] matrix a matmul reads.
  c.add_transformed(m, part_name(kRoot + "proj", "T"), kRoot + "proj", Shape{E, E}, WeightTransform{0, -1, true},
                    Shape{E, E});
  spec.modules.push_back(std::move(m));
}

ValueId build_resampler(GraphBuilder& b, const ModelSpec& spec, std::span<const VisionGrid> inputs,
                        const TowerOutput& tower) {
  const VisionConfig& v = spec.config.vision;
  const auto w = [&](const std::string& name) { return vision_weight(b, spec, name); };
  const int64_t E = spec.config.hidden;
  const int64_t Q = v.query_num;
  if (E % kHeadDim != 0) {
    fail(ErrorKind::Config, "the resampler's width {} is not a whole number of {}-wide heads", E, kHeadDim);
  }
  int64_t patches = 0;
  SegmentAttentionParams attn;
  attn.n_head = static_cast<int>(E / kHeadDim);
  attn.n_kv_head = attn.n_head;
  attn.head_dim = kHeadDim;
  attn.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (const VisionGrid& g : inputs) {
    patches += g.patches();
    attn.segments.push_back({Q, g.patches()});
  }
  const ValueId positions = b.graph().input("resampler_positions", DType::F32, Shape{patches, E});
  const std::string in_w = kRoot + "attn.in_proj_weight";
  const std::string in_b = kRoot + "attn.in_proj_bias";

  b.set_module(projector_module());
  const auto norm = [&](ValueId x, const char* which, const std::string& name) {
    return b.layer_norm(x, w(fmt::format("{}{}.weight", kRoot, which)), w(fmt::format("{}{}.bias", kRoot, which)),
                        1e-6f, name);
  };
  // Keys and values from the patches: kv = ln_kv(x Wkv); keys see the position, values do not.
  const ValueId kv = norm(b.matmul(tower.tokens, w(kRoot + "kv_proj.weight"), kNoValue, "resampler.kv_proj"), "ln_kv",
                          "resampler.ln_kv");
  const ValueId keyed = b.add(kv, positions, "resampler.kv_positioned");
  const ValueId k = b.matmul(keyed, w(part_name(in_w, "k")), w(part_name(in_b, "k")), "resampler.k");
  const ValueId val = b.matmul(kv, w(part_name(in_w, "v")), w(part_name(in_b, "v")), "resampler.v");
  // The same queries for every input.
  const ValueId q_in = norm(w(kRoot + "query"), "ln_q", "resampler.ln_q");
  const ValueId q1 = b.matmul(q_in, w(part_name(in_w, "q")), w(part_name(in_b, "q")), "resampler.q");
  const ValueId q = inputs.size() == 1 ? q1 : b.concat(std::vector<ValueId>(inputs.size(), q1), 0, "resampler.queries");
  const ValueId a = b.segment_attention(q, k, val, attn, "resampler.attn");
  ValueId y = b.matmul(a, w(kRoot + "attn.out_proj.weight"), w(kRoot + "attn.out_proj.bias"), "resampler.attn_out");
  y = norm(y, "ln_post", "resampler.ln_post");
  return b.matmul(y, w(part_name(kRoot + "proj", "T")), kNoValue, "image_embeds");
}

std::vector<float> resampler_positions(int64_t width, std::span<const VisionGrid> inputs) {
  if (width <= 0 || width % 4 != 0) {
    fail(ErrorKind::Usage, "the resampler's sin-cos positions need a width that is a multiple of 4, got {}", width);
  }
  const int64_t d = width / 4;  // frequencies per coordinate
  // numpy, float32 throughout: omega = 1 / 10000 ** (arange(d) / d); out = pos * omega; sin, cos.
  std::vector<float> omega(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) {
    const float e = static_cast<float>(i) / static_cast<float>(d);
    omega[static_cast<size_t>(i)] = 1.0f / std::pow(10000.0f, e);
  }
  std::vector<float> out;
  for (const VisionGrid& g : inputs) {
    for (int64_t y = 0; y < g.h; ++y) {
      for (int64_t x = 0; x < g.w; ++x) {
        for (const int64_t p : {x, y}) {
          for (int64_t i = 0; i < d; ++i) {
            out.push_back(static_cast<float>(std::sin(static_cast<double>(static_cast<float>(p) * omega[i]))));
          }
          for (int64_t i = 0; i < d; ++i) {
            out.push_back(static_cast<float>(std::cos(static_cast<double>(static_cast<float>(p) * omega[i]))));
          }
        }
      }
    }
  }
  return out;
}

}  // namespace ferry
