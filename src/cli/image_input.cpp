#include "cli/image_input.h"

#include <algorithm>

#include "core/error.h"

namespace ferry::cli {

Tensor encode_images(Session& session, const ModelConfig& config, std::span<const RgbImage> images,
                     const std::string& name) {
  const VisionConfig& v = config.vision;
  if (!v.present()) fail(ErrorKind::Usage, "{}: this model has no vision tower, it takes no images", name);
  const auto n = static_cast<int64_t>(images.size());
  Tensor t = Tensor::host(DType::F32, Shape{n, v.in_channels, v.image_size, v.image_size}, name);
  float* at = t.data_as<float>();
  for (const RgbImage& image : images) {
    const std::vector<float> pixels = clip_normalize(resize_bicubic(image, v.image_size, v.image_size));
    at = std::copy(pixels.begin(), pixels.end(), at);
  }
  return session.encode_images_on_device(t);
}

std::string image_span_text(const Tokenizer& tokenizer, const VisionConfig& vision) {
  // The original tokenizer puts <|endoftext|> between the two markers; any single token would do.
  const int32_t placeholder = tokenizer.find_token("<|endoftext|>");
  if (vision.boi_id < 0 || vision.eoi_id < 0 || vision.boi_id >= tokenizer.n_vocab() ||
      vision.eoi_id >= tokenizer.n_vocab() || placeholder < 0) {
    fail(ErrorKind::Usage,
         "the tokenizer cannot spell an image span (begin-of-image id {}, end-of-image id {}, <|endoftext|> {}): "
         "give the prompt as --prompt-ids with the span in it",
         vision.boi_id, vision.eoi_id, placeholder < 0 ? "missing" : "present");
  }
  return tokenizer.token_piece(vision.boi_id) + tokenizer.token_piece(placeholder) +
         tokenizer.token_piece(vision.eoi_id);
}

}  // namespace ferry::cli
