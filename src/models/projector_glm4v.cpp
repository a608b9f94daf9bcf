#include "models/projector_glm4v.h"

#include "core/error.h"
#include "models/spec_collector.h"

namespace ferry {

namespace {
const std::string kRoot = "transformer.vision.";
}  // namespace

void add_glm4v_projector_params(ModelSpec& spec, SpecCollector& c) {
  const VisionConfig& v = spec.config.vision;
  const int64_t D = v.hidden;
  const int64_t H = spec.config.hidden;
  const int64_t F = spec.config.ffn;
  const auto vec = [](int64_t n) { return Shape{n}; };
  ModuleSpec proj{projector_module(), {}, 0};
  // The 2x2 conv [H, D, 2, 2] is read as the matrix [H, 4D] (columns (c, ky, kx), as patchify gives them).
  c.add_transformed(proj, kRoot + "conv.weight", kRoot + "conv.weight", Shape{H, D, 2, 2}, {}, Shape{H, 4 * D});
  c.add_named(proj, kRoot + "conv.bias", vec(H));
  const std::string lp = kRoot + "linear_proj.";
  c.add_named(proj, lp + "linear_proj.weight", Shape{H, H});
  c.add_named(proj, lp + "norm1.weight", vec(H));
  c.add_named(proj, lp + "norm1.bias", vec(H));
  c.add_named(proj, lp + "gate_proj.weight", Shape{F, H});
  c.add_named(proj, lp + "dense_h_to_4h.weight", Shape{F, H});
  c.add_named(proj, lp + "dense_4h_to_h.weight", Shape{H, F});
  // boi / eoi [1, 1, H] are read as one-row tables.
  c.add_transformed(proj, kRoot + "boi", kRoot + "boi", Shape{1, 1, H}, {}, Shape{1, H});
  c.add_transformed(proj, kRoot + "eoi", kRoot + "eoi", Shape{1, 1, H}, {}, Shape{1, H});
  spec.modules.push_back(std::move(proj));
}

ValueId build_glm4v_projector(GraphBuilder& b, const ModelSpec& spec, std::span<const VisionGrid> inputs,
                              const TowerOutput& tower) {
  const ValueId tower_out = tower.tokens;
  const VisionConfig& v = spec.config.vision;
  const auto w = [&](const std::string& name) { return vision_weight(b, spec, name); };
  const auto B = static_cast<int64_t>(inputs.size());
  const int64_t D = v.hidden;
  const int64_t grid = v.image_size / v.patch;
  const int64_t N = grid * grid;
  const int64_t L = N + 1;
  const int64_t M = grid / 2 * (grid / 2);
  for (const VisionGrid& g : inputs) {
    if (!(g == VisionGrid{grid, grid})) {
      fail(ErrorKind::Usage, "GLM-4V takes images of {}x{} patches, got {}x{}", grid, grid, g.h, g.w);
    }
  }

  b.set_module(projector_module());
  std::vector<ValueId> grids;
  for (int64_t i = 0; i < B; ++i) {
    grids.push_back(b.slice(tower_out, 0, i * L + 1, N, fmt::format("projector.grid.{}", i)));
  }
  ValueId y = B == 1 ? grids[0] : b.concat(grids, 0, "projector.grids");  // [B*N, D]
  y = b.reshape(y, Shape{B, grid, grid, D}, "projector.grid_nhwc");
  y = b.patchify(y, PatchParams{2, true}, "projector.conv_patches");                    // [B*M, 4D]
  y = b.matmul(y, w(kRoot + "conv.weight"), w(kRoot + "conv.bias"), "projector.conv");  // [B*M, H]
  const std::string lp = kRoot + "linear_proj.";
  y = b.matmul(y, w(lp + "linear_proj.weight"), kNoValue, "projector.linear_proj");
  y = b.layer_norm(y, w(lp + "norm1.weight"), w(lp + "norm1.bias"), 1e-5f, "projector.norm1");  // nn.LayerNorm default
  y = b.gelu(y, "projector.gelu");
  const ValueId gate = b.matmul(y, w(lp + "gate_proj.weight"), kNoValue, "projector.gate");
  const ValueId up = b.matmul(y, w(lp + "dense_h_to_4h.weight"), kNoValue, "projector.up");
  y = b.matmul(b.swiglu(gate, up, "projector.swiglu"), w(lp + "dense_4h_to_h.weight"), kNoValue, "projector.down");

  // boi and eoi are one-row tables; looking up row 0 (the first vision position, the class
  // token's) widens them to f32.
  const ValueId id0 = b.slice(tower.positions, 0, 0, 1, "projector.marker_id");
  const ValueId boi = b.embedding(w(kRoot + "boi"), id0, "projector.boi");
  const ValueId eoi = b.embedding(w(kRoot + "eoi"), id0, "projector.eoi");
  std::vector<ValueId> parts;
  for (int64_t i = 0; i < B; ++i) {
    parts.push_back(boi);
    parts.push_back(B == 1 ? y : b.slice(y, 0, i * M, M, fmt::format("projector.image.{}", i)));
    parts.push_back(eoi);
  }
  return b.scale(b.concat(parts, 0, "projector.joined"), 1.0f / v.scaling_factor, "image_embeds");
}

}  // namespace ferry
