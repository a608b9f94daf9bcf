// Images given on the command line (`generate --image`, `chat --image` and its /image command):
// the picture decoded, preprocessed as GLM-4V's original code does, and run through the vision
// tower; and the text span that marks where an image goes in a prompt.
#pragma once

#include <string>
#include <vector>

#include "engine/image.h"
#include "engine/session.h"
#include "text/tokenizer.h"

namespace ferry::cli {

// Resizes, normalises and encodes `image` with the session's vision tower: the image embeddings for
// Session::attach_images. `name` names the image in errors. Error(Usage) for a model without one.
std::vector<float> encode_image(Session& session, const ModelConfig& config, const RgbImage& image,
                                const std::string& name);

// "<|begin_of_image|><|endoftext|><|end_of_image|>" as the model's tokenizer spells it: the span
// an image takes in a prompt (begin-of-image, one placeholder, end-of-image). Error(Usage) when the
// tokenizer lacks one of those tokens.
std::string image_span_text(const Tokenizer& tokenizer, const VisionConfig& vision);

}  // namespace ferry::cli
