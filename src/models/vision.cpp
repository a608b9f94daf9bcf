#include "models/vision.h"

#include <cmath>

#include "core/error.h"

namespace ferry {

namespace {

// Finds the vision weights by their checkpoint names in the spec (make_decoder_spec checked them).
class VisionWeights {
 public:
  VisionWeights(const ModelSpec& spec, GraphBuilder& b) : spec_(spec), b_(b) {}

  ValueId operator()(const std::string& name) {
    for (const auto& m : spec_.modules) {
      if (m.name != vision_module() && m.name != projector_module()) continue;
      for (const auto& p : m.params) {
        if (p.name == name) return b_.weight(p.name, p.compute_dtype, p.shape);
      }
    }
    fail(ErrorKind::Internal, "vision weight '{}' is not in the model spec", name);
  }

 private:
  const ModelSpec& spec_;
  GraphBuilder& b_;
};

}  // namespace

std::vector<int32_t> vision_positions(const VisionConfig& vision, int64_t images) {
  std::vector<int32_t> ids;
  const int64_t tokens = vision.patches() + 1;
  ids.reserve(static_cast<size_t>(images * tokens));
  for (int64_t i = 0; i < images; ++i) {
    for (int64_t l = 0; l < tokens; ++l) ids.push_back(static_cast<int32_t>(l));
  }
  return ids;
}

Graph build_vision_graph(const ModelSpec& spec, int64_t images) {
  const VisionConfig& v = spec.config.vision;
  if (!v.present()) fail(ErrorKind::Usage, "this model has no vision tower: it takes no images");
  if (images < 1 || images > v.max_images) {
    fail(ErrorKind::Usage, "{} images given, but the model takes 1 to {} per prompt", images, v.max_images);
  }
  Graph g;
  GraphBuilder b(g);
  VisionWeights w(spec, b);
  const int64_t B = images;
  const int64_t C = v.in_channels;
  const int64_t S = v.image_size;
  const int64_t P = v.patch;
  const int64_t D = v.hidden;
  const int64_t N = v.patches();
  const int64_t L = N + 1;
  const int64_t H = spec.config.hidden;
  const std::string root = "transformer.vision.";

  const ValueId pixels = g.input("pixels", DType::F32, Shape{B, C, S, S});
  const ValueId positions = g.input("vision_positions", DType::I32, Shape{B * L});

  // Patch embedding: the 14x14 stride-14 conv is a matmul over the gathered patches.
  b.set_module(vision_module());
  const std::string pe = root + "patch_embedding.";
  const ValueId proj_w = b.reshape(w(pe + "proj.weight"), Shape{D, C * P * P}, "vision.patch_weight");
  const ValueId patches = b.patchify(pixels, PatchParams{static_cast<int>(P), false}, "vision.patches");
  const ValueId embedded = b.matmul(patches, proj_w, w(pe + "proj.bias"), "vision.patch_embed");  // [B*N, D]
  // The class token's row is position 0 of the first image; an embedding lookup also widens a
  // bf16/f16 parameter to f32.
  const ValueId zero_id = b.slice(positions, 0, 0, 1, "vision.cls_id");
  const ValueId cls = b.embedding(w(pe + "cls_embedding"), zero_id, "vision.cls");  // [1, D]
  std::vector<ValueId> rows;
  for (int64_t i = 0; i < B; ++i) {
    rows.push_back(cls);
    rows.push_back(B == 1 ? embedded : b.slice(embedded, 0, i * N, N, fmt::format("vision.patch_embed.{}", i)));
  }
  ValueId x = b.concat(rows, 0, "vision.tokens");  // [B*L, D]
  x = b.add(x, b.embedding(w(pe + "position_embedding.weight"), positions, "vision.positions"), "vision.embed");

  SegmentAttentionParams attn;
  attn.n_head = v.n_head;
  attn.n_kv_head = v.n_head;
  attn.head_dim = static_cast<int>(D / v.n_head);
  attn.scale = 1.0f / std::sqrt(static_cast<float>(attn.head_dim));
  attn.segments.assign(static_cast<size_t>(B), AttentionSegment{L, L});
  for (int l = 0; l < v.n_layer; ++l) {
    const std::string p = fmt::format("{}transformer.layers.{}.", root, l);
    const std::string n = fmt::format("vision.layers.{}", l);
    const ValueId qkv =
        b.matmul(x, w(p + "attention.query_key_value.weight"), w(p + "attention.query_key_value.bias"), n + ".qkv");
    const ValueId q = b.slice(qkv, 1, 0, D, n + ".q");
    const ValueId k = b.slice(qkv, 1, D, D, n + ".k");
    const ValueId val = b.slice(qkv, 1, 2 * D, D, n + ".v");
    const ValueId a = b.segment_attention(q, k, val, attn, n + ".attn");
    ValueId o = b.matmul(a, w(p + "attention.dense.weight"), w(p + "attention.dense.bias"), n + ".attn_out");
    // EVA2-CLIP normalises each sublayer's output, then adds the residual.
    o = b.layer_norm(o, w(p + "input_layernorm.weight"), w(p + "input_layernorm.bias"), v.norm_eps, n + ".attn_norm");
    x = b.add(x, o, n + ".attn_residual");
    ValueId m = b.matmul(x, w(p + "mlp.fc1.weight"), w(p + "mlp.fc1.bias"), n + ".fc1");
    m = b.gelu(m, n + ".gelu");
    m = b.matmul(m, w(p + "mlp.fc2.weight"), w(p + "mlp.fc2.bias"), n + ".fc2");
    m = b.layer_norm(m, w(p + "post_attention_layernorm.weight"), w(p + "post_attention_layernorm.bias"), v.norm_eps,
                     n + ".mlp_norm");
    x = b.add(x, m, n + ".mlp_residual");
  }

  // Projector: drop the class tokens, 2x2 stride-2 conv over the patch grid (channels-last, as the
  // tokens are), GLU, boi/eoi, / scaling_factor.
  b.set_module(projector_module());
  const int64_t grid = S / P;
  const int64_t M = grid / 2 * (grid / 2);
  std::vector<ValueId> grids;
  for (int64_t i = 0; i < B; ++i) grids.push_back(b.slice(x, 0, i * L + 1, N, fmt::format("projector.grid.{}", i)));
  ValueId y = B == 1 ? grids[0] : b.concat(grids, 0, "projector.grids");  // [B*N, D]
  y = b.reshape(y, Shape{B, grid, grid, D}, "projector.grid_nhwc");
  y = b.patchify(y, PatchParams{2, true}, "projector.conv_patches");  // [B*M, 4D]
  const ValueId conv_w = b.reshape(w(root + "conv.weight"), Shape{H, D * 4}, "projector.conv_weight");
  y = b.matmul(y, conv_w, w(root + "conv.bias"), "projector.conv");  // [B*M, H]
  const std::string lp = root + "linear_proj.";
  y = b.matmul(y, w(lp + "linear_proj.weight"), kNoValue, "projector.linear_proj");
  y = b.layer_norm(y, w(lp + "norm1.weight"), w(lp + "norm1.bias"), 1e-5f, "projector.norm1");  // nn.LayerNorm default
  y = b.gelu(y, "projector.gelu");
  const ValueId gate = b.matmul(y, w(lp + "gate_proj.weight"), kNoValue, "projector.gate");
  const ValueId up = b.matmul(y, w(lp + "dense_h_to_4h.weight"), kNoValue, "projector.up");
  y = b.matmul(b.swiglu(gate, up, "projector.swiglu"), w(lp + "dense_4h_to_h.weight"), kNoValue, "projector.down");

  const ValueId id0 = b.slice(positions, 0, 0, 1, "projector.marker_id");
  const ValueId boi = b.embedding(b.reshape(w(root + "boi"), Shape{1, H}, "projector.boi_table"), id0, "projector.boi");
  const ValueId eoi = b.embedding(b.reshape(w(root + "eoi"), Shape{1, H}, "projector.eoi_table"), id0, "projector.eoi");
  std::vector<ValueId> parts;
  for (int64_t i = 0; i < B; ++i) {
    parts.push_back(boi);
    parts.push_back(B == 1 ? y : b.slice(y, 0, i * M, M, fmt::format("projector.image.{}", i)));
    parts.push_back(eoi);
  }
  const ValueId joined = b.concat(parts, 0, "projector.joined");
  const ValueId out = b.scale(joined, 1.0f / v.scaling_factor, "image_embeds");
  g.mark_output(out);
  return g;
}

}  // namespace ferry
