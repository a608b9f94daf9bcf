// MiniCPM-V 2.6 against OpenBMB's original code (../shared/golden/minicpmv): the tower per vision
// input, the resampler's positions and output, the spliced input, every prompt logit and the
// greedy tokens — from the reference pixel values, and from ferry's own decoding, slicing and
// resizing of the PNG — on one device and split over three under every strategy.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"
#include "engine/checkpoint.h"
#include "engine/image_processor.h"
#include "engine/image_prompt.h"
#include "engine/plan_placement.h"
#include "engine/session.h"
#include "engine/weight_loader.h"
#include "minicpmv_case.h"
#include "models/resampler.h"
#include "models/vision.h"
#include "plan/plan.h"
#include "plan/strategy.h"
#include "runtime/executor.h"
#include "text/tokenizer_loader.h"

namespace ferry {
namespace {

using testing::kMiniCpmvCases;
using testing::MiniCpmvCase;
using testing::two_digits;

constexpr float kVisionAbs = 1e-4f;  // the cases' suggested tolerances
constexpr float kPositionAbs = 1e-5f;
constexpr float kLogitsAbs = 1e-4f;
constexpr int64_t kContext = 160;

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// The case's model on one CPU device.
struct OneDevice {
  Checkpoint ckpt;
  cpu::CpuDevice device;
  Placement placement;
  WeightStore weights;
  explicit OneDevice(const std::string& dir)
      : ckpt(open_checkpoint(dir)), device(DeviceId{DeviceType::Cpu, 0}, Allocator::kUnlimited, 2) {
    placement = Placement::single(device);
    load_weights(ckpt, placement, weights);
  }
};

VisionBatch reference_input(const MiniCpmvCase& c, int i) {
  return testing::reference_vision_batch(c, i, 1);
}

VisionBatch reference_batch(const MiniCpmvCase& c) {
  return testing::reference_vision_batch(c);
}

float logits_tolerance(const MiniCpmvCase& c) {
  return kLogitsAbs * std::max(1.0f, c.expected.at("max_abs_logit").get<float>());
}

struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> step_logits;
};

// The prompt with its images attached, then `steps` greedy tokens (the CLI's path: the embeddings
// stay on the projector's device and the session places them at the prompt's spans).
GreedyRun run_greedy(Session& s, const VisionBatch& batch, const std::vector<int32_t>& ids, int steps) {
  GreedyRun r;
  s.attach_images(s.encode_images_on_device(batch), static_cast<int64_t>(batch.grids.size()));
  std::vector<float> logits = s.eval(ids);
  for (int i = 0; i < steps; ++i) {
    r.step_logits.push_back(logits);
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(next);
    if (i + 1 < steps) logits = s.eval(std::vector<int32_t>{next});
  }
  return r;
}

void expect_greedy_matches(const MiniCpmvCase& c, const GreedyRun& run) {
  EXPECT_EQ(run.tokens, c.expected.at("greedy_ids").get<std::vector<int32_t>>());
  const std::vector<float> golden = c.f32("logits_greedy_steps");
  const size_t vocab = golden.size() / run.step_logits.size();
  for (size_t i = 0; i < run.step_logits.size(); ++i) {
    EXPECT_LE(max_abs_diff(run.step_logits[i], std::span(golden).subspan(i * vocab, vocab)), logits_tolerance(c))
        << "step " << i;
  }
}

class MiniCpmvModelGolden : public ::testing::TestWithParam<const char*> {
 protected:
  MiniCpmvCase c = testing::load_minicpmv_case(GetParam());
};

TEST_P(MiniCpmvModelGolden, ConfigReadsTheTowerResamplerAndImageTokens) {
  const Checkpoint ck = open_checkpoint(c.model_dir());
  const VisionConfig& v = ck.config().vision;
  EXPECT_EQ(v.family, VisionFamily::MiniCpmv);
  EXPECT_EQ(v.layout, VisionLayout::Siglip);
  EXPECT_FALSE(v.class_token);
  EXPECT_TRUE(v.bucketed_positions);
  EXPECT_TRUE(v.gelu_tanh);
  EXPECT_EQ(v.table_side(), c.position_table_side());
  EXPECT_EQ(v.query_num, c.query_num());
  EXPECT_EQ(ck.config().tensor_prefix, "llm.");
  EXPECT_EQ(ck.config().family, Family::Qwen2);
  // The tiny tokenizer's ids (golden README's table).
  EXPECT_EQ(v.boi_id, 364);
  EXPECT_EQ(v.eoi_id, 365);
  EXPECT_EQ(v.slice_start_id, 374);
  EXPECT_EQ(v.slice_end_id, 375);
  EXPECT_EQ(v.unk_id, 360);
}

TEST_P(MiniCpmvModelGolden, TowerOutputOfEveryVisionInputMatches) {
  OneDevice m(c.model_dir());
  for (int i = 0; i < c.n_vision_inputs(); ++i) {
    SCOPED_TRACE(fmt::format("vision input {}", i));
    const VisionBatch b = reference_input(c, i);
    Graph g = build_vision_graph(m.ckpt.spec, b.grids);
    const ValueId tower = g.find("vision.post_norm");
    ASSERT_NE(tower, kNoValue);
    g.mark_output(tower);
    StateStore states;
    Executor ex(m.placement, m.weights, states);
    Tensor patches = Tensor::host(
        DType::F32, Shape{b.grids[0].patches(), static_cast<int64_t>(b.patches.size()) / b.grids[0].patches()},
        "patches");
    std::copy(b.patches.begin(), b.patches.end(), patches.data_as<float>());
    Tensor pos = Tensor::host(DType::I32, Shape{static_cast<int64_t>(b.positions.size())}, "vision_positions");
    std::copy(b.positions.begin(), b.positions.end(), pos.data_as<int32_t>());
    const std::vector<float> table = resampler_positions(m.ckpt.config().hidden, b.grids);
    Tensor rpos = Tensor::host(DType::F32, Shape{b.grids[0].patches(), m.ckpt.config().hidden}, "resampler_positions");
    std::copy(table.begin(), table.end(), rpos.data_as<float>());
    const auto out = ex.run(g, {{"patches", patches}, {"vision_positions", pos}, {"resampler_positions", rpos}});
    const Tensor& t = out.at("vision.post_norm");
    const std::vector<float> got(t.data_as<float>(), t.data_as<float>() + t.shape().numel());
    EXPECT_LE(max_abs_diff(got, c.f32("vision_out_" + two_digits(i))), kVisionAbs);
  }
}

// The resampler's queries are normalised as activations: a CPU device that repacks the tower's
// f32 matrices (the avx512vnni level and up) must keep them in rows, or the norm refuses them.
// Where the level repacks nothing both hold trivially; the goldens above then run the rows.
TEST_P(MiniCpmvModelGolden, TheResamplersQueriesStayInRowsWhereItsMatricesAreRepacked) {
  OneDevice m(c.model_dir());
  const Tensor* query = m.weights.find("resampler.query");
  const Tensor* kv_proj = m.weights.find("resampler.kv_proj.weight");
  ASSERT_NE(query, nullptr);
  ASSERT_NE(kv_proj, nullptr);
  EXPECT_EQ(query->layout(), Layout::Rows);
  EXPECT_EQ(kv_proj->layout(),
            kernels::repacks_weight(kv_proj->dtype(), kv_proj->shape()) ? Layout::Packed : Layout::Rows);
}

TEST_P(MiniCpmvModelGolden, ResamplerPositionsAreTheOriginalsSinCosTable) {
  const std::vector<int64_t> shape = c.shape("resampler_pos_embed");  // [max_h, max_w, E]
  const std::vector<float> got = resampler_positions(shape[2], std::vector<VisionGrid>{{shape[0], shape[1]}});
  EXPECT_LE(max_abs_diff(got, c.f32("resampler_pos_embed")), kPositionAbs);
}

TEST_P(MiniCpmvModelGolden, EmbeddingsSplicedRowsLogitsAndGreedyTokensFromReferencePixels) {
  OneDevice m(c.model_dir());
  const ModelConfig& config = m.ckpt.config();
  const VisionBatch batch = reference_batch(c);
  const std::vector<int32_t> ids = c.i32("input_ids");

  Session s(m.ckpt.spec, m.placement, m.weights, kContext, RunLimits{}.prefill_chunk, DType::F32);
  const std::vector<float> embeds = s.encode_images(batch);
  EXPECT_LE(max_abs_diff(embeds, c.f32("vision_embeds")), kVisionAbs);

  // The splice map: the rows of each image bound take that input's rows, in order; positions 0..L-1.
  const ImagePrompt p = expand_image_prompt(config.vision, ids, c.n_vision_inputs());
  const std::vector<int32_t> bounds = c.i32("image_bound");
  std::vector<int32_t> want_rows(ids.size(), -1);
  int32_t row = 0;
  for (size_t b = 0; b + 1 < bounds.size(); b += 2) {
    for (int32_t t = bounds[b]; t < bounds[b + 1]; ++t) want_rows[static_cast<size_t>(t)] = row++;
  }
  EXPECT_EQ(p.image_row, want_rows);
  EXPECT_EQ(p.tokens, ids);
  for (size_t t = 0; t < p.positions.size(); ++t) ASSERT_EQ(p.positions[t], static_cast<int32_t>(t));

  // The spliced input embeddings, read out of the text graph's embed module.
  {
    StepShape shape;
    shape.n_tokens = static_cast<int64_t>(ids.size());
    shape.kv_capacity = shape.n_tokens;
    shape.all_logits = true;
    const auto image_rows = static_cast<int64_t>(embeds.size()) / config.hidden;
    Graph g = build_decoder_graph_with_images(m.ckpt.spec, shape, image_rows);
    g.mark_output(g.find("embed.spliced"));
    StateStore states;
    Executor ex(m.placement, m.weights, states);
    const auto n = shape.n_tokens;
    Tensor tokens = Tensor::host(DType::I32, Shape{n}, "tokens");
    Tensor positions = Tensor::host(DType::I32, Shape{n}, "positions");
    Tensor rows = Tensor::host(DType::I32, Shape{n}, "embed_rows");
    for (int64_t t = 0; t < n; ++t) {
      tokens.data_as<int32_t>()[t] = ids[static_cast<size_t>(t)];
      positions.data_as<int32_t>()[t] = static_cast<int32_t>(t);
      const int32_t r = p.image_row[static_cast<size_t>(t)];
      rows.data_as<int32_t>()[t] = r < 0 ? static_cast<int32_t>(t) : static_cast<int32_t>(n + r);
    }
    Tensor image = Tensor::host(DType::F32, Shape{image_rows, config.hidden}, "image_embeds");
    std::copy(embeds.begin(), embeds.end(), image.data_as<float>());
    Tensor kv_position = Tensor::host(DType::I32, Shape{1}, "kv_position");
    *kv_position.data_as<int32_t>() = 0;
    const auto out = ex.run(g, {{"tokens", tokens},
                                {"positions", positions},
                                {"embed_rows", rows},
                                {"image_embeds", image},
                                {"kv_position", kv_position}});
    const Tensor& t = out.at("embed.spliced");
    EXPECT_LE(max_abs_diff(std::span(t.data_as<float>(), static_cast<size_t>(t.shape().numel())),
                           c.f32("inputs_embeds_spliced")),
              kVisionAbs);
  }

  // Every prompt position's logits.
  {
    Session all(m.ckpt.spec, m.placement, m.weights, kContext, RunLimits{}.prefill_chunk, DType::F32);
    const auto logits = all.eval_with_images(p.tokens, p.positions, p.image_row, embeds, /*all_logits=*/true);
    EXPECT_LE(max_abs_diff(logits, c.f32("logits_all_prompt")), logits_tolerance(c));
  }
  Session greedy(m.ckpt.spec, m.placement, m.weights, kContext, RunLimits{}.prefill_chunk, DType::F32);
  const GreedyRun run = run_greedy(greedy, batch, ids, c.expected.at("greedy_new_tokens").get<int>());
  expect_greedy_matches(c, run);
  EXPECT_LE(max_abs_diff(run.step_logits[0], c.f32("logits_last")), logits_tolerance(c));
}

TEST_P(MiniCpmvModelGolden, FerrysOwnProcessingOfThePngGivesThePromptIdsAndTheTokens) {
  OneDevice m(c.model_dir());
  const Tokenizer tok = load_tokenizer(c.model_dir() + "/tokenizer.json");
  const auto processor = make_image_processor(m.ckpt, &tok);
  std::vector<RgbImage> images;
  for (size_t i = 0; i < c.n_images(); ++i) images.push_back(load_image(c.image_path(i)));
  const ProcessedImages processed = processor->process(images);
  ASSERT_EQ(processed.inputs(), c.n_vision_inputs());
  // The chat message as chat() builds it, then the template the goldens used (ChatML, no system).
  const std::string question = c.expected.at("question").get<std::string>();
  const std::string content = processor->chat_message(question, static_cast<int64_t>(images.size()));
  const std::string prompt = "<|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(prompt, c.text("prompt.txt"));
  const std::string expanded = processor->expand_prompt(prompt, processed);
  EXPECT_EQ(expanded, c.text("prompt_expanded.txt"));
  const std::vector<int32_t> ids = tok.encode(expanded, /*add_special=*/false);
  EXPECT_EQ(ids, c.i32("input_ids"));

  // The processed inputs equal the reference processor's (pixels bit for bit from the same bytes).
  const VisionBatch reference = reference_batch(c);
  EXPECT_EQ(processed.batch.grids, reference.grids);
  EXPECT_EQ(processed.batch.positions, reference.positions);
  EXPECT_LE(max_abs_diff(processed.batch.patches, reference.patches), 1e-6f);

  Session s(m.ckpt.spec, m.placement, m.weights, kContext, RunLimits{}.prefill_chunk, DType::F32);
  expect_greedy_matches(c, run_greedy(s, processed.batch, ids, c.expected.at("greedy_new_tokens").get<int>()));
}

// A conversation's pictures are processed as they come and joined: the expanded prompt numbers
// them through it (<image_id>0, 1, ...), as the original processor numbers a prompt's images.
TEST(MiniCpmvProcessor, PicturesProcessedApartAreNumberedThroughThePrompt) {
  const MiniCpmvCase c = testing::load_minicpmv_case(kMiniCpmvCases[0]);
  const Checkpoint ck = open_checkpoint(c.model_dir());
  const auto processor = make_image_processor(ck, nullptr);
  const RgbImage picture = load_image(c.image_path(0));
  const std::vector<ProcessedImages> parts{processor->process(std::span(&picture, 1)),
                                           processor->process(std::span(&picture, 1))};
  const ProcessedImages both = ImageProcessor::join(parts);
  EXPECT_EQ(both.images(), 2);
  EXPECT_EQ(both.inputs(), 2 * c.n_vision_inputs());
  const std::string text = processor->expand_prompt("A (<image>./</image>) B (<image>./</image>)", both);
  const size_t first = text.find("<image_id>0</image_id><image>");
  const size_t second = text.find("<image_id>1</image_id><image>");
  ASSERT_NE(first, std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_LT(first, second);
  EXPECT_EQ(text.find("(<image>./</image>)"), std::string::npos);
  EXPECT_THROW(processor->expand_prompt("only one (<image>./</image>)", both), Error);
}

// An image so elongated that a part would exceed the patches the planner budgets per vision input
// is refused, saying what to do; a wide one that slicing handles is taken.
TEST(MiniCpmvProcessor, ImagesTooElongatedForTheTowerAreRefused) {
  const MiniCpmvCase c = testing::load_minicpmv_case(kMiniCpmvCases[0]);
  const Checkpoint ck = open_checkpoint(c.model_dir());
  const auto processor = make_image_processor(ck, nullptr);
  const auto image = [](int w, int h) {
    return RgbImage{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * static_cast<size_t>(h) * 3, 128)};
  };
  const RgbImage strip = image(4000, 2);
  try {
    processor->process(std::span(&strip, 1));
    ADD_FAILURE() << "a 4000x2 image was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("too elongated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("crop it"), std::string::npos) << e.what();
  }
  const RgbImage wide = image(600, 20);
  const ProcessedImages p = processor->process(std::span(&wide, 1));
  for (const VisionGrid& g : p.batch.grids) EXPECT_LE(g.patches(), ck.config().vision.max_patches_per_input());
}

INSTANTIATE_TEST_SUITE_P(Cases, MiniCpmvModelGolden, ::testing::ValuesIn(kMiniCpmvCases));

}  // namespace
}  // namespace ferry
