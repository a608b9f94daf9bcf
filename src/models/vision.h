// GLM-4V's EVA2-CLIP vision tower and its projector as a graph (THUDM visual.py): patch embedding
// (14x14 conv as patchify + matmul), class token, learned positions, post-sublayer LayerNorm
// transformer layers with non-causal attention, the class token dropped, a 2x2 stride-2 conv,
// the GLU projector, boi/eoi, and the division by the scaling factor. Ops are tagged with the
// modules "vision" and "projector"; the graph knows no devices.
#pragma once

#include <cstdint>

#include "graph/graph.h"
#include "models/decoder.h"

namespace ferry {

// Graph inputs:
//   "pixels"           [images, in_channels, image_size, image_size] f32 (normalised as CLIP does)
//   "vision_positions" [images * (patches + 1)] i32: row (i, l) holds l, the learned position of
//                      token l of image i (the class token is l = 0). vision_positions() fills it.
// Output: "image_embeds" [images * text_tokens, hidden] f32: per image [boi, patches, eoi].
// Throws Error(Usage) when the model has no vision tower or `images` is outside [1, max_images].
Graph build_vision_graph(const ModelSpec& spec, int64_t images);

// The "vision_positions" input for `images` images.
std::vector<int32_t> vision_positions(const VisionConfig& vision, int64_t images);

}  // namespace ferry
