// The image side of a vision-language model as its users meet it: an image processor per family
// turns decoded pictures into the vision tower's inputs (resize, slicing, normalisation, patch
// order, position ids) and says how a prompt makes room for them. The CLI and the tests go through
// this seam; only the processors know a family's rules.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/image.h"
#include "engine/session.h"
#include "text/tokenizer.h"

namespace ferry {

// The cells an image was cut into, besides the whole image (0 x 0: not cut).
struct CellGrid {
  int cols = 0;
  int rows = 0;
};

struct ProcessedImages {
  VisionBatch batch;                  // every vision input of every image, in order
  std::vector<int64_t> image_inputs;  // vision inputs per image (GLM-4V: 1; MiniCPM-V: 1 + its cells)
  std::vector<CellGrid> image_cells;  // per image
  int64_t images() const { return static_cast<int64_t>(image_cells.size()); }
  int64_t inputs() const { return static_cast<int64_t>(batch.grids.size()); }
};

class ImageProcessor {
 public:
  virtual ~ImageProcessor() = default;
  // The tower's inputs for `images`, in order. Error(Usage) for more images than the model takes
  // per prompt, or an image the model cannot take (too small or too elongated to slice).
  virtual ProcessedImages process(std::span<const RgbImage> images) const = 0;
  // What a user writes in a prompt where an image goes ("(<image>./</image>)" for MiniCPM-V,
  // GLM-4V's begin-of-image span).
  virtual const std::string& placeholder() const = 0;
  // `prompt` with its placeholders replaced, in order, by the processed images' text (image i of
  // the prompt numbered i: a conversation's pictures joined in order are numbered through it).
  // Error(Usage) when the number of placeholders is not the number of images, saying both and
  // what a placeholder looks like.
  std::string expand_prompt(std::string_view prompt, const ProcessedImages& images) const;
  // What stands for the `index`-th image of a prompt, cut into `cells`, in the expanded text.
  virtual std::string image_text(int64_t index, CellGrid cells) const = 0;
  // The user message of a chat turn with `images` pictures and `text`, as the original chat()
  // builds it (GLM-4V: the image span, then the text; MiniCPM-V: one placeholder per line, then the text).
  virtual std::string chat_message(std::string_view text, int64_t images) const = 0;
  // Cache rows an image's prompt span takes beyond its ids (GLM-4V's session expands its three-id
  // span into text_tokens rows; MiniCPM-V's prompt already holds one id per row).
  virtual int64_t cache_rows_beyond_ids() const = 0;
  // Concatenates processed images (a conversation's pictures, processed as they come) in order.
  static ProcessedImages join(std::span<const ProcessedImages> parts);
};

// The processor of the checkpoint's vision family (its tokenizer spells GLM-4V's markers; without
// one, GLM-4V's placeholder() fails, saying to give the ids). Error(Usage) for a model without a
// vision tower.
std::unique_ptr<ImageProcessor> make_image_processor(const Checkpoint& ckpt, const Tokenizer* tokenizer);

// Rows [n, channels * patch * patch] of a [channels, height, width] image (CHW), patches
// row-major, columns (channel, ky, kx) as a conv weight [out, channels, patch, patch] has them.
std::vector<float> chw_patch_rows(std::span<const float> chw, int channels, int height, int width, int patch);

}  // namespace ferry
