// A vision-language model's image side as one graph: the shared tower (models/vision_tower.h) and
// the family's projector (GLM-4V's conv + GLU, MiniCPM-V's resampler), over one or more vision
// inputs (images, or the slices of one). Ops are tagged with the modules "vision" and
// "projector"; the graph knows no devices.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "graph/graph.h"
#include "models/decoder.h"
#include "models/vision_tower.h"

namespace ferry {

class SpecCollector;

// Declares vision_module() and projector_module() for config.vision's family.
void add_vision_modules(ModelSpec& spec, SpecCollector& c);

// Graph inputs: those of build_tower ("patches", "vision_positions") and, for MiniCPM-V,
// "resampler_positions" (resampler_positions()). Output: "image_embeds" [rows, hidden] f32, the
// rows of each input in order (vision_rows() each). Throws Error(Usage) when the model has no
// vision tower, for no inputs, more than the model takes per prompt, or a grid the family cannot take.
Graph build_vision_graph(const ModelSpec& spec, std::span<const VisionGrid> inputs);

// Embedding rows one vision input gives the text (GLM-4V: boi + merged patches + eoi; MiniCPM-V:
// query_num).
int64_t vision_rows(const VisionConfig& v, const VisionGrid& grid);

// The vision inputs of the most images a prompt may carry, each at its largest: what the planner
// budgets (GLM-4V: max_images fixed-size images; MiniCPM-V: per image the whole image and
// max_slices cells, each of the most patches an input may have).
std::vector<VisionGrid> worst_case_vision_inputs(const VisionConfig& v);

// The "vision_positions" of learned, unbucketed positions (EVA2-CLIP): token l of each input
// (its class token first) takes row l.
std::vector<int32_t> learned_positions(const VisionConfig& v, std::span<const VisionGrid> inputs);

}  // namespace ferry
