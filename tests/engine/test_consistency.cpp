// Invariants between the ways ferry can run one model: the HF and GGUF copies of a generated
// checkpoint, one device and two, a prompt in one step and token by token.
#include <gtest/gtest.h>

#include "common/q8_activations_guard.h"
#include "engine/plan_placement.h"
#include "engine_fixture.h"
#include "plan/strategy.h"

namespace ferry {
namespace {

using testing::SingleDevice;
using testing::TempDir;

const std::vector<int32_t> kPrompt = {5, 77, 140, 31, 99, 260, 12, 180, 44};

std::vector<float> run_prompt(SingleDevice& m, const std::vector<int32_t>& prompt,
                              DType kv_dtype = RunLimits{}.kv_dtype) {
  Session s(m.ckpt.spec, m.placement, m.weights, 64, RunLimits{}.prefill_chunk, kv_dtype);
  return s.eval(prompt);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

class EveryArch : public ::testing::TestWithParam<tiny::Arch> {};

// The generator writes one model twice (GGUF q/k rows permuted for llama); ferry must read both
// to the same logits, which pins the GGUF conventions of every architecture.
TEST_P(EveryArch, HfAndGgufCopiesAgree) {
  TempDir dir(tiny::arch_name(GetParam()));
  testing::make_model(dir.str(), GetParam(), "both", 11);
  SingleDevice hf(dir.str());
  SingleDevice gguf(dir.str() + "/model.gguf");
  EXPECT_EQ(hf.ckpt.spec.parameter_count(), gguf.ckpt.spec.parameter_count());
  const auto a = run_prompt(hf, kPrompt);
  const auto b = run_prompt(gguf, kPrompt);
  EXPECT_LE(max_abs_diff(a, b), 1e-4f);
}

// Prefill of n tokens and n single-token steps fill the same cache and give the same last logits.
TEST_P(EveryArch, PromptInOneStepEqualsTokenByToken) {
  TempDir dir(tiny::arch_name(GetParam()));
  testing::make_model(dir.str(), GetParam(), "hf", 12);
  SingleDevice m(dir.str());
  const auto batch = run_prompt(m, kPrompt);
  Session s(m.ckpt.spec, m.placement, m.weights, 64);
  std::vector<float> last;
  for (int32_t id : kPrompt) last = s.eval(std::vector<int32_t>{id});
  EXPECT_LE(max_abs_diff(batch, last), 1e-4f);
}

// Split over two devices: identical logits to one device, and the crossings are counted.
TEST_P(EveryArch, TwoDevicesGiveTheSameLogitsAsOne) {
  TempDir dir(tiny::arch_name(GetParam()));
  testing::make_model(dir.str(), GetParam(), "hf", 13, DType::F32, /*layers=*/4);
  SingleDevice one(dir.str(), 1);
  const auto expected = run_prompt(one, kPrompt);

  const auto specs = parse_device_list("cpu:0,cpu:1");
  DeviceSet devices(specs, 2);
  const Plan plan = plan_balanced(one.ckpt.spec, specs, 64);
  ASSERT_FALSE(plan.devices[0].modules.empty());
  ASSERT_FALSE(plan.devices[1].modules.empty());
  const Placement placement = placement_from_plan(plan, devices);
  WeightStore weights;
  load_weights(one.ckpt, placement, weights);
  EXPECT_GT(weights.bytes_on(devices.at(0)), 0u);
  EXPECT_GT(weights.bytes_on(devices.at(1)), 0u);
  Session s(one.ckpt.spec, placement, weights, 64);
  const auto split = s.eval(kPrompt);
  EXPECT_EQ(max_abs_diff(expected, split), 0.0f) << "kernels must not depend on the device or thread count";

  // Each change of device along the module order moves the hidden state once ([T, hidden] f32).
  size_t changes = 0;
  for (size_t i = 1; i < plan.assignment.size(); ++i)
    changes += plan.assignment[i].second != plan.assignment[i - 1].second;
  const RunStats& stats = s.last_stats();
  EXPECT_EQ(stats.device_copies, changes);
  EXPECT_EQ(stats.device_bytes_moved, changes * kPrompt.size() * one.ckpt.config().hidden * sizeof(float))
      << "only the hidden state of the crossing tokens may move";
  // Each layer's KV cache lives on its layer's device.
  for (const auto& [module, index] : plan.assignment) {
    if (module.rfind("layers.", 0) != 0) continue;
    const int layer = std::stoi(module.substr(7));
    const Tensor* k = s.states().find(k_cache_name(layer));
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->device(), &devices.at(static_cast<size_t>(index))) << module;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, EveryArch,
                         ::testing::Values(tiny::Arch::Llama, tiny::Arch::Qwen2, tiny::Arch::Glm, tiny::Arch::Glm4,
                                           tiny::Arch::ChatGlm),
                         [](const auto& p) { return tiny::arch_name(p.param); });

// Quantized GGUF copies against the f32 (dequantized) HF copy of the same model: the weights are
// identical, and with activations kept f32 for q8_0 and q4_0 weights too (by default they are
// rounded to q8_0 as llama.cpp does; the text goldens check that mode), only summation order differs.
class QuantizedCopies : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizedCopies, GgufMatchesItsDequantizedTwin) {
  test::Q8ActivationsGuard exact_activations(kernels::Q8Activations::F32);
  TempDir dir("quant");
  testing::make_model(dir.str(), tiny::Arch::Llama, "both", 21, GetParam());
  SingleDevice hf(dir.str());
  SingleDevice gguf(dir.str() + "/model.gguf");
  // With an f32 KV cache: the copies differ only by summation order, which an f16 cache's rounding
  // of k and v can amplify past 1e-4 (a k element near a rounding boundary goes either way).
  EXPECT_LE(max_abs_diff(run_prompt(hf, kPrompt, DType::F32), run_prompt(gguf, kPrompt, DType::F32)), 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QuantizedCopies, ::testing::Values(DType::Q8_0, DType::Q4_0, DType::BF16, DType::F16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace ferry
