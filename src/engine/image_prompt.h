// Where a prompt's image embeddings go, per vision family.
//  - GLM-4V: each begin-of-image .. end-of-image span of the ids (boi, one placeholder, eoi) becomes
//    the image's embeddings [boi, patches, eoi], with the positions the original
//    ChatGLMModel.forward gives them: the unexpanded ids' positions, every patch at boi's position
//    + 1, eoi and the text after it unshifted. Decoding continues from the unexpanded length.
//  - MiniCPM-V: the prompt already holds query_num <unk> ids between each <image> (or <slice>) and
//    its </image> (</slice>); those ids take the vision inputs' rows in order, at their ordinary
//    positions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/model_config.h"

namespace ferry {

struct ImagePrompt {
  std::vector<int32_t> tokens;     // expanded; image rows keep a valid id (unused by the model)
  std::vector<int32_t> positions;  // per expanded token
  std::vector<int32_t> image_row;  // -1 for text, else the row of the image embeddings it takes
  int64_t next_position = 0;       // where decoding continues (first_position + unexpanded length)
};

// `inputs` vision inputs (GLM-4V: images), in order of their spans; `first_position` is the
// position of ids[0] (the session's next position). Throws Error(Usage) when the spans do not match
// the inputs: an end id without its start, a span of the wrong layout or length, or more/fewer
// spans than inputs.
ImagePrompt expand_image_prompt(const VisionConfig& vision, std::span<const int32_t> ids, int64_t inputs,
                                int64_t first_position = 0);

// Embedding rows per vision input (GLM-4V: text_tokens(); MiniCPM-V: query_num).
int64_t image_rows_per_input(const VisionConfig& vision);

}  // namespace ferry
