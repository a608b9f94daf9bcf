#include "models/vision.h"

#include "core/error.h"
#include "models/projector_glm4v.h"
#include "models/resampler.h"

namespace ferry {

void add_vision_modules(ModelSpec& spec, SpecCollector& c) {
  add_tower_params(spec, c);
  switch (spec.config.vision.family) {
    case VisionFamily::Glm4v:
      add_glm4v_projector_params(spec, c);
      return;
    case VisionFamily::MiniCpmv:
      add_resampler_params(spec, c);
      return;
    case VisionFamily::None:
      break;
  }
  fail(ErrorKind::Internal, "a vision tower without a vision family");
}

int64_t vision_rows(const VisionConfig& v, const VisionGrid& grid) {
  if (v.family == VisionFamily::MiniCpmv) return v.query_num;
  return grid.h / 2 * (grid.w / 2) + 2;
}

std::vector<VisionGrid> worst_case_vision_inputs(const VisionConfig& v) {
  VisionGrid largest{v.table_side(), v.table_side()};
  if (v.family == VisionFamily::MiniCpmv) {
    const int64_t side = v.scale_resolution / v.patch + 1;  // max_patches_per_input() as a square
    largest = VisionGrid{side, side};
  }
  return std::vector<VisionGrid>(static_cast<size_t>(v.max_images * v.max_inputs_per_image()), largest);
}

std::vector<int32_t> learned_positions(const VisionConfig& v, std::span<const VisionGrid> inputs) {
  std::vector<int32_t> ids;
  for (const VisionGrid& g : inputs) {
    for (int64_t l = 0; l < tower_tokens(v, g); ++l) ids.push_back(static_cast<int32_t>(l));
  }
  return ids;
}

Graph build_vision_graph(const ModelSpec& spec, std::span<const VisionGrid> inputs) {
  const VisionConfig& v = spec.config.vision;
  if (!v.present()) fail(ErrorKind::Usage, "this model has no vision tower: it takes no images");
  const int64_t most = v.max_images * v.max_inputs_per_image();
  if (inputs.empty() || static_cast<int64_t>(inputs.size()) > most) {
    fail(ErrorKind::Usage, "{} vision inputs given, but the model takes 1 to {} per prompt ({} image(s) of up to {})",
         inputs.size(), most, v.max_images, v.max_inputs_per_image());
  }
  for (const VisionGrid& g : inputs) {
    if (g.h <= 0 || g.w <= 0 || g.patches() > v.max_patches_per_input()) {
      fail(ErrorKind::Usage, "a vision input of {}x{} patches: the tower takes 1 to {} patches per input", g.h, g.w,
           v.max_patches_per_input());
    }
  }
  Graph g;
  GraphBuilder b(g);
  const TowerOutput tower = build_tower(b, spec, inputs);
  const ValueId out = v.family == VisionFamily::MiniCpmv ? build_resampler(b, spec, inputs, tower)
                                                         : build_glm4v_projector(b, spec, inputs, tower);
  g.mark_output(out);
  return g;
}

}  // namespace ferry
