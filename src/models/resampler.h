// MiniCPM-V's perceiver resampler (OpenBMB resampler.py): per vision input, query_num learned
// queries attend once to the tower's patches (keys carry a 2D sin-cos position, values do not),
// then a LayerNorm and a right multiplication by `proj` map them into the LLM's width. Knows no
// devices.
#pragma once

#include <span>
#include <vector>

#include "models/vision_tower.h"

namespace ferry {

// Declares the resampler's parameters in module projector_module().
void add_resampler_params(ModelSpec& spec, SpecCollector& c);

// From the tower's output [sum patches, hidden_v] to [inputs * query_num, hidden]: query_num rows
// per vision input, in order. Reads the graph input "resampler_positions" [sum patches, hidden] f32
// (resampler_positions()).
ValueId build_resampler(GraphBuilder& b, const ModelSpec& spec, std::span<const VisionGrid> inputs,
                        const TowerOutput& tower);

// The resampler's 2D sin-cos position of every patch of `inputs`, [sum patches, width] row-major,
// as the original computes it in float32 numpy: for the patch in row y, column x, the first half
// encodes x and the second half y, each half [sin(p w_0..w_{d-1}), cos(p w_0..w_{d-1})] with
// d = width / 4 and w_i = 10000^(-i/d). Error(Usage) for a width that is not a multiple of 4.
std::vector<float> resampler_positions(int64_t width, std::span<const VisionGrid> inputs);

}  // namespace ferry
