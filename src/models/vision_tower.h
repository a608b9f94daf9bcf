// The vision tower every vision-language family shares: patch embedding, optional class token,
// learned positions (plain or NaViT-bucketised), transformer layers with non-causal attention per
// vision input, optional final norm. EVA2-CLIP (GLM-4V) and SigLIP NaViT (MiniCPM-V) are two
// configurations of it (VisionConfig's flags) and two rows of tensor names. Knows no devices.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "models/decoder.h"

namespace ferry {

class SpecCollector;

// The patch grid of one vision input (an image, or one slice of it): grid_h x grid_w patches.
struct VisionGrid {
  int64_t h = 0;
  int64_t w = 0;
  int64_t patches() const { return h * w; }
  bool operator==(const VisionGrid&) const = default;
};

// Declares the tower's parameters in module vision_module().
void add_tower_params(ModelSpec& spec, SpecCollector& c);

struct TowerOutput {
  ValueId tokens = kNoValue;     // [sum tokens, hidden] f32: the tokens of each input in order
  ValueId positions = kNoValue;  // the "vision_positions" input
};

// The tower over `inputs` (in order). Graph inputs it reads: "patches" [sum patches, C*p*p] f32 —
// each input's patches row-major over its grid, columns (channel, ky, kx) — and "vision_positions"
// [sum tokens] i32, the row of the position table for each token (class tokens included, first in
// each input).
TowerOutput build_tower(GraphBuilder& b, const ModelSpec& spec, std::span<const VisionGrid> inputs);

// Tokens the tower gives a vision input: its patches, plus the class token where there is one.
int64_t tower_tokens(const VisionConfig& v, const VisionGrid& grid);

// A vision parameter by the name it was declared under (Error(Internal) when it was not).
ValueId vision_weight(GraphBuilder& b, const ModelSpec& spec, const std::string& name);

}  // namespace ferry
