// MiniCPM-V placed over 1 to 4 CPU devices under every strategy and with the tower and the
// resampler pinned apart: the golden greedy tokens, the one-device logits, the tower and the
// resampler each whole on one device, and each device's peak as planned.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "common/placed_model.h"
#include "engine/checkpoint.h"
#include "engine/plan_placement.h"
#include "engine/session.h"
#include "engine/weight_loader.h"
#include "minicpmv_case.h"
#include "plan/plan.h"
#include "plan/strategy.h"

namespace ferry {
namespace {

using testing::MiniCpmvCase;

constexpr int64_t kContext = 160;
constexpr int64_t kChunk = 40;  // the slice2x2 prompt's image spans fall into three prefill steps

using Placed = testing::PlacedModel;

PlanRequest request(const std::string& devices, Strategy strategy) {
  return testing::placement_request(devices, strategy, kContext, kChunk);
}

VisionBatch reference_batch(const MiniCpmvCase& c) {
  return testing::reference_vision_batch(c);
}

struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

GreedyRun run_greedy(Session& s, const VisionBatch& batch, const std::vector<int32_t>& ids, int steps) {
  GreedyRun r;
  s.attach_images(s.encode_images_on_device(batch), static_cast<int64_t>(batch.grids.size()));
  std::vector<float> logits = s.eval(ids);
  for (int i = 0; i < steps; ++i) {
    r.logits.push_back(logits);
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(next);
    if (i + 1 < steps) logits = s.eval(std::vector<int32_t>{next});
  }
  return r;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

void expect_same_run(const GreedyRun& run, const GreedyRun& reference) {
  EXPECT_EQ(run.tokens, reference.tokens);
  for (size_t i = 0; i < std::min(run.logits.size(), reference.logits.size()); ++i) {
    EXPECT_LE(max_abs_diff(run.logits[i], reference.logits[i]), 1e-5f) << "step " << i;
  }
}

// Each device's measured peak (weights, KV cache, workspace, the image embeddings held between the
// vision step and the prefill) is at most what the plan reserved, and the plan's vision workspace
// is not an overestimate of more than the embeddings.
void expect_peaks_within_plan(const Placed& placed, const Session& s) {
  for (const auto& d : placed.plan.devices) {
    const auto peak = s.peak_bytes(d.device.id.str());
    if (d.modules.empty()) {
      EXPECT_EQ(peak, 0u) << d.device.id.str();
      continue;
    }
    EXPECT_LE(peak, d.total() - d.reserve_bytes) << d.device.id.str() << "\n" << placed.plan.describe();
  }
}

class MiniCpmvPlacement : public ::testing::TestWithParam<const char*> {
 protected:
  MiniCpmvCase c = testing::load_minicpmv_case(GetParam());
};

TEST_P(MiniCpmvPlacement, EveryStrategyOnOneToFourDevicesGivesTheGoldenTokens) {
  const Checkpoint ck = open_checkpoint(c.model_dir());
  const VisionBatch batch = reference_batch(c);
  const std::vector<int32_t> ids = c.i32("input_ids");
  const int steps = c.expected.at("greedy_new_tokens").get<int>();

  Placed one(ck, request("cpu:0", Strategy::Balanced));
  Session reference_session(ck.spec, one.placement, one.weights, kContext, kChunk);
  const GreedyRun reference = run_greedy(reference_session, batch, ids, steps);
  EXPECT_EQ(reference.tokens, c.expected.at("greedy_ids").get<std::vector<int32_t>>());
  expect_peaks_within_plan(one, reference_session);

  const size_t planned_one = one.plan.devices[0].total();
  for (Strategy strategy : {Strategy::Balanced, Strategy::Sequential, Strategy::BalancedLow0, Strategy::Auto}) {
    for (const char* list : {"cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:1,cpu:2,cpu:3"}) {
      SCOPED_TRACE(std::string(strategy_name(strategy)) + " on " + list);
      PlanRequest req = request(list, strategy);
      // Budgets under the whole model make sequential and auto spread out too.
      if (strategy == Strategy::Sequential || strategy == Strategy::Auto) {
        const size_t share = req.devices.size() == 2 ? 9 : 6;  // tenths of the one-device plan
        for (auto& d : req.devices) d.budget = planned_one * share / 10;
      }
      Placed placed(ck, req);
      std::set<int> used;
      for (const auto& [module, device] : placed.plan.assignment) used.insert(device);
      EXPECT_GE(used.size(), 2u) << placed.plan.describe();
      Session s(ck.spec, placed.placement, placed.weights, kContext, kChunk);
      expect_same_run(run_greedy(s, batch, ids, steps), reference);
      expect_peaks_within_plan(placed, s);
    }
  }
}

// The tower, the resampler and the text model on three devices, and the tower alone: the image
// features cross from the tower to the resampler, and the embeddings from the resampler to the
// text embedding, by the scheduler's copies.
TEST_P(MiniCpmvPlacement, TowerAndResamplerPinnedApart) {
  const Checkpoint ck = open_checkpoint(c.model_dir());
  const VisionBatch batch = reference_batch(c);
  const std::vector<int32_t> ids = c.i32("input_ids");
  ASSERT_EQ(ck.spec.modules[0].name, vision_module());
  ASSERT_EQ(ck.spec.modules[1].name, projector_module());
  const size_t units = ck.spec.modules.size();
  for (const auto& [list, tower, resampler, text] :
       std::vector<std::tuple<std::string, int, int, int>>{{"cpu:0,cpu:1,cpu:2", 2, 1, 0}, {"cpu:0,cpu:1", 1, 0, 0}}) {
    SCOPED_TRACE(list);
    PlanRequest req = request(list, Strategy::Custom);
    req.pinned.assign(units, text);
    req.pinned[0] = tower;
    req.pinned[1] = resampler;
    Placed placed(ck, req);
    EXPECT_EQ(placed.plan.device_index_of(vision_module()), tower);
    EXPECT_EQ(placed.plan.device_index_of(projector_module()), resampler);
    Session s(ck.spec, placed.placement, placed.weights, kContext, kChunk);
    const GreedyRun run = run_greedy(s, batch, ids, c.expected.at("greedy_new_tokens").get<int>());
    EXPECT_EQ(run.tokens, c.expected.at("greedy_ids").get<std::vector<int32_t>>());
    s.encode_images(batch);
    bool tower_to_resampler = false;
    for (const auto& e : s.last_stats().edges) {
      tower_to_resampler =
          tower_to_resampler || (e.from == fmt::format("cpu:{}", tower) && e.to == fmt::format("cpu:{}", resampler));
    }
    EXPECT_EQ(tower_to_resampler, tower != resampler);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MiniCpmvPlacement, ::testing::ValuesIn(testing::kMiniCpmvCases));

}  // namespace
}  // namespace ferry
