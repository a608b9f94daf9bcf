// GLM-4V against the original THUDM code (golden cases made with modeling_chatglm.py + visual.py):
// the tower's stages, the projected embeddings, the spliced input, the expanded positions, the
// logits and the greedy tokens, from the reference pixels and from ferry's own preprocessing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "engine/image.h"
#include "engine/weight_loader.h"
#include "models/vision.h"
#include "runtime/executor.h"
#include "vision_golden.h"

namespace ferry {
namespace {

using testing::kVisionCases;
using testing::max_abs_diff;
using testing::read_raw;

constexpr float kVisionAbs = 1e-5f;  // the cases' suggested tolerances
constexpr float kLogitsAbs = 1e-4f;

class VisionGolden : public ::testing::TestWithParam<const char*> {
 protected:
  std::string dir() const { return testing::vision_case_dir(GetParam()); }
  float logits_tolerance() const {
    const auto expected = testing::read_expected(dir());
    return kLogitsAbs * std::max(1.0f, expected["max_abs_logit"].get<float>());
  }
};

TEST_P(VisionGolden, TowerOutputBeforeTheProjectorMatches) {
  testing::VisionModel m(dir());
  const VisionConfig& v = m.ckpt.config().vision;
  const VisionBatch batch = testing::pixel_batch(read_raw<float>(dir() + "/pixel_values.f32.bin"), v);
  Graph g = build_vision_graph(m.ckpt.spec, batch.grids);
  const ValueId vit = g.find(fmt::format("vision.layers.{}.mlp_residual", v.n_layer - 1));
  ASSERT_NE(vit, kNoValue);
  g.mark_output(vit);
  StateStore states;
  Executor ex(m.placement, m.weights, states);
  Tensor pos = Tensor::host(DType::I32, Shape{static_cast<int64_t>(batch.positions.size())}, "vision_positions");
  std::copy(batch.positions.begin(), batch.positions.end(), pos.data_as<int32_t>());
  Tensor patches = Tensor::host(
      DType::F32,
      Shape{batch.grids[0].patches(), static_cast<int64_t>(batch.patches.size()) / batch.grids[0].patches()},
      "patches");
  std::copy(batch.patches.begin(), batch.patches.end(), patches.data_as<float>());
  const auto out = ex.run(g, {{"patches", patches}, {"vision_positions", pos}});
  const Tensor& t = out.at(g.value(vit).name);
  const std::vector<float> got(t.data_as<float>(), t.data_as<float>() + t.shape().numel());
  // The residual stream reaches |x| ~ 6 here: the absolute tolerance scales with the reference's
  // magnitude, as the cases prescribe for logits.
  const auto want = read_raw<float>(dir() + "/vision_vit_out.f32.bin");
  float magnitude = 1.0f;
  for (float x : want) magnitude = std::max(magnitude, std::abs(x));
  EXPECT_LE(max_abs_diff(got, want), kVisionAbs * magnitude);
}

TEST_P(VisionGolden, ImageEmbeddingsSplicedInputPositionsLogitsAndGreedyTokens) {
  testing::VisionModel m(dir());
  const auto expected = testing::read_expected(dir());
  const ModelConfig& c = m.ckpt.config();
  const auto prompt = read_raw<int32_t>(dir() + "/prompt_ids.i32.bin");

  // Positions and the splice map, as the original forward builds them.
  const ImagePrompt p = expand_image_prompt(c.vision, prompt, 1);
  EXPECT_EQ(p.positions, read_raw<int32_t>(dir() + "/position_ids_expanded.i32.bin"));
  EXPECT_EQ(p.next_position, static_cast<int64_t>(prompt.size()));

  Session s(m.ckpt.spec, m.placement, m.weights, 64, RunLimits{}.prefill_chunk, DType::F32);
  const VisionBatch pixels = testing::pixel_batch(read_raw<float>(dir() + "/pixel_values.f32.bin"), c.vision);
  const std::vector<float> embeds = s.encode_images(pixels);
  EXPECT_LE(max_abs_diff(embeds, read_raw<float>(dir() + "/vision_embeds.f32.bin")), kVisionAbs);

  // The spliced input embeddings, read out of the text graph's embed module.
  {
    StepShape shape;
    shape.n_tokens = static_cast<int64_t>(p.tokens.size());
    shape.kv_capacity = shape.n_tokens;
    Graph g = build_decoder_graph_with_images(m.ckpt.spec, shape, c.vision.text_tokens());
    g.mark_output(g.find("embed.spliced"));
    StateStore states;
    Executor ex(m.placement, m.weights, states);
    Tensor tokens = Tensor::host(DType::I32, Shape{shape.n_tokens}, "tokens");
    Tensor positions = Tensor::host(DType::I32, Shape{shape.n_tokens}, "positions");
    Tensor rows = Tensor::host(DType::I32, Shape{shape.n_tokens}, "embed_rows");
    Tensor image = Tensor::host(DType::F32, Shape{c.vision.text_tokens(), c.hidden}, "image_embeds");
    for (size_t t = 0; t < p.tokens.size(); ++t) {
      tokens.data_as<int32_t>()[t] = p.tokens[t];
      positions.data_as<int32_t>()[t] = p.positions[t];
      rows.data_as<int32_t>()[t] =
          p.image_row[t] < 0 ? static_cast<int32_t>(t) : static_cast<int32_t>(shape.n_tokens + p.image_row[t]);
    }
    std::copy(embeds.begin(), embeds.end(), image.data_as<float>());
    Tensor kv_position = Tensor::host(DType::I32, Shape{1}, "kv_position");
    *kv_position.data_as<int32_t>() = 0;
    Tensor logit_rows = Tensor::host(DType::I32, Shape{1}, "logit_rows");
    *logit_rows.data_as<int32_t>() = static_cast<int32_t>(shape.n_tokens - 1);
    const auto out = ex.run(g, {{"tokens", tokens},
                                {"logit_rows", logit_rows},
                                {"positions", positions},
                                {"embed_rows", rows},
                                {"image_embeds", image},
                                {"kv_position", kv_position}});
    const Tensor& t = out.at("embed.spliced");
    const std::vector<float> got(t.data_as<float>(), t.data_as<float>() + t.shape().numel());
    EXPECT_LE(max_abs_diff(got, read_raw<float>(dir() + "/inputs_embeds_spliced.f32.bin")), kVisionAbs);
  }

  // Every prompt position's logits, then greedy decoding from the unexpanded length.
  {
    Session all(m.ckpt.spec, m.placement, m.weights, 64, RunLimits{}.prefill_chunk, DType::F32);
    const auto logits = all.eval_with_images(p.tokens, p.positions, p.image_row, embeds, /*all_logits=*/true);
    EXPECT_LE(max_abs_diff(logits, read_raw<float>(dir() + "/logits_all_prompt.f32.bin")), logits_tolerance());
    EXPECT_EQ(all.next_position(), static_cast<int64_t>(prompt.size()));
  }
  const int steps = expected["greedy_new_tokens"].get<int>();
  Session greedy(m.ckpt.spec, m.placement, m.weights, 64, RunLimits{}.prefill_chunk, DType::F32);
  const testing::VisionRun run = testing::run_greedy(greedy, c, prompt, pixels, steps);
  EXPECT_EQ(run.tokens, expected["greedy_ids"].get<std::vector<int32_t>>());
  const auto golden_steps = read_raw<float>(dir() + "/logits_greedy_steps.f32.bin");
  const auto vocab = static_cast<size_t>(c.vocab);
  for (size_t i = 0; i < run.step_logits.size(); ++i) {
    const std::vector<float> want(golden_steps.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                                  golden_steps.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    EXPECT_LE(max_abs_diff(run.step_logits[i], want), logits_tolerance()) << "step " << i;
  }
  EXPECT_LE(max_abs_diff(run.step_logits[0], read_raw<float>(dir() + "/logits_last.f32.bin")), logits_tolerance());
}

// ferry's own preprocessing of the same PNG: Pillow's bicubic reproduced exactly, then the model.
TEST_P(VisionGolden, OwnPreprocessingOfThePngGivesTheSameTokens) {
  testing::VisionModel m(dir());
  const auto expected = testing::read_expected(dir());
  const ModelConfig& c = m.ckpt.config();
  const std::string png = testing::golden_dir() + "/images/chelsea.png";
  const RgbImage image = load_image(png);
  EXPECT_EQ(image.width, 451);
  EXPECT_EQ(image.height, 300);
  const RgbImage resized = resize_bicubic(image, c.vision.image_size, c.vision.image_size);
  EXPECT_EQ(resized.rgb, read_raw<uint8_t>(dir() + "/resized_rgb.u8.bin"));
  const std::vector<float> pixels = clip_normalize(resized);
  EXPECT_LE(max_abs_diff(pixels, read_raw<float>(dir() + "/pixel_values.f32.bin")), 1e-6f);
  EXPECT_EQ(preprocess_image(png, c.vision.image_size), pixels);

  Session s(m.ckpt.spec, m.placement, m.weights, 64, RunLimits{}.prefill_chunk, DType::F32);
  const testing::VisionRun run =
      testing::run_greedy(s, c, read_raw<int32_t>(dir() + "/prompt_ids.i32.bin"),
                          testing::pixel_batch(pixels, c.vision), expected["greedy_new_tokens"].get<int>());
  EXPECT_LE(max_abs_diff(run.image_embeds, read_raw<float>(dir() + "/vision_embeds.f32.bin")), kVisionAbs);
  EXPECT_EQ(run.tokens, expected["greedy_ids"].get<std::vector<int32_t>>());
  EXPECT_LE(max_abs_diff(run.step_logits[0], read_raw<float>(dir() + "/logits_last.f32.bin")), logits_tolerance());
}

// The same golden on the opaque device, whose memory only its backend reads, alone and with the
// tower and projector on it and the decoder on a CPU device: every byte the model reads or makes
// moves through the device interface (and, split, the image embeddings cross by host staging).
TEST_P(VisionGolden, RunsOnADeviceWhoseMemoryOnlyItsBackendReads) {
  const auto expected = testing::read_expected(dir());
  const auto golden_ids = expected["greedy_ids"].get<std::vector<int32_t>>();
  const int steps = expected["greedy_new_tokens"].get<int>();
  const auto prompt = read_raw<int32_t>(dir() + "/prompt_ids.i32.bin");
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "opaque:0 (tower, projector) + cpu:1" : "opaque:0");
    const Checkpoint ckpt = open_checkpoint(dir() + "/model");
    const ModelConfig& c = ckpt.config();
    DeviceSet devices;
    devices.add(create_device(DeviceSpec{DeviceId{DeviceType::Opaque, 0}, Allocator::kUnlimited, 2}, 2));
    Placement placement = Placement::single(devices.at(0));
    if (split) {
      devices.add(create_device(DeviceSpec{DeviceId{DeviceType::Cpu, 1}, Allocator::kUnlimited, 2}, 2));
      placement = Placement{};
      for (const auto& m : ckpt.spec.modules) {
        const bool vision = m.name == vision_module() || m.name == projector_module();
        placement.module_device[m.name] = &devices.at(vision ? 0 : 1);
      }
    }
    WeightStore weights;
    load_weights(ckpt, placement, weights);
    const VisionBatch pixels = testing::pixel_batch(read_raw<float>(dir() + "/pixel_values.f32.bin"), c.vision);
    Session s(ckpt.spec, placement, weights, 64, RunLimits{}.prefill_chunk, DType::F32);
    const testing::VisionRun host = testing::run_greedy(s, c, prompt, pixels, steps);
    EXPECT_LE(max_abs_diff(host.image_embeds, read_raw<float>(dir() + "/vision_embeds.f32.bin")), kVisionAbs);
    EXPECT_EQ(host.tokens, golden_ids);

    // The embeddings left on the opaque device, attached, read there (or staged to cpu:1).
    s.reset();
    Tensor embeds = s.encode_images_on_device(pixels);
    EXPECT_EQ(embeds.device(), &devices.at(0));
    s.attach_images(std::move(embeds), 1);
    testing::VisionRun on_device;
    testing::continue_greedy(s, s.eval(prompt), steps, on_device);
    EXPECT_EQ(on_device.tokens, golden_ids);
    EXPECT_LE(max_abs_diff(on_device.step_logits[0], host.step_logits[0]), 1e-6f);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, VisionGolden, ::testing::ValuesIn(kVisionCases),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace ferry
