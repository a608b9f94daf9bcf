#include "models/model_config.h"

#include <algorithm>
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
    case Family::Qwen3:
      return "qwen3";
  }
  return "unknown";
}

const char* rope_scaling_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::None:
      return "none";
    case RopeScalingType::Linear:
      return "linear";
    case RopeScalingType::Llama3:
      return "llama3";
    case RopeScalingType::Yarn:
      return "yarn";
  }
  return "unknown";
}

namespace {

constexpr double kPi = 3.14159265358979323846;

// theta^(-2i / n_rot): pair i's unscaled frequency.
double base_frequency(int n_rot, double theta, int i) {
  return std::pow(theta, -2.0 * i / static_cast<double>(n_rot));
}

}  // namespace

std::vector<double> llama3_rope_divisors(int n_rot, double theta, const RopeScaling& s) {
  const double orig = static_cast<double>(s.original_context);
  const double low_freq_wavelength = orig / s.low_freq_factor;    // longer: divided by factor
  const double high_freq_wavelength = orig / s.high_freq_factor;  // shorter: kept
  std::vector<double> d;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double wavelength = 2.0 * kPi / base_frequency(n_rot, theta, i);
    if (wavelength < high_freq_wavelength) {
      d.push_back(1.0);
    } else if (wavelength > low_freq_wavelength) {
      d.push_back(s.factor);
    } else {
      const double smooth = (orig / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      d.push_back(1.0 / ((1.0 - smooth) / s.factor + smooth));
    }
  }
  return d;
}

std::vector<double> yarn_rope_divisors(int n_rot, double theta, const RopeScaling& s) {
  // The pair index at which `rotations` full turns fit in the original context.
  const auto correction_dim = [&](double rotations) {
    return n_rot * std::log(s.original_context / (rotations * 2.0 * kPi)) / (2.0 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast);
  double high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(n_rot - 1));
  if (low == high) high += 0.001;  // as transformers: no division by zero
  std::vector<double> d;
  for (int i = 0; i < n_rot / 2; ++i) {
    // ramp 0: the original frequency (extrapolation), 1: frequency / factor (interpolation).
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    d.push_back(1.0 / (ramp / s.factor + (1.0 - ramp)));
  }
  return d;
}

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

RopeParams rope_params(const ModelConfig& c) {
  RopeParams p{c.head_dim, c.n_rot, c.rope_style, c.rope_theta, c.rope_freq_scale};
  std::vector<double> divisors(static_cast<size_t>(c.n_rot / 2), 1.0);
  bool divided = false;
  const auto apply = [&](const auto& per_pair) {
    for (size_t i = 0; i < divisors.size() && i < per_pair.size(); ++i) divisors[i] *= static_cast<double>(per_pair[i]);
    divided = true;
  };
  if (!c.rope_freq_factors.empty()) apply(c.rope_freq_factors);
  const double theta = static_cast<double>(c.rope_theta);
  switch (c.rope_scaling.type) {
    case RopeScalingType::Llama3:
      apply(llama3_rope_divisors(c.n_rot, theta, c.rope_scaling));
      break;
    case RopeScalingType::Yarn:
      apply(yarn_rope_divisors(c.n_rot, theta, c.rope_scaling));
      p.attn_factor = static_cast<float>(c.rope_scaling.attention_factor);
      break;
    case RopeScalingType::None:
    case RopeScalingType::Linear:
      break;
  }
  if (divided) p.freq_divisors = std::move(divisors);
  return p;
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
  if (v.n_layer > 1024 || v.hidden > (1 << 17) || v.ffn > (1 << 20) || v.in_channels > 64) {
    fail(ErrorKind::Config,
         "{}: vision_config of {} layers, hidden {}, intermediate {}, {} channels is implausible (ferry accepts up to "
         "1024 layers, hidden 131072, intermediate 1048576, 64 channels); check the config",
         source, v.n_layer, v.hidden, v.ffn, v.in_channels);
  }
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

void rope_validate(const ModelConfig& c, const std::string& source) {
  if (!c.rope_freq_factors.empty() && c.rope_freq_factors.size() != static_cast<size_t>(c.n_rot / 2)) {
    fail(ErrorKind::Config, "{}: {} stored RoPE frequency factors (rope_freqs) for {} rotated dims; want {}", source,
         c.rope_freq_factors.size(), c.n_rot, c.n_rot / 2);
  }
  for (size_t i = 0; i < c.rope_freq_factors.size(); ++i) {
    if (!(std::isfinite(c.rope_freq_factors[i]) && c.rope_freq_factors[i] > 0.0f)) {
      fail(ErrorKind::Config, "{}: RoPE frequency factor {} (rope_freqs) is {}; each must be finite and positive",
           source, i, c.rope_freq_factors[i]);
    }
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScalingType::Llama3 && s.type != RopeScalingType::Yarn) return;
  const char* type = rope_scaling_name(s.type);
  const auto positive = [&](const char* what, double v) {
    if (!(std::isfinite(v) && v > 0.0)) {
      fail(ErrorKind::Config, "{}: {} RoPE scaling: {} must be a finite positive number, got {}", source, type, what,
           v);
    }
  };
  positive("factor", s.factor);
  positive("original_max_position_embeddings", s.original_context);
  if (s.type == RopeScalingType::Llama3) {
    positive("low_freq_factor", s.low_freq_factor);
    positive("high_freq_factor", s.high_freq_factor);
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      fail(ErrorKind::Config, "{}: llama3 RoPE scaling: high_freq_factor {} must be greater than low_freq_factor {}",
           source, s.high_freq_factor, s.low_freq_factor);
    }
  } else {
    positive("beta_fast", s.beta_fast);
    positive("beta_slow", s.beta_slow);
    positive("the attention factor", s.attention_factor);
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
  // Sizes far beyond any published model are a broken or hostile config: refused before planning
  // or reading anything spends minutes and gigabytes on them (the largest models have ~130 layers,
  // hidden 16384, ffn 53248, vocabularies of 256K).
  const auto plausible = [&](const char* what, int v, int most) {
    if (v > most) {
      fail(ErrorKind::Config, "{}: {} = {} is implausible (ferry accepts up to {}); check the config", source, what, v,
           most);
    }
  };
  plausible("the number of layers", n_layer, 1024);
  plausible("the hidden size", hidden, 1 << 17);
  plausible("the number of attention heads", n_head, 4096);
  plausible("the head dimension", head_dim, 1 << 14);
  plausible("the feed-forward size", ffn, 1 << 20);
  plausible("the vocabulary size", vocab, 1 << 24);
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
  rope_validate(*this, source);
  finite_positive("the norm epsilon", norm_eps);
  if (max_context <= 0) fail(ErrorKind::Config, "{}: the model context must be positive, got {}", source, max_context);
  if (vision.present()) vision_validate(vision, source);
}

}  // namespace ferry
