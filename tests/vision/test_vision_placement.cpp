// GLM-4V placed over 2, 3 and 4 CPU devices under every strategy, and with the vision tower pinned
// alone on its own device: the same greedy tokens as one device and logits within 1e-6, the tower
// never split, and the activations crossing devices moved by the scheduler's counted copies.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/placed_model.h"
#include "engine/plan_placement.h"
#include "plan/strategy.h"
#include "vision_golden.h"

namespace ferry {
namespace {

using testing::read_raw;

constexpr int64_t kContext = 64;
constexpr int64_t kChunk = 12;  // the 16-token expanded prompt spans two steps, the image in the first
constexpr int kSteps = 6;

using Placed = testing::PlacedModel;

PlanRequest request(const std::string& devices, Strategy strategy) {
  return testing::placement_request(devices, strategy, kContext, kChunk);
}

void expect_same_run(const testing::VisionRun& run, const testing::VisionRun& reference) {
  EXPECT_EQ(run.tokens, reference.tokens);
  EXPECT_LE(testing::max_abs_diff(run.image_embeds, reference.image_embeds), 1e-6f);
  for (size_t i = 0; i < run.step_logits.size(); ++i) {
    EXPECT_LE(testing::max_abs_diff(run.step_logits[i], reference.step_logits[i]), 1e-6f) << "step " << i;
  }
}

// Each device's measured peak (weights, KV cache, the workspace and the image embeddings held
// between the vision and prefill steps) equals the plan, which packs those steps' graphs as the
// executor does. The session's workspaces were not reserved up front: they grew to what the steps
// needed, so this checks the planner's simulation itself. The plan assumes the embeddings stay on
// the projector's device (run_greedy_on_device); a run that brings them back to host
// (embeds_on_device false) holds them inside the prefill step's workspace instead, at most the plan.
void expect_peaks_as_planned(const Placed& placed, const Session& s, bool embeds_on_device = true) {
  for (const auto& d : placed.plan.devices) {
    const auto peak = s.peak_bytes(d.device.id.str());
    if (d.modules.empty()) {
      EXPECT_EQ(peak, 0u) << d.device.id.str();
      continue;
    }
    const uint64_t planned = d.total() - d.reserve_bytes;
    if (embeds_on_device) {
      EXPECT_EQ(peak, planned) << d.device.id.str() << "\n" << placed.plan.describe();
    } else {
      EXPECT_LE(peak, planned) << d.device.id.str();
      EXPECT_GE(peak, planned - d.image_embeds_bytes) << d.device.id.str();
    }
  }
}

class VisionPlacement : public ::testing::TestWithParam<const char*> {};

TEST_P(VisionPlacement, EveryStrategyOnTwoToFourDevicesMatchesOneDevice) {
  const std::string dir = testing::vision_case_dir(GetParam());
  const Checkpoint ck = open_checkpoint(dir + "/model");
  const ModelConfig& c = ck.config();
  const auto prompt = read_raw<int32_t>(dir + "/prompt_ids.i32.bin");
  const VisionBatch pixels = testing::pixel_batch(read_raw<float>(dir + "/pixel_values.f32.bin"), c.vision);

  Placed one(ck, request("cpu:0", Strategy::Balanced));
  Session reference_session(ck.spec, one.placement, one.weights, kContext, kChunk);
  const testing::VisionRun reference = testing::run_greedy(reference_session, c, prompt, pixels, kSteps);
  auto golden_ids = testing::read_expected(dir)["greedy_ids"].get<std::vector<int32_t>>();
  golden_ids.resize(kSteps);
  EXPECT_EQ(reference.tokens, golden_ids);

  const size_t planned_one = one.plan.devices[0].total();
  expect_peaks_as_planned(one, reference_session, /*embeds_on_device=*/false);

  for (Strategy strategy : {Strategy::Balanced, Strategy::Sequential, Strategy::BalancedLow0, Strategy::Auto}) {
    for (const char* list : {"cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:1,cpu:2,cpu:3"}) {
      SCOPED_TRACE(std::string(strategy_name(strategy)) + " on " + list);
      PlanRequest req = request(list, strategy);
      // Budgets under the whole model make sequential and auto spread out too.
      if (strategy == Strategy::Sequential || strategy == Strategy::Auto) {
        for (auto& d : req.devices) d.budget = planned_one * 3 / 5;
      }
      Placed placed(ck, req);
      Session s(ck.spec, placed.placement, placed.weights, kContext, kChunk);
      expect_same_run(testing::run_greedy_on_device(s, prompt, pixels, kSteps), reference);
      expect_peaks_as_planned(placed, s);
    }
  }
}

// Custom device maps: the tower alone on one device; the tower, the projector and the first
// decoder layers each on another device.
TEST_P(VisionPlacement, TowerAloneOnItsDeviceAndTowerApartFromTheFirstLayers) {
  const std::string dir = testing::vision_case_dir(GetParam());
  const Checkpoint ck = open_checkpoint(dir + "/model");
  const ModelConfig& c = ck.config();
  const auto prompt = read_raw<int32_t>(dir + "/prompt_ids.i32.bin");
  const VisionBatch pixels = testing::pixel_batch(read_raw<float>(dir + "/pixel_values.f32.bin"), c.vision);
  Placed one(ck, request("cpu:0", Strategy::Balanced));
  Session reference_session(ck.spec, one.placement, one.weights, kContext, kChunk);
  const testing::VisionRun reference = testing::run_greedy(reference_session, c, prompt, pixels, kSteps);

  // Units in model order: vision, projector, embed, layers.0, layers.1, head.
  ASSERT_EQ(ck.spec.modules[0].name, vision_module());
  ASSERT_EQ(ck.spec.modules[1].name, projector_module());
  const std::vector<std::pair<std::string, std::vector<std::optional<int>>>> maps = {
      {"cpu:0,cpu:1", {1, 0, 0, 0, 0, 0}},
      {"cpu:0,cpu:1,cpu:2", {2, 0, 1, 1, 1, 1}},
      {"cpu:0,cpu:1,cpu:2,cpu:3", {0, 1, 2, 2, 3, 3}},
  };
  for (const auto& [list, pins] : maps) {
    SCOPED_TRACE(list);
    PlanRequest req = request(list, Strategy::Custom);
    req.pinned = pins;
    Placed placed(ck, req);
    const int tower = placed.plan.device_index_of(vision_module());
    EXPECT_EQ(tower, *pins[0]);
    for (const auto& [module, device] : placed.plan.assignment) {
      if (module != vision_module()) {
        EXPECT_TRUE(device != tower || *pins[0] != 1) << module << " shares the tower's device";
      }
    }
    Session s(ck.spec, placed.placement, placed.weights, kContext, kChunk);
    const testing::VisionRun run = testing::run_greedy_on_device(s, prompt, pixels, kSteps);
    expect_same_run(run, reference);
    expect_peaks_as_planned(placed, s);
    // The image embeddings go from the projector's device to the text embedding's in one step
    // (here: the whole prompt), device to device, never through host memory.
    {
      Session whole(ck.spec, placed.placement, placed.weights, kContext, kContext);
      whole.attach_images(whole.encode_images_on_device(pixels), 1);
      whole.eval(prompt);
      const std::string projector = fmt::format("cpu:{}", placed.plan.device_index_of(projector_module()));
      const std::string embed = fmt::format("cpu:{}", placed.plan.device_index_of(embed_module()));
      std::vector<std::string> moves;
      for (const auto& e : whole.last_stats().edges) {
        if (e.value == "image_embeds") moves.push_back(e.from + "->" + e.to);
      }
      if (projector == embed) {
        EXPECT_TRUE(moves.empty()) << "read in place on " << embed;
      } else {
        EXPECT_EQ(moves, std::vector<std::string>{projector + "->" + embed});
      }
    }
    // The tower's output reached the projector's device through the scheduler's copies.
    if (*pins[0] != *pins[1]) {
      s.encode_images(pixels);
      const RunStats& stats = s.last_stats();
      EXPECT_GE(stats.device_copies, 1u);
      bool tower_to_projector = false;
      for (const auto& e : stats.edges) {
        tower_to_projector = tower_to_projector ||
                             (e.from == fmt::format("cpu:{}", *pins[0]) && e.to == fmt::format("cpu:{}", *pins[1]));
      }
      EXPECT_TRUE(tower_to_projector);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, VisionPlacement, ::testing::ValuesIn(testing::kVisionCases),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace ferry
