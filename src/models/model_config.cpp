#include "models/model_config.h"

#include <cmath>

#include "core/error.h"

namespace ferry {

const char* family_name(Family family) {
  switch (family) {
    case Family::Llama:
      return "llama";
    case Family::Qwen2:
      return "qwen2";
    case Family::Glm:
      return "glm";
    case Family::Glm4:
      return "glm4";
    case Family::ChatGlm:
      return "chatglm";
  }
  return "unknown";
}

const char* vision_family_name(VisionFamily family) {
  switch (family) {
    case VisionFamily::None:
      return "none";
    case VisionFamily::Glm4v:
      return "glm4v";
    case VisionFamily::MiniCpmv:
      return "minicpmv";
  }
  return "unknown";
}

int64_t VisionConfig::max_patches_per_input() const {
  if (family != VisionFamily::MiniCpmv) return patches();
  // A MiniCPM-V input holds about scale_resolution^2 pixels: find_best_resize keeps the area near
  // S^2 and rounds each side to whole patches (at most half a patch up each way).
  const int64_t side = scale_resolution / patch + 1;
  return side * side;
}

int64_t VisionConfig::text_tokens() const {
  if (family == VisionFamily::MiniCpmv) return static_cast<int64_t>(query_num) * max_inputs_per_image();
  return image_size / patch / 2 * (image_size / patch / 2) + 2;
}

namespace {

void vision_validate(const VisionConfig& v, const std::string& source) {
  const auto positive = [&](const char* what, int x) {
    if (x <= 0) fail(ErrorKind::Config, "{}: vision_config {} must be positive, got {}", source, what, x);
  };
  positive("num_hidden_layers", v.n_layer);
  positive("hidden_size", v.hidden);
  positive("num_heads", v.n_head);
  positive("intermediate_size", v.ffn);
  positive("patch_size", v.patch);
  positive("image_size", v.image_size);
  positive("in_channels", v.in_channels);
  if (v.hidden % v.n_head != 0) {
    fail(ErrorKind::Config, "{}: vision_config hidden_size {} is not divisible by num_heads {}", source, v.hidden,
         v.n_head);
  }
  if (v.family == VisionFamily::MiniCpmv) {
    positive("query_num", v.query_num);
    positive("slice_config scale_resolution", v.scale_resolution);
    if (v.image_size % v.patch != 0 || v.image_size > 65536 || v.n_positions != v.patches()) {
      fail(ErrorKind::Config,
           "{}: vision_config image_size {} must be a multiple of the patch size {} (at most 65536), with one "
           "position per patch of it ({} rows, the table has {})",
           source, v.image_size, v.patch, v.patches(), v.n_positions);
    }
    if (v.scale_resolution % v.patch != 0 || v.scale_resolution > 65536 || v.max_slices < 0 || v.max_slices > 64) {
      fail(ErrorKind::Config,
           "{}: slice_config scale_resolution {} must be a multiple of the patch size {} (at most 65536) and "
           "max_slice_nums {} within 0..64",
           source, v.scale_resolution, v.patch, v.max_slices);
    }
    return;
  }
  if (v.image_size % (2 * v.patch) != 0 || v.image_size > 65536) {
    fail(ErrorKind::Config,
         "{}: vision_config image_size {} must be a multiple of twice the patch size {} (the 2x2 downsample), at "
         "most 65536",
         source, v.image_size, v.patch);
  }
  if (v.n_positions != v.patches() + 1) {
    fail(ErrorKind::Config,
         "{}: vision_config num_positions is {}, but a {}px image in {}px patches needs {} (+1 class)", source,
         v.n_positions, v.image_size, v.patch, v.patches() + 1);
  }
}

}  // namespace

void ModelConfig::validate(const std::string& source) const {
  const auto positive = [&](const char* what, int v) {
    if (v <= 0) fail(ErrorKind::Config, "{}: {} must be positive, got {}", source, what, v);
  };
  positive("number of layers", n_layer);
  positive("hidden size", hidden);
  positive("number of attention heads", n_head);
  positive("number of key/value heads", n_kv_head);
  positive("head dimension", head_dim);
  positive("feed-forward size", ffn);
  positive("vocabulary size", vocab);
  if (n_head % n_kv_head != 0) {
    fail(ErrorKind::Config, "{}: {} attention heads cannot be grouped over {} key/value heads (must divide)", source,
         n_head, n_kv_head);
  }
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0) {
    fail(ErrorKind::Config, "{}: rotary dimension {} must be even and within the head dimension {}", source, n_rot,
         head_dim);
  }
  const auto finite_positive = [&](const char* what, float v) {
    if (!(std::isfinite(v) && v > 0.0f)) {
      fail(ErrorKind::Config, "{}: {} must be a finite positive number, got {}", source, what, v);
    }
  };
  finite_positive("the RoPE base (rope_theta)", rope_theta);
  finite_positive("the RoPE frequency scale (1 / rope_scaling factor)", rope_freq_scale);
  finite_positive("the norm epsilon", norm_eps);
  if (max_context <= 0) fail(ErrorKind::Config, "{}: the model context must be positive, got {}", source, max_context);
  if (vision.present()) vision_validate(vision, source);
}

}  // namespace ferry
