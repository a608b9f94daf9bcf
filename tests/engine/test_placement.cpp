// Every test architecture under every strategy on 1-4 CPU devices: the same tokens and logits as
// one device, each device's measured peak memory matching the plan, and tight budgets honoured.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/placed_model.h"
#include "engine/plan_placement.h"
#include "engine_fixture.h"
#include "plan/strategy.h"

namespace ferry {
namespace {

using testing::SingleDevice;
using testing::TempDir;

constexpr int64_t kContext = 64;
constexpr int64_t kChunk = 12;

// A prompt longer than a chunk, so the largest step the plan reserves for really runs.
std::vector<int32_t> prompt_tokens(int vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < 2 * kChunk + 3; ++i) p.push_back((i * 37 + 5) % vocab);
  return p;
}

struct Greedy {
  std::vector<int32_t> tokens;             // greedy continuation
  std::vector<std::vector<float>> logits;  // of every step
};

Greedy greedy(Session& s, const std::vector<int32_t>& prompt, int steps) {
  Greedy r;
  std::vector<float> logits = s.eval(prompt);
  for (int i = 0; i < steps; ++i) {
    r.logits.push_back(logits);
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(next);
    logits = s.eval(std::vector<int32_t>{next});
  }
  return r;
}

using Placed = testing::PlacedModel;

PlanRequest request(const std::string& devices, Strategy strategy) {
  return testing::placement_request(devices, strategy, kContext, kChunk);
}

const char* const kDeviceLists[] = {"cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:1,cpu:2,cpu:3"};

class EveryArchEveryStrategy : public ::testing::TestWithParam<tiny::Arch> {};

TEST_P(EveryArchEveryStrategy, SameTokensAndLogitsAsOneDeviceAndPeaksAsPlanned) {
  TempDir dir(tiny::arch_name(GetParam()));
  testing::make_model(dir.str(), GetParam(), "hf", 21, DType::F32, /*layers=*/5);
  SingleDevice one(dir.str(), 1);
  const auto prompt = prompt_tokens(one.ckpt.config().vocab);
  Session reference_session(one.ckpt.spec, one.placement, one.weights, kContext, kChunk);
  const Greedy reference = greedy(reference_session, prompt, 4);

  for (Strategy strategy : {Strategy::Balanced, Strategy::Sequential, Strategy::BalancedLow0, Strategy::Auto}) {
    for (const char* list : kDeviceLists) {
      SCOPED_TRACE(std::string(strategy_name(strategy)) + " on " + list);
      // Budgets that make sequential and auto spread out: no device holds the whole model.
      PlanRequest req = request(list, strategy);
      if ((strategy == Strategy::Sequential || strategy == Strategy::Auto) && req.devices.size() > 1) {
        const Plan whole = make_plan(one.ckpt.spec, request("cpu:0", Strategy::Balanced));
        for (auto& d : req.devices) d.budget = static_cast<size_t>(whole.devices[0].total() * 3 / 5);
      }
      Placed placed(one.ckpt, req);
      Session s(one.ckpt.spec, placed.placement, placed.weights, kContext, kChunk);
      const Greedy run = greedy(s, prompt, 4);
      EXPECT_EQ(run.tokens, reference.tokens);
      for (size_t i = 0; i < run.logits.size(); ++i) {
        float diff = 0;
        for (size_t j = 0; j < run.logits[i].size(); ++j)
          diff = std::max(diff, std::abs(run.logits[i][j] - reference.logits[i][j]));
        EXPECT_LE(diff, 1e-6f) << "step " << i;
      }
      // Measured peak per device (weights + KV + the workspace the steps grew) equals the plan: the
      // planner packs the largest step's activations exactly as the executor lays them out.
      for (const auto& d : placed.plan.devices) {
        const auto peak = s.peak_bytes(d.device.id.str());
        if (d.modules.empty()) {
          EXPECT_EQ(peak, 0u) << d.device.id.str();
          continue;
        }
        EXPECT_EQ(peak, d.total() - d.reserve_bytes) << d.device.id.str();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, EveryArchEveryStrategy,
                         ::testing::Values(tiny::Arch::Llama, tiny::Arch::Qwen2, tiny::Arch::Glm, tiny::Arch::Glm4,
                                           tiny::Arch::ChatGlm),
                         [](const auto& p) { return tiny::arch_name(p.param); });

// Budgets equal to the plan's figures: the run fits, no allocation fails; one byte less on a device
// is refused at plan time, before any weight is read.
TEST(TightBudgets, ExactBudgetsRunAndOneByteLessIsRefusedAtPlanTime) {
  TempDir dir("tight");
  testing::make_model(dir.str(), tiny::Arch::Qwen2, "hf", 22, DType::F32, /*layers=*/4);
  const Checkpoint ck = open_checkpoint(dir.str());
  const Plan loose = make_plan(ck.spec, request("cpu:0,cpu:1", Strategy::Balanced));
  std::string exact;
  for (const auto& d : loose.devices)
    exact += fmt::format("{}{}={}", exact.empty() ? "" : ",", d.device.id.str(), d.total());
  {
    Placed placed(ck, request(exact, Strategy::Balanced));
    EXPECT_EQ(placed.plan.assignment, loose.assignment);
    Session s(ck.spec, placed.placement, placed.weights, kContext, kChunk);
    EXPECT_NO_THROW(greedy(s, prompt_tokens(ck.config().vocab), 3));
    for (const auto& d : placed.plan.devices) {
      const auto peak = s.peak_bytes(d.device.id.str());
      EXPECT_LE(peak, d.device.budget);
      EXPECT_EQ(peak, d.total() - d.reserve_bytes) << d.device.id.str();
    }
  }
  for (size_t shrink = 0; shrink < loose.devices.size(); ++shrink) {
    std::string tight;
    for (size_t i = 0; i < loose.devices.size(); ++i) {
      tight += fmt::format("{}{}={}", tight.empty() ? "" : ",", loose.devices[i].device.id.str(),
                           loose.devices[i].total() - (i == shrink ? 1 : 0));
    }
    // Sequential keeps the cut where it is, so the one missing byte cannot be absorbed.
    PlanRequest req = request(tight, Strategy::Custom);
    req.pinned.clear();
    for (const auto& [module, device] : loose.assignment) req.pinned.push_back(device);
    const Plan plan = make_plan(ck.spec, req);
    EXPECT_FALSE(plan.fits());
    try {
      check_plan_fits(plan, ck.spec, req);
      ADD_FAILURE() << "a budget one byte short was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
      EXPECT_NE(std::string(e.what()).find(loose.devices[shrink].device.id.str() + " needs"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("1 B over"), std::string::npos) << e.what();
    }
  }
}

// The KV cache of every dtype on two devices: each device allocates exactly the KV bytes the plan
// counted for it (q8_0: kv width / 32 blocks of 34 bytes a row), its peak is the plan's total, and
// the session's caches have the plan's dtype. The tiny model's kv width is 2 heads x 16 = 32, so
// q8_0's second kv head starts inside a block.
TEST(KvCacheDtypes, EachDeviceAllocatesTheKvBytesPlannedForIt) {
  TempDir dir("kv_dtypes");
  testing::make_model(dir.str(), tiny::Arch::Qwen2, "hf", 23, DType::F32, /*layers=*/4);
  const Checkpoint ck = open_checkpoint(dir.str());
  for (DType kv : kKvCacheDtypes) {
    SCOPED_TRACE(std::string(dtype_name(kv)) + " cache");
    PlanRequest req = request("cpu:0,cpu:1", Strategy::Balanced);
    req.limits.kv_dtype = kv;
    Placed placed(ck, req);
    const int64_t row = static_cast<int64_t>(*dtype_bytes(kv, static_cast<uint64_t>(ck.config().kv_width())));
    uint64_t planned = 0;
    for (const auto& d : placed.plan.devices) planned += d.kv_bytes;
    EXPECT_EQ(planned, static_cast<uint64_t>(2 * ck.config().n_layer * kContext * row));  // 64-byte multiples
    Session s(ck.spec, placed.placement, placed.weights, placed.plan.limits);
    EXPECT_EQ(s.kv_dtype(), kv);
    EXPECT_NO_THROW(greedy(s, prompt_tokens(ck.config().vocab), 3));
    const auto states = s.states().bytes_by_device();
    for (const auto& d : placed.plan.devices) {
      const std::string name = d.device.id.str();
      EXPECT_EQ(states.count(name) ? states.at(name) : 0u, d.kv_bytes) << name;
      EXPECT_EQ(s.peak_bytes(name), d.total() - d.reserve_bytes) << name;
    }
    const Tensor* k = s.states().find(k_cache_name(0));
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->dtype(), kv);
  }
}

// q8_0 rounds cache rows in blocks of 32: a kv width of 16 is refused by the planner and by a
// session, naming the model's dims and the fix; f16 runs.
TEST(KvCacheDtypes, Q8CacheIsRefusedForAKvWidthThatIsNotWholeBlocks) {
  TempDir dir("kv_q8_narrow");
  tiny::Options o;
  o.arch = tiny::Arch::Llama;
  o.out_dir = dir.str();
  o.format = "hf";
  o.seed = 24;
  o.kv_heads = 1;  // 1 x head_dim 16
  o.threads = 1;
  tiny::write_tiny_model(o);
  const Checkpoint ck = open_checkpoint(dir.str());
  ASSERT_EQ(ck.config().kv_width(), 16);
  PlanRequest req = request("cpu:0", Strategy::Balanced);
  req.limits.kv_dtype = DType::Q8_0;
  const std::vector<std::string_view> needles{"q8_0", "1 kv heads x head_dim 16 = 16", "multiple of 32", "f16"};
  try {
    make_plan(ck.spec, req);
    ADD_FAILURE() << "a q8_0 cache of 16-wide rows was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    for (auto n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
  req.limits.kv_dtype = DType::F16;
  Placed placed(ck, req);
  try {
    Session s(ck.spec, placed.placement, placed.weights, kContext, kChunk, DType::Q8_0);
    ADD_FAILURE() << "a session made a q8_0 cache of 16-wide rows";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    for (auto n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
  Session s(ck.spec, placed.placement, placed.weights, placed.plan.limits);
  EXPECT_NO_THROW(greedy(s, prompt_tokens(ck.config().vocab), 2));
}

}  // namespace
}  // namespace ferry
