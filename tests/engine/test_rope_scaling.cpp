// RoPE scaling (llama3, yarn; linear elsewhere), Qwen3 and Mistral configs: the frequencies against
// direct transcriptions of transformers' formulas in double, what config.json and GGUF metadata
// are read into, the CPU kernel with per-pair divisors and an attention factor, and the refusals
// (an unknown scaling type names itself; a sliding window names itself and what to do).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "backends/cpu/kernels/kernels.h"
#include "common/expect_error.h"
#include "common/golden_dir.h"
#include "common/temp_dir.h"
#include "core/thread_pool.h"
#include "engine/checkpoint.h"
#include "engine/model_config_reader.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "models/decoder.h"
#include "models/presets.h"

namespace ferry {
namespace {

using testing::expect_error;
using testing::TempDir;

constexpr double kPi = 3.14159265358979323846;

// ---- transformers' formulas, transcribed (modeling_rope_utils.py), in double ----

// _compute_llama3_parameters: inv_freq of each pair.
std::vector<double> llama3_reference(int dim, double base, double factor, double low_freq_factor,
                                     double high_freq_factor, double old_context_len) {
  const double low_freq_wavelen = old_context_len / low_freq_factor;
  const double high_freq_wavelen = old_context_len / high_freq_factor;
  std::vector<double> out;
  for (int i = 0; i < dim; i += 2) {
    const double inv_freq = 1.0 / std::pow(base, static_cast<double>(i) / dim);
    const double wavelen = 2 * kPi / inv_freq;
    const double inv_freq_llama = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
    const double smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    const double smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
    const bool is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    out.push_back(is_medium_freq ? smoothed : inv_freq_llama);
  }
  return out;
}

// _compute_yarn_parameters: inv_freq of each pair.
std::vector<double> yarn_reference(int dim, double base, double factor, double original_max_position_embeddings,
                                   double beta_fast = 32, double beta_slow = 1, bool truncate = true) {
  const auto find_correction_dim = [&](double num_rotations) {
    return (dim * std::log(original_max_position_embeddings / (num_rotations * 2 * kPi))) / (2 * std::log(base));
  };
  double low = find_correction_dim(beta_fast);
  double high = find_correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  std::vector<double> out;
  for (int i = 0; i < dim / 2; ++i) {
    const double pos_freqs = std::pow(base, static_cast<double>(2 * i) / dim);
    const double inv_freq_extrapolation = 1.0 / pos_freqs;
    const double inv_freq_interpolation = 1.0 / (factor * pos_freqs);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double inv_freq_extrapolation_factor = 1 - ramp;
    out.push_back(inv_freq_interpolation * (1 - inv_freq_extrapolation_factor) +
                  inv_freq_extrapolation * inv_freq_extrapolation_factor);
  }
  return out;
}

void expect_frequencies(const std::vector<double>& got, const std::vector<double>& want, double rel_tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel_tol * want[i]) << "pair " << i;
  }
}

std::vector<double> frequencies_of(const ModelConfig& c) {
  return rope_frequencies(rope_params(c));
}

// ---- config.json ----

nlohmann::json llama_config() {
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 320},
          {"hidden_size", 64},
          {"intermediate_size", 160},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 512},
          {"rope_theta", 500000.0}};
}

ModelConfig from_json(const nlohmann::json& j) {
  return model_config_from_hf(j, nullptr, "config.json");
}

TEST(RopeScaling, Llama3MatchesTransformers) {
  // Llama 3.1 8B's parameters, and the golden's small original context.
  for (const auto& [head_dim, orig] : {std::pair{128, 8192}, std::pair{16, 64}}) {
    auto j = llama_config();
    j["hidden_size"] = head_dim * 4;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", orig}};
    const ModelConfig c = from_json(j);
    EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Llama3);
    EXPECT_EQ(c.rope_freq_scale, 1.0f);
    const std::vector<double> want = llama3_reference(head_dim, 500000.0, 8.0, 1.0, 4.0, orig);
    expect_frequencies(frequencies_of(c), want);
    // All three regimes occur: kept, blended and divided by the factor.
    const auto divisors = llama3_rope_divisors(head_dim, 500000.0, c.rope_scaling);
    EXPECT_EQ(divisors.front(), 1.0);
    EXPECT_EQ(divisors.back(), 8.0);
    EXPECT_TRUE(std::any_of(divisors.begin(), divisors.end(), [](double d) { return d > 1.0 && d < 8.0; }));
    EXPECT_EQ(rope_params(c).attn_factor, 1.0f);
  }
}

TEST(RopeScaling, YarnMatchesTransformers) {
  // The golden qwen2_yarn (legacy "type" key) and a Qwen2.5-style long-context config.
  struct Case {
    int head_dim;
    double base, factor;
    int orig, max_pos;
  };
  for (const Case& k : {Case{16, 1e6, 4.0, 48, 192}, Case{128, 1e6, 4.0, 32768, 32768}}) {
    auto j = llama_config();
    j["model_type"] = "qwen2";
    j["hidden_size"] = k.head_dim * 4;
    j["rope_theta"] = k.base;
    j["max_position_embeddings"] = k.max_pos;
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", k.factor}, {"original_max_position_embeddings", k.orig}};
    const ModelConfig c = from_json(j);
    EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Yarn);
    expect_frequencies(frequencies_of(c), yarn_reference(k.head_dim, k.base, k.factor, k.orig));
    EXPECT_NEAR(rope_params(c).attn_factor, 0.1 * std::log(4.0) + 1.0, 1e-7);
    // YaRN stretches the context to factor x original.
    EXPECT_EQ(c.max_context, std::max(k.max_pos, static_cast<int>(k.factor * k.orig)));
  }
  // The golden's README: inv_freq / unscaled = [1, 0.625, 0.25 x 6].
  auto j = llama_config();
  j["rope_theta"] = 1e6;
  j["max_position_embeddings"] = 192;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 48}};
  const std::vector<double> divisors = rope_params(from_json(j)).freq_divisors;
  const std::vector<double> ratios{1, 0.625, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25};
  ASSERT_EQ(divisors.size(), ratios.size());
  for (size_t i = 0; i < ratios.size(); ++i) EXPECT_NEAR(1.0 / divisors[i], ratios[i], 1e-12) << "pair " << i;
}

TEST(RopeScaling, YarnOptionalKeys) {
  auto j = llama_config();
  j["max_position_embeddings"] = 4096;
  // No original_max_position_embeddings: max_position_embeddings; betas and truncate as given.
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 8.0}, {"beta_fast", 16.0}, {"beta_slow", 2.0}, {"truncate", false}};
  ModelConfig c = from_json(j);
  EXPECT_EQ(c.rope_scaling.original_context, 4096);
  expect_frequencies(frequencies_of(c), yarn_reference(16, 500000.0, 8.0, 4096, 16.0, 2.0, false));
  // Beta 0 means the default, as transformers' `or 32`.
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 8.0}, {"beta_fast", 0}, {"original_max_position_embeddings", 64}};
  expect_frequencies(frequencies_of(from_json(j)), yarn_reference(16, 500000.0, 8.0, 64));
  // attention_factor given, else mscale / mscale_all_dim's ratio.
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"attention_factor", 1.5}};
  EXPECT_FLOAT_EQ(rope_params(from_json(j)).attn_factor, 1.5f);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 40.0}, {"mscale", 0.707}, {"mscale_all_dim", 1.0}};
  const double ratio = (0.1 * 0.707 * std::log(40.0) + 1.0) / (0.1 * 1.0 * std::log(40.0) + 1.0);
  EXPECT_NEAR(rope_params(from_json(j)).attn_factor, ratio, 1e-7);
}

TEST(RopeScaling, LinearStaysAndTransformers5RopeParameters) {
  auto j = llama_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig c = from_json(j);
  EXPECT_EQ(c.rope_freq_scale, 0.5f);
  EXPECT_TRUE(rope_params(c).freq_divisors.empty());
  // transformers 5: rope_parameters, rope_theta inside.
  j = llama_config();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  c = from_json(j);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  expect_frequencies(frequencies_of(c), llama3_reference(16, 500000.0, 8.0, 1.0, 4.0, 64));
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  c = from_json(j);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::None);
}

TEST(RopeScaling, UnknownTypesAreRefusedByName) {
  for (const char* type : {"dynamic", "longrope", "su"}) {
    auto j = llama_config();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    expect_error([&] { from_json(j); }, ErrorKind::Unsupported, {"config.json", type, "llama3", "yarn"});
  }
  auto j = llama_config();
  j["rope_scaling"] = {{"factor", 4.0}};
  expect_error([&] { from_json(j); }, ErrorKind::Config, {"rope_scaling", "no type"});
  // llama3's four keys are required; their order is checked.
  j["rope_scaling"] = {
      {"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  expect_error([&] { from_json(j); }, ErrorKind::Config, {"low_freq_factor"});
  j["rope_scaling"]["low_freq_factor"] = 4.0;
  expect_error([&] { from_json(j); }, ErrorKind::Config, {"high_freq_factor", "low_freq_factor"});
  j["rope_scaling"] = {{"rope_type", "yarn"}};
  expect_error([&] { from_json(j); }, ErrorKind::Config, {"factor", "yarn"});
}

// ---- architectures ----

TEST(Architectures, Qwen3AndMistralConfigs) {
  auto j = llama_config();
  j["model_type"] = "qwen3";
  j["architectures"] = {"Qwen3ForCausalLM"};
  ModelConfig c = from_json(j);  // head_dim absent: Qwen3Config's 128
  EXPECT_EQ(c.family, Family::Qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_style, RopeStyle::HalfSplit);
  j["head_dim"] = 32;
  c = from_json(j);
  EXPECT_EQ(c.q_width(), 128);  // 4 heads x 32, wider than hidden 64

  j = llama_config();
  j["model_type"] = "mistral";
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = nullptr;
  j.erase("num_key_value_heads");
  j["num_attention_heads"] = 16;
  c = from_json(j);
  EXPECT_EQ(c.family, Family::Llama);
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.n_kv_head, 8);  // MistralConfig's default
  EXPECT_FALSE(c.qkv_bias);
}

// The bundled presets of Llama 3.1 and Qwen3 read as the models they are (model cards: 8.03B, 8.19B).
TEST(Architectures, Llama31AndQwen3Presets) {
  const auto spec_of = [](const char* name) {
    const auto text = preset_config(name);
    EXPECT_TRUE(text.has_value()) << name;
    const ModelConfig c = from_json(nlohmann::json::parse(text.value_or("{}")));
    return make_decoder_spec_from_config(c, DType::BF16, name);
  };
  const ModelSpec llama = spec_of("llama-3.1-8b");
  EXPECT_EQ(llama.config.rope_scaling.type, RopeScalingType::Llama3);
  EXPECT_EQ(llama.config.max_context, 131072);
  EXPECT_NEAR(static_cast<double>(llama.parameter_count()) / 8.03e9, 1.0, 0.01);
  const ModelSpec qwen3 = spec_of("qwen3-8b");
  EXPECT_TRUE(qwen3.config.qk_norm);
  EXPECT_NE(qwen3.find(LogicalTensor::AttnQNorm, 35), nullptr);
  EXPECT_NEAR(static_cast<double>(qwen3.parameter_count()) / 8.19e9, 1.0, 0.01);
}

TEST(Architectures, SlidingWindowsAreRefusedWithWhatToDo) {
  auto j = llama_config();
  j["model_type"] = "mistral";
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  const std::string msg = expect_error([&] { from_json(j); }, ErrorKind::Unsupported,
                                       {"config.json", "sliding_window 4096", "max_position_embeddings"});
  EXPECT_NE(msg.find("set max_position_embeddings to 4096 or less"), std::string::npos) << msg;
  // Absent: MistralConfig's default window of 4096.
  j.erase("sliding_window");
  expect_error([&] { from_json(j); }, ErrorKind::Unsupported, {"sliding_window 4096"});
  // A window as long as the context never bites: runs.
  j["sliding_window"] = 32768;
  EXPECT_EQ(from_json(j).max_context, 32768);
  j["max_position_embeddings"] = 4096;
  j["sliding_window"] = 4096;
  EXPECT_EQ(from_json(j).max_context, 4096);

  for (const char* type : {"qwen2", "qwen3"}) {
    auto q = llama_config();
    q["model_type"] = type;
    q["use_sliding_window"] = false;
    q["sliding_window"] = 4096;  // ignored while use_sliding_window is false, as transformers does
    EXPECT_NO_THROW(from_json(q));
    q["use_sliding_window"] = true;
    expect_error([&] { from_json(q); }, ErrorKind::Unsupported, {"use_sliding_window"});
    q["use_sliding_window"] = false;
    q["layer_types"] = {"full_attention", "sliding_attention"};
    expect_error([&] { from_json(q); }, ErrorKind::Unsupported, {"layer_types", "sliding_attention"});
  }
}

// ---- GGUF metadata ----

struct GgufCase {
  TempDir dir{"rope_gguf"};
  GgufWriter w;
  GgufCase() {
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set_u32("llama.embedding_length", 64);
    w.set_u32("llama.feed_forward_length", 160);
    w.set_u32("llama.attention.head_count", 4);
    w.set_u32("llama.attention.head_count_kv", 2);
    w.set_u32("llama.context_length", 512);
    w.set_f32("llama.rope.freq_base", 500000.0f);
  }
  ModelConfig config() {
    const std::string path = dir.file("model.gguf");
    w.write(path);
    const GgufFile g = GgufFile::open(path);
    return model_config_from_gguf(
        g,
        [](const std::string& name) -> std::optional<Shape> {
          if (name == "token_embd.weight") return Shape{320, 64};
          return std::nullopt;
        },
        path);
  }
};

TEST(RopeScalingGguf, YarnKeys) {
  GgufCase g;
  g.w.set_string("llama.rope.scaling.type", "yarn");
  g.w.set_f32("llama.rope.scaling.factor", 4.0f);
  g.w.set_u32("llama.rope.scaling.original_context_length", 48);
  ModelConfig c = g.config();
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Yarn);
  EXPECT_EQ(c.rope_freq_scale, 1.0f);
  expect_frequencies(frequencies_of(c), yarn_reference(16, 500000.0, 4.0, 48));
  EXPECT_NEAR(rope_params(c).attn_factor, 0.1 * std::log(4.0) + 1.0, 1e-7);
  // Betas, and attn_factor as a multiplier; the context stretched to factor x original.
  g.w.set_f32("llama.rope.scaling.yarn_beta_fast", 16.0f);
  g.w.set_f32("llama.rope.scaling.yarn_beta_slow", 2.0f);
  g.w.set_f32("llama.rope.scaling.attn_factor", 0.5f);
  g.w.set_u32("llama.rope.scaling.original_context_length", 256);
  c = g.config();
  expect_frequencies(frequencies_of(c), yarn_reference(16, 500000.0, 4.0, 256, 16.0, 2.0), 1e-6);
  EXPECT_NEAR(rope_params(c).attn_factor, 0.5 * (0.1 * std::log(4.0) + 1.0), 1e-6);
  EXPECT_EQ(c.max_context, 1024);
}

TEST(RopeScalingGguf, RefusalsNameTheKey) {
  {
    GgufCase g;
    g.w.set_string("llama.rope.scaling.type", "longrope");
    g.w.set_f32("llama.rope.scaling.factor", 4.0f);
    expect_error([&] { g.config(); }, ErrorKind::Unsupported, {"model.gguf", "'longrope'", "rope.scaling.type"});
  }
  {
    GgufCase g;
    g.w.set_string("llama.rope.scaling.type", "yarn");
    expect_error([&] { g.config(); }, ErrorKind::Config, {"llama.rope.scaling.factor"});
    g.w.set_f32("llama.rope.scaling.factor", 4.0f);
    g.w.set_f32("llama.rope.scaling.yarn_ext_factor", 0.5f);
    expect_error([&] { g.config(); }, ErrorKind::Unsupported, {"yarn_ext_factor"});
  }
  {
    GgufCase g;
    g.w.set_u32("llama.attention.sliding_window", 256);
    expect_error([&] { g.config(); }, ErrorKind::Unsupported, {"llama.attention.sliding_window", "256"});
  }
  {
    GgufCase g;
    std::vector<float> five(5, 1.0f);
    std::vector<uint8_t> bytes(five.size() * 4);
    std::memcpy(bytes.data(), five.data(), bytes.size());
    g.w.add_tensor("rope_freqs.weight", DType::F32, Shape{5}, bytes);
    expect_error([&] { g.config(); }, ErrorKind::Config, {"rope_freqs.weight", "[8]"});
  }
}

TEST(RopeScalingGguf, RopeFreqsTensorDividesTheFrequencies) {
  GgufCase g;
  std::vector<float> factors{1, 1, 1.5f, 2, 4, 8, 8, 8};
  std::vector<uint8_t> bytes(factors.size() * 4);
  std::memcpy(bytes.data(), factors.data(), bytes.size());
  g.w.add_tensor("rope_freqs.weight", DType::F32, Shape{8}, bytes);
  const ModelConfig c = g.config();
  ASSERT_EQ(c.rope_freq_factors, factors);
  const std::vector<double> f = frequencies_of(c);
  for (size_t i = 0; i < factors.size(); ++i) {
    EXPECT_NEAR(f[i], std::pow(500000.0, -2.0 * static_cast<double>(i) / 16) / factors[i], 1e-15) << i;
  }
}

// The golden Llama 3.1 case: llama.cpp's converter wrote Llama 3's divisors as rope_freqs.weight
// (f32), ferry computes them from config.json: the same frequencies to f32 precision.
TEST(RopeScalingGguf, GoldenRopeFreqsEqualLlama3FromConfig) {
  const std::string dir = testing::golden_dir() + "/text/llama31_rope_scaling";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const Checkpoint gguf = open_checkpoint(dir + "/model.gguf");
  const Checkpoint hf = open_checkpoint(dir + "/hf");
  EXPECT_EQ(gguf.config().rope_freq_factors.size(), 8u);
  EXPECT_EQ(hf.config().rope_scaling.type, RopeScalingType::Llama3);
  expect_frequencies(frequencies_of(gguf.config()), frequencies_of(hf.config()), 1e-6);
  // rope_freqs is accounted for (not refused as unused) and is no weight.
  for (const auto& m : gguf.spec.modules) {
    for (const auto& p : m.params) EXPECT_NE(p.name, "rope_freqs.weight");
  }
}

// ---- the CPU kernel ----

TEST(RopeKernel, DivisorsAndAttentionFactor) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const std::vector<int32_t> pos{0, 1, 5, 63, 64, 200, 4095};
  const auto T = static_cast<int64_t>(pos.size());
  for (const RopeStyle style : {RopeStyle::HalfSplit, RopeStyle::Adjacent}) {
    for (const int n_rot : {16, 8}) {
      RopeParams p{16, n_rot, style, 500000.0f, 0.5f};
      RopeScaling s;
      s.type = RopeScalingType::Yarn;
      s.factor = 4.0;
      s.original_context = 48;
      p.freq_divisors = yarn_rope_divisors(n_rot, 500000.0, s);
      p.attn_factor = 1.25f;
      const int64_t width = 3 * p.head_dim;
      Tensor x = Tensor::host(DType::F32, Shape{T, width}, "x");
      Tensor positions = Tensor::host(DType::I32, Shape{T}, "pos");
      Tensor out = Tensor::host(DType::F32, Shape{T, width}, "out");
      float* xv = x.data_as<float>();
      for (int64_t i = 0; i < T * width; ++i) xv[i] = uni(rng);
      std::copy(pos.begin(), pos.end(), positions.data_as<int32_t>());
      kernels::rope(x, positions, p, out, pool);
      const float* y = out.data_as<const float>();
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < 3; ++h) {
          const int64_t base = t * width + h * p.head_dim;
          for (int i = 0; i < n_rot / 2; ++i) {
            const double angle = pos[static_cast<size_t>(t)] * 0.5 * std::pow(500000.0, -2.0 * i / n_rot) /
                                 p.freq_divisors[static_cast<size_t>(i)];
            const int64_t a = style == RopeStyle::Adjacent ? base + 2 * i : base + i;
            const int64_t b = style == RopeStyle::Adjacent ? a + 1 : a + n_rot / 2;
            const double x0 = xv[a], x1 = xv[b];
            EXPECT_NEAR(y[a], 1.25 * (x0 * std::cos(angle) - x1 * std::sin(angle)), 2e-6);
            EXPECT_NEAR(y[b], 1.25 * (x0 * std::sin(angle) + x1 * std::cos(angle)), 2e-6);
          }
          for (int d = n_rot; d < p.head_dim; ++d) EXPECT_EQ(y[base + d], xv[base + d]) << "past n_rot";
        }
      }
    }
  }
  // Divisors must be one per pair.
  RopeParams bad{16, 16, RopeStyle::HalfSplit, 10000.0f, 1.0f};
  bad.freq_divisors = {1.0, 2.0};
  Tensor x = Tensor::host(DType::F32, Shape{1, 16}, "x");
  Tensor positions = Tensor::host(DType::I32, Shape{1}, "pos");
  positions.data_as<int32_t>()[0] = 0;
  Tensor out = Tensor::host(DType::F32, Shape{1, 16}, "out");
  expect_error([&] { kernels::rope(x, positions, bad, out, pool); }, ErrorKind::Usage, {"divisors"});
}

}  // namespace
}  // namespace ferry
