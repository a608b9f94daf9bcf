// GLM-4V's prompt expansion: each begin-of-image .. end-of-image span of the ids (boi, one
// placeholder, eoi) becomes the image's embeddings [boi, patches, eoi], with the positions the
// original ChatGLMModel.forward gives them: the unexpanded ids' positions, every patch at boi's
// position + 1, eoi and the text after it unshifted. Decoding continues from the unexpanded length.
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

// `images` images, in order of their spans; `first_position` is the position of ids[0] (the
// session's next position). Throws Error(Usage) when the spans do not match the images: a boi
// without its eoi, a span that is not exactly boi, placeholder, eoi, or more/fewer spans than images.
ImagePrompt expand_image_prompt(const VisionConfig& vision, std::span<const int32_t> ids, int64_t images,
                                int64_t first_position = 0);

}  // namespace ferry
