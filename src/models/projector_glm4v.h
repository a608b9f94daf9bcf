// GLM-4V's projector (THUDM visual.py): drops the class token, a 2x2 stride-2 conv over the patch
// grid, the GLU (linear, LayerNorm, GELU, gate/up, down), boi/eoi around each image, and the
// division by the scaling factor. Knows no devices.
#pragma once

#include <span>

#include "models/vision_tower.h"

namespace ferry {

// Declares the projector's parameters in module projector_module().
void add_glm4v_projector_params(ModelSpec& spec, SpecCollector& c);

// From the tower's output [images * (patches + 1), hidden_v] to the image embeddings
// [images * text_tokens, hidden]: per image [boi, 2x2-merged patches, eoi].
ValueId build_glm4v_projector(GraphBuilder& b, const ModelSpec& spec, std::span<const VisionGrid> inputs,
                              const TowerOutput& tower);

}  // namespace ferry
