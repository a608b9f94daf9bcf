#include "engine/image_prompt.h"

#include "core/error.h"
#include "engine/minicpmv_images.h"

namespace ferry {

namespace {

ImagePrompt expand_minicpmv(const VisionConfig& v, std::span<const int32_t> ids, int64_t inputs,
                            int64_t first_position) {
  const MiniCpmvTokenIds marks{v.boi_id, v.eoi_id, v.slice_start_id, v.slice_end_id, v.unk_id};
  if (v.boi_id < 0 || v.eoi_id < 0 || v.slice_start_id < 0 || v.slice_end_id < 0 || v.unk_id < 0) {
    fail(ErrorKind::Usage, "the model's image token ids are unknown (<image>, </image>, <slice>, </slice>, <unk>)");
  }
  const std::vector<ImageBound> bounds = minicpmv_image_bounds(ids, marks, v.query_num);
  if (static_cast<int64_t>(bounds.size()) != inputs) {
    fail(ErrorKind::Usage, "{} vision input(s) given but the prompt has {} image/slice span(s)", inputs, bounds.size());
  }
  ImagePrompt out;
  out.tokens.assign(ids.begin(), ids.end());
  out.image_row.assign(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    out.positions.push_back(static_cast<int32_t>(first_position + static_cast<int64_t>(i)));
  }
  int32_t row = 0;
  for (const ImageBound& b : bounds) {
    for (int64_t k = b.start; k < b.end; ++k) out.image_row[static_cast<size_t>(k)] = row++;
  }
  out.next_position = first_position + static_cast<int64_t>(ids.size());
  return out;
}

}  // namespace

int64_t image_rows_per_input(const VisionConfig& vision) {
  return vision.family == VisionFamily::MiniCpmv ? vision.query_num : vision.text_tokens();
}

ImagePrompt expand_image_prompt(const VisionConfig& vision, std::span<const int32_t> ids, int64_t images,
                                int64_t first_position) {
  if (!vision.present()) fail(ErrorKind::Usage, "this model has no vision tower: it takes no images");
  if (vision.family == VisionFamily::MiniCpmv) return expand_minicpmv(vision, ids, images, first_position);
  const int64_t patches = vision.text_tokens() - 2;
  ImagePrompt out;
  int64_t image = 0;
  const auto pos = [&](size_t i) { return static_cast<int32_t>(first_position + static_cast<int64_t>(i)); };
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == vision.eoi_id) {
      fail(ErrorKind::Usage, "token {} is an end-of-image id ({}) without a begin-of-image before it", i,
           vision.eoi_id);
    }
    if (ids[i] != vision.boi_id) {
      out.tokens.push_back(ids[i]);
      out.positions.push_back(pos(i));
      out.image_row.push_back(-1);
      continue;
    }
    if (i + 2 >= ids.size() || ids[i + 2] != vision.eoi_id || ids[i + 1] == vision.boi_id) {
      fail(ErrorKind::Usage,
           "the begin-of-image id ({}) at token {} must be followed by one placeholder and the end-of-image id ({}), "
           "as GLM-4V's chat format writes <|begin_of_image|><|endoftext|><|end_of_image|>",
           vision.boi_id, i, vision.eoi_id);
    }
    if (image == images) {
      fail(ErrorKind::Usage, "the prompt holds more image spans than the {} image(s) given", images);
    }
    // [boi, patches..., eoi] of this image: rows image * text_tokens + k.
    const auto first_row = static_cast<int32_t>(image * vision.text_tokens());
    out.tokens.push_back(ids[i]);
    out.positions.push_back(pos(i));
    out.image_row.push_back(first_row);
    for (int64_t k = 0; k < patches; ++k) {
      out.tokens.push_back(ids[i + 1]);
      out.positions.push_back(pos(i + 1));
      out.image_row.push_back(first_row + 1 + static_cast<int32_t>(k));
    }
    out.tokens.push_back(ids[i + 2]);
    out.positions.push_back(pos(i + 2));
    out.image_row.push_back(first_row + static_cast<int32_t>(patches) + 1);
    ++image;
    i += 2;
  }
  if (image != images) {
    fail(ErrorKind::Usage,
         "{} image(s) given but the prompt has {} begin-of-image span(s); each image needs "
         "<|begin_of_image|><|endoftext|><|end_of_image|> (ids {}, placeholder, {}) in the prompt",
         images, image, vision.boi_id, vision.eoi_id);
  }
  out.next_position = first_position + static_cast<int64_t>(ids.size());
  return out;
}

}  // namespace ferry
