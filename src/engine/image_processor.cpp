#include "engine/image_processor.h"

#include <filesystem>

#include "core/error.h"
#include "engine/minicpmv_images.h"
#include "formats/json_file.h"
#include "models/vision.h"

namespace ferry {

namespace {

void check_image_count(const VisionConfig& v, size_t images) {
  if (images == 0) fail(ErrorKind::Usage, "no image to process");
  if (static_cast<int64_t>(images) > v.max_images) {
    fail(ErrorKind::Usage, "{} images given, but the model takes at most {} per prompt{}", images, v.max_images,
         v.family == VisionFamily::MiniCpmv ? " (raise it with --max-images)" : "");
  }
}

// GLM-4V (THUDM's processor): each image resized to image_size x image_size (Pillow's bicubic),
// CLIP-normalised, one vision input with the class token and learned positions 0..n.
class Glm4vProcessor final : public ImageProcessor {
 public:
  Glm4vProcessor(const VisionConfig& v, std::string placeholder) : v_(v), placeholder_(std::move(placeholder)) {}

  ProcessedImages process(std::span<const RgbImage> images) const override {
    check_image_count(v_, images.size());
    ProcessedImages out;
    const int side = v_.image_size;
    for (const RgbImage& image : images) {
      const std::vector<float> chw = clip_normalize(resize_bicubic(image, side, side));
      const std::vector<float> rows = chw_patch_rows(chw, 3, side, side, v_.patch);
      out.batch.patches.insert(out.batch.patches.end(), rows.begin(), rows.end());
      out.batch.grids.push_back(VisionGrid{side / v_.patch, side / v_.patch});
      out.image_inputs.push_back(1);
      out.image_cells.push_back({});
    }
    out.batch.positions = learned_positions(v_, out.batch.grids);
    return out;
  }
  const std::string& placeholder() const override {
    if (placeholder_.empty()) {
      fail(ErrorKind::Usage,
           "the tokenizer cannot spell an image span (<|begin_of_image|> id {}, <|end_of_image|> id {}, "
           "<|endoftext|>): give the prompt as --prompt-ids with the span in it",
           v_.boi_id, v_.eoi_id);
    }
    return placeholder_;
  }
  std::string chat_message(std::string_view text, int64_t images) const override {
    std::string s;
    for (int64_t i = 0; i < images; ++i) s += placeholder();
    return s + std::string(text);
  }
  int64_t cache_rows_beyond_ids() const override { return v_.text_tokens() - 3; }
  // The span stays as written: the session expands it.
  std::string image_text(int64_t, CellGrid) const override { return placeholder(); }

 private:
  VisionConfig v_;
  std::string placeholder_;
};

// MiniCPM-V 2.6 (OpenBMB's MiniCPMVImageProcessor): adaptive slicing into a grid of cells plus the
// whole image, 0.5/0.5 normalisation, bucketised NaViT positions; <image_id>/<image>/<slice> text.
class MiniCpmvProcessor final : public ImageProcessor {
 public:
  MiniCpmvProcessor(const VisionConfig& v, MiniCpmvSliceConfig slicing) : v_(v), slicing_(slicing) {}

  ProcessedImages process(std::span<const RgbImage> images) const override {
    check_image_count(v_, images.size());
    ProcessedImages out;
    for (size_t i = 0; i < images.size(); ++i) {
      const MiniCpmvSlicePlan plan = plan_minicpmv_slices(images[i].width, images[i].height, slicing_);
      const std::vector<RgbImage> parts = slice_minicpmv_image(images[i], plan);
      for (const RgbImage& part : parts) {
        VisionInput in = minicpmv_patch_rows(part, slicing_);
        const VisionGrid grid{in.grid_h, in.grid_w};
        if (grid.patches() > v_.max_patches_per_input()) {
          fail(ErrorKind::Usage,
               "image {} ({}x{}) is too elongated: one of its parts would be {}x{} patches, more than the {} a "
               "vision input may have; crop it closer to a square",
               i + 1, images[i].width, images[i].height, grid.h, grid.w, v_.max_patches_per_input());
        }
        const std::vector<int32_t> pos = bucketed_position_ids(grid.h, grid.w, v_.table_side());
        out.batch.positions.insert(out.batch.positions.end(), pos.begin(), pos.end());
        out.batch.patches.insert(out.batch.patches.end(), in.patches.begin(), in.patches.end());
        out.batch.grids.push_back(grid);
      }
      out.image_inputs.push_back(static_cast<int64_t>(parts.size()));
      out.image_cells.push_back({plan.grid.cols, plan.grid.rows});
    }
    return out;
  }
  const std::string& placeholder() const override { return placeholder_; }
  std::string chat_message(std::string_view text, int64_t images) const override {
    // chat() joins the message's items (each image, then the text) with "\n".
    std::string s;
    for (int64_t i = 0; i < images; ++i) s += placeholder_ + "\n";
    return s + std::string(text);
  }
  int64_t cache_rows_beyond_ids() const override { return 0; }
  std::string image_text(int64_t index, CellGrid cells) const override {
    return minicpmv_image_text(static_cast<int>(index), SliceGrid{cells.cols, cells.rows}, v_.query_num);
  }

 private:
  VisionConfig v_;
  MiniCpmvSliceConfig slicing_;
  std::string placeholder_{kMiniCpmvImagePlaceholder};
};

MiniCpmvSliceConfig minicpmv_slicing(const Checkpoint& ckpt) {
  const VisionConfig& v = ckpt.config().vision;
  MiniCpmvSliceConfig c;
  c.scale_resolution = v.scale_resolution;
  c.patch = v.patch;
  c.max_slice_nums = std::max(1, v.max_slices);
  c.slice_mode = v.max_slices > 0;
  // The normalisation constants live in preprocessor_config.json (0.5 / 0.5 in 2.6).
  const std::filesystem::path pre = std::filesystem::path(ckpt.directory) / "preprocessor_config.json";
  std::error_code ec;
  if (!ckpt.directory.empty() && std::filesystem::exists(pre, ec)) {
    const nlohmann::json j = read_json_file(pre.string());
    const auto triple = [&](const char* key, std::array<float, 3>& into) {
      const auto it = j.find(key);
      if (it == j.end()) return;
      if (!it->is_array() || it->size() != 3)
        fail(ErrorKind::Config, "{}: {} must be a list of 3 numbers", pre.string(), key);
      for (size_t k = 0; k < 3; ++k) {
        if (!(*it)[k].is_number()) fail(ErrorKind::Config, "{}: {} must be a list of 3 numbers", pre.string(), key);
        into[k] = (*it)[k].get<float>();
      }
    };
    triple("norm_mean", c.mean);
    triple("norm_std", c.std);
    for (float s : c.std) {
      if (!(s > 0.0f)) fail(ErrorKind::Config, "{}: norm_std must be positive", pre.string());
    }
  }
  return c;
}

}  // namespace

std::string ImageProcessor::expand_prompt(std::string_view prompt, const ProcessedImages& images) const {
  const std::string& marker = placeholder();
  std::string out;
  size_t at = 0;
  size_t found = 0;
  for (size_t next; (next = prompt.find(marker, at)) != std::string_view::npos; at = next + marker.size()) {
    out.append(prompt.substr(at, next - at));
    if (found < images.image_cells.size()) out += image_text(static_cast<int64_t>(found), images.image_cells[found]);
    ++found;
  }
  if (found != images.image_cells.size()) {
    fail(ErrorKind::Usage,
         "the prompt holds {} image placeholder(s) but {} image(s) were given; write {} in the prompt where each "
         "image goes (or use --chat, which places them)",
         found, images.image_cells.size(), marker);
  }
  out.append(prompt.substr(at));
  return out;
}

std::vector<float> chw_patch_rows(std::span<const float> chw, int channels, int height, int width, int patch) {
  if (channels <= 0 || patch <= 0 || height % patch != 0 || width % patch != 0 || height <= 0 || width <= 0 ||
      chw.size() != static_cast<size_t>(channels) * static_cast<size_t>(height) * static_cast<size_t>(width)) {
    fail(ErrorKind::Usage, "a {}x{}x{} image of {} values cannot be cut into {}-pixel patches", channels, height, width,
         chw.size(), patch);
  }
  const size_t plane = static_cast<size_t>(height) * static_cast<size_t>(width);
  std::vector<float> rows;
  rows.reserve(chw.size());
  for (int py = 0; py < height / patch; ++py) {
    for (int px = 0; px < width / patch; ++px) {
      for (int c = 0; c < channels; ++c) {
        for (int ky = 0; ky < patch; ++ky) {
          const size_t row = static_cast<size_t>(c) * plane +
                             static_cast<size_t>(py * patch + ky) * static_cast<size_t>(width) +
                             static_cast<size_t>(px * patch);
          rows.insert(rows.end(), chw.begin() + static_cast<std::ptrdiff_t>(row),
                      chw.begin() + static_cast<std::ptrdiff_t>(row) + patch);
        }
      }
    }
  }
  return rows;
}

ProcessedImages ImageProcessor::join(std::span<const ProcessedImages> parts) {
  ProcessedImages out;
  for (const ProcessedImages& p : parts) {
    const VisionBatch& b = p.batch;
    out.batch.grids.insert(out.batch.grids.end(), b.grids.begin(), b.grids.end());
    out.batch.patches.insert(out.batch.patches.end(), b.patches.begin(), b.patches.end());
    out.batch.positions.insert(out.batch.positions.end(), b.positions.begin(), b.positions.end());
    out.image_inputs.insert(out.image_inputs.end(), p.image_inputs.begin(), p.image_inputs.end());
    out.image_cells.insert(out.image_cells.end(), p.image_cells.begin(), p.image_cells.end());
  }
  return out;
}

std::unique_ptr<ImageProcessor> make_image_processor(const Checkpoint& ckpt, const Tokenizer* tokenizer) {
  const VisionConfig& v = ckpt.config().vision;
  switch (v.family) {
    case VisionFamily::Glm4v: {
      // The original tokenizer puts <|endoftext|> between the two markers; any single token would do.
      std::string span;
      const int32_t placeholder = tokenizer ? tokenizer->find_token("<|endoftext|>") : -1;
      if (tokenizer && v.boi_id >= 0 && v.eoi_id >= 0 && v.boi_id < tokenizer->n_vocab() &&
          v.eoi_id < tokenizer->n_vocab() && placeholder >= 0) {
        span =
            tokenizer->token_piece(v.boi_id) + tokenizer->token_piece(placeholder) + tokenizer->token_piece(v.eoi_id);
      }
      return std::make_unique<Glm4vProcessor>(v, std::move(span));
    }
    case VisionFamily::MiniCpmv:
      return std::make_unique<MiniCpmvProcessor>(v, minicpmv_slicing(ckpt));
    case VisionFamily::None:
      break;
  }
  fail(ErrorKind::Usage, "{}: this model has no vision tower, it takes no images", ckpt.path);
}

}  // namespace ferry
