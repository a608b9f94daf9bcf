// Images given on the command line (`generate --image`, `chat --image` and its /image command):
// the picture decoded, preprocessed as GLM-4V's original code does, and run through the vision
// tower; and the text span that marks where an image goes in a prompt.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/image.h"
#include "engine/session.h"
#include "text/tokenizer.h"

namespace ferry::cli {

// Resizes, normalises and encodes `images` (in prompt order) with the session's vision tower in one
// step: the image embeddings for Session::attach_images, left on the projector's device. `name`
// names them in errors. Error(Usage) for a model without a tower or more images than it takes.
Tensor encode_images(Session& session, const ModelConfig& config, std::span<const RgbImage> images,
                     const std::string& name);

// "<|begin_of_image|><|endoftext|><|end_of_image|>" as the model's tokenizer spells it: the span
// an image takes in a prompt (begin-of-image, one placeholder, end-of-image). Error(Usage) when the
// tokenizer lacks one of those tokens.
std::string image_span_text(const Tokenizer& tokenizer, const VisionConfig& vision);

}  // namespace ferry::cli
