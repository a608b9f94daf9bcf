// Every text golden and the GLM-4V and MiniCPM-V goldens on Vulkan: on vulkan:0 alone, and split over two
// partitions of it and a CPU device (vulkan:0.0, vulkan:0.1, cpu:0) as every placement strategy
// plans it. Greedy ids identical, logits within the cases' tolerances, as on the CPU.
#if FERRY_HAVE_VULKAN  // without the backend, test_vulkan_cli.cpp says why the suite skips
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

#include "backends/registry.h"
#include "backends/vulkan/lowering.h"
#include "engine/plan_placement.h"
#include "engine/weight_loader.h"
#include "golden/text_cases.h"
#include "minicpmv/minicpmv_case.h"
#include "models/vision.h"
#include "plan/strategy.h"
#include "vision/vision_golden.h"
#include "vulkan_available.h"

namespace ferry {
namespace {

using testing::TextCase;

constexpr int64_t kContext = 256;  // the goldens' sessions, or the model's limit when it is smaller

// Where a case runs: vulkan:0 alone, or vulkan:0.0 + vulkan:0.1 + cpu:0 under a strategy.
struct Where {
  std::optional<Strategy> strategy;  // none: vulkan:0 alone
  std::string name() const {
    return strategy ? fmt::format("vulkan:0.0 + vulkan:0.1 + cpu:0, {}", strategy_name(*strategy)) : "vulkan:0";
  }
};

std::vector<Where> placements() {
  std::vector<Where> out{{}};
  for (Strategy s :
       {Strategy::Auto, Strategy::Balanced, Strategy::BalancedLow0, Strategy::Sequential, Strategy::Custom})
    out.push_back({s});
  return out;
}

// A golden model loaded where `setup` says, by the planner's own placement.
struct Loaded {
  Checkpoint ckpt;
  std::unique_ptr<DeviceSet> devices;
  Plan plan;
  Placement placement;
  WeightStore weights;
  int64_t context = 0;

  Loaded(const std::string& path, const Where& setup) : ckpt(open_checkpoint(path)) {
    context = std::min<int64_t>(kContext, ckpt.spec.config.max_context);
    RunLimits limits;
    limits.max_context = context;
    limits.kv_dtype = DType::F32;  // the goldens' logit tolerances hold for an f32 cache
    std::vector<DeviceSpec> specs;
    PlanRequest request;
    request.limits = limits;
    if (!setup.strategy) {
      specs = {DeviceSpec{DeviceId::parse("vulkan:0"), Allocator::kUnlimited, 1}};
    } else {
      // Each device holds its workspace and 55% of the weights and KV cache: no device takes the
      // model alone, so every strategy splits it (and each device's allocator enforces its budget
      // at run time).
      request.devices = {DeviceSpec{DeviceId::parse("cpu:0")}};
      const DevicePlan whole = make_plan(ckpt.spec, request).devices.at(0);
      size_t budget = static_cast<size_t>(whole.total() - (whole.weight_bytes + whole.kv_bytes) * 45 / 100);
      // A one-layer model's layer can be more than 55% of it: each device then holds at least its
      // workspace and the two largest units (the custom map below may pin the head beside the
      // layer), still not the whole model.
      std::vector<uint64_t> unit_bytes;
      for (const UnitCost& u : unit_costs(ckpt.spec, limits)) unit_bytes.push_back(u.weight_bytes + u.kv_bytes);
      std::sort(unit_bytes.rbegin(), unit_bytes.rend());
      if (unit_bytes.size() >= 2) {
        budget = std::max(budget, static_cast<size_t>(whole.total() - whole.weight_bytes - whole.kv_bytes +
                                                      unit_bytes[0] + unit_bytes[1]));
      }
      specs = {DeviceSpec{DeviceId::parse("vulkan:0.0"), budget, 1},
               DeviceSpec{DeviceId::parse("vulkan:0.1"), budget, 1}, DeviceSpec{DeviceId::parse("cpu:0"), budget, 2}};
      request.strategy = *setup.strategy;
      if (request.strategy == Strategy::Custom) {
        // A device map pinning the first unit to the CPU and the last to the first GPU partition
        // (crossings into and out of the CPU at both ends); the rest balanced. A head tied to the
        // embedding follows it (a map that parts them is refused).
        const size_t units = unit_costs(ckpt.spec, limits).size();
        request.pinned.assign(units, std::nullopt);
        request.pinned.front() = 2;
        if (!ckpt.spec.config.tied_embeddings) request.pinned.back() = 0;
      }
    }
    request.devices = specs;
    plan = make_plan(ckpt.spec, request);
    check_plan_fits(plan, ckpt.spec, request);
    devices = std::make_unique<DeviceSet>(specs, 2);
    placement = placement_from_plan(plan, *devices);
    load_weights(ckpt, placement, weights);
  }

  size_t devices_used() const {
    std::set<int> used;
    for (const auto& [module, device] : plan.assignment) used.insert(device);
    return used.size();
  }
};

class VulkanGoldens : public testing::VulkanTest<::testing::Test> {};

void check_text_case(const TextCase& c, const std::vector<Where>& where) {
  for (const Where& setup : where) {
    SCOPED_TRACE(c.label + " from " + c.model_path + " on " + setup.name());
    Loaded m(c.model_path, setup);
    if (setup.strategy) {
      EXPECT_GE(m.devices_used(), 2u) << m.plan.describe();
    }
    const std::vector<float> diffs = testing::run_text_case(m.ckpt, m.placement, m.weights, c.expect, m.context);
    if (c.from_gguf && c.weights_dtype != "F32" && !diffs.empty()) {
      const auto within = std::count_if(diffs.begin(), diffs.end(), [](float d) { return d <= 1e-5f; });
      std::cout << fmt::format(
          "[ vulkan   ] {} {} on {}: largest logit difference {:.3g} over {} step rows, {} within 1e-5 "
          "(tolerance {})\n",
          c.model_path.substr(c.model_path.rfind("/text/") + 6), c.label, setup.name(),
          *std::max_element(diffs.begin(), diffs.end()), diffs.size(), within, c.expect.tolerance);
    }
  }
}

// Whether the Vulkan backend has kernels for every weight of a checkpoint (as matmul weights and
// embedding tables).
bool vulkan_reads_every_weight(const std::string& path) {
  const Checkpoint ckpt = open_checkpoint(path);
  for (const TensorRecord& t : ckpt.tensors.all()) {
    const DType matmul[] = {DType::F32, t.dtype};
    const DType embedding[] = {t.dtype, DType::I32};
    if (!vulkan::supports(Op::MatMul, matmul) && !vulkan::supports(Op::Embedding, embedding)) return false;
  }
  return true;
}

// Every case from both copies of its model, the GGUF copies of the quantized cases included (every
// GGUF weight type has shaders): each against its own golden's tolerance and steps, as on the CPU.
// The quantized GGUF cases print each placement's largest logit difference over the step rows.
// The F32 cases run on every placement (the architectures' seams); the quantized ones, whose
// subject is the weight types, on one device and one split (lavapipe keeps CI's time in bounds).
TEST_F(VulkanGoldens, EveryTextCase) {
  if (no_device()) return;
  const std::vector<Where> every = placements();
  const std::vector<Where> one_and_a_split = {Where{}, Where{Strategy::Balanced}};
  for (const char* name : testing::kTextCases) {
    const std::vector<TextCase> cases = testing::text_cases(name);
    const bool quantized =
        std::any_of(cases.begin(), cases.end(), [](const TextCase& c) { return c.weights_dtype != "F32"; });
    for (const TextCase& c : cases) {
      if (c.from_gguf) {
        ASSERT_TRUE(vulkan_reads_every_weight(c.model_path)) << c.model_path;
      }
      check_text_case(c, quantized ? one_and_a_split : every);
    }
  }
}

// The F32 text cases (their GGUF copies, both prompts) on vulkan:0 with an f16 KV cache, RunLimits'
// default: free-running greedy keeps every reference id, as on the CPU (tests/golden
// TextGoldenKvCache).
TEST_F(VulkanGoldens, F32TextCasesKeepTheirGreedyIdsWithAnF16Cache) {
  if (no_device()) return;
  for (const char* name : testing::kTextCases) {
    std::unique_ptr<Loaded> m;
    for (const TextCase& c : testing::text_cases(name)) {
      if (c.weights_dtype != "F32" || !c.from_gguf) continue;
      SCOPED_TRACE(c.label + " from " + c.model_path + " on vulkan:0, f16 KV cache");
      if (!m) m = std::make_unique<Loaded>(c.model_path, Where{});
      const testing::CacheRun r =
          testing::run_greedy_with_cache(m->ckpt, m->placement, m->weights, c.expect, DType::F16, m->context);
      EXPECT_TRUE(r.all_ids_match()) << r.ids_matching << " of " << r.steps << " ids";
      EXPECT_LE(r.max_logit_diff, 0.04f);
    }
  }
}

TEST_F(VulkanGoldens, ChatGlmAgainstThudmOriginalCode) {
  if (no_device()) return;
  for (const char* name : testing::kChatGlmCases) check_text_case(testing::chatglm_case(name), placements());
}

// GLM-4V: the projected image embeddings, the greedy tokens and the first logits, with the
// embeddings kept on the projector's device and attached (the CLI's path).
TEST_F(VulkanGoldens, Glm4vAgainstThudmOriginalCode) {
  if (no_device()) return;
  for (const char* name : testing::kVisionCases) {
    const std::string dir = testing::vision_case_dir(name);
    const auto expected = testing::read_expected(dir);
    const auto prompt = testing::read_raw<int32_t>(dir + "/prompt_ids.i32.bin");
    const auto pixels = testing::read_raw<float>(dir + "/pixel_values.f32.bin");
    const float logits_tolerance = 1e-4f * std::max(1.0f, expected["max_abs_logit"].get<float>());
    for (const Where& setup : placements()) {
      SCOPED_TRACE(std::string(name) + " on " + setup.name());
      Loaded m(dir + "/model", setup);
      if (setup.strategy) {
        EXPECT_GE(m.devices_used(), 2u) << m.plan.describe();
      }
      Session s(m.ckpt.spec, m.placement, m.weights, m.plan.limits);
      const VisionBatch pixel_input = testing::pixel_batch(pixels, m.ckpt.config().vision);
      Tensor embeds = s.encode_images_on_device(pixel_input);
      ASSERT_NE(embeds.device(), nullptr);
      EXPECT_EQ(embeds.device()->id(), m.placement.module_device.at(projector_module())->id());
      std::vector<float> host_embeds(static_cast<size_t>(embeds.numel()));
      embeds.device()->read(embeds, host_embeds.data());
      embeds.device()->synchronize();  // the read is queued
      EXPECT_LE(testing::max_abs_diff(host_embeds, testing::read_raw<float>(dir + "/vision_embeds.f32.bin")), 1e-5f);
      s.attach_images(std::move(embeds), 1);
      testing::VisionRun run;
      testing::continue_greedy(s, s.eval(prompt), expected["greedy_new_tokens"].get<int>(), run);
      EXPECT_EQ(run.tokens, expected["greedy_ids"].get<std::vector<int32_t>>());
      EXPECT_LE(testing::max_abs_diff(run.step_logits[0], testing::read_raw<float>(dir + "/logits_last.f32.bin")),
                logits_tolerance);
    }
  }
}

// MiniCPM-V: the tower and resampler's embeddings from the reference pixels, kept on the
// resampler's device and attached, then every greedy token and the first logits.
TEST_F(VulkanGoldens, MiniCpmvAgainstOpenBmbOriginalCode) {
  if (no_device()) return;
  for (const char* name : testing::kMiniCpmvCases) {
    const testing::MiniCpmvCase c = testing::load_minicpmv_case(name);
    const VisionBatch batch = testing::reference_vision_batch(c);
    const std::vector<int32_t> ids = c.i32("input_ids");
    const float logits_tolerance = 1e-4f * std::max(1.0f, c.expected.at("max_abs_logit").get<float>());
    for (const Where& setup : placements()) {
      SCOPED_TRACE(std::string(name) + " on " + setup.name());
      Loaded m(c.model_dir(), setup);
      if (setup.strategy) {
        EXPECT_GE(m.devices_used(), 2u) << m.plan.describe();
      }
      Session s(m.ckpt.spec, m.placement, m.weights, m.plan.limits);
      Tensor embeds = s.encode_images_on_device(batch);
      ASSERT_NE(embeds.device(), nullptr);
      EXPECT_EQ(embeds.device()->id(), m.placement.module_device.at(projector_module())->id());
      std::vector<float> host_embeds(static_cast<size_t>(embeds.numel()));
      embeds.device()->read(embeds, host_embeds.data());
      embeds.device()->synchronize();  // the read is queued
      EXPECT_LE(testing::max_abs_diff(host_embeds, c.f32("vision_embeds")), 1e-4f);
      s.attach_images(std::move(embeds), static_cast<int64_t>(batch.grids.size()));
      testing::VisionRun run;
      testing::continue_greedy(s, s.eval(ids), c.expected.at("greedy_new_tokens").get<int>(), run);
      EXPECT_EQ(run.tokens, c.expected.at("greedy_ids").get<std::vector<int32_t>>());
      EXPECT_LE(testing::max_abs_diff(run.step_logits[0], c.f32("logits_last")), logits_tolerance);
    }
  }
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAVE_VULKAN
