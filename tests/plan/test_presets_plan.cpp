// Planning real published models from their config.json alone (bundled presets), on devices ferry
// cannot run on (cuda:N): the figures a user reads before buying or renting cards.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "engine/model_config_reader.h"
#include "formats/json_file.h"
#include "models/presets.h"
#include "plan/device_map.h"
#include "plan/plan_json.h"
#include "plan/strategy.h"

namespace ferry {
namespace {

using testing::expect_error;

ModelSpec preset_spec(const std::string& name, DType dtype = DType::BF16) {
  const auto text = preset_config(name);
  EXPECT_TRUE(text.has_value()) << name;
  const auto json = parse_json_text(*text, name);
  return make_decoder_spec_from_config(model_config_from_hf(json, nullptr, name), dtype, name);
}

PlanRequest request_for(const std::string& devices, int64_t context, Strategy strategy = Strategy::Balanced) {
  PlanRequest r;
  r.devices = parse_device_list(devices);
  r.limits.max_context = context;
  r.strategy = strategy;
  return r;
}

// Parameter counts of the published models (model cards: 9.40B, 13.9B, 6.24B, 8.03B, 7.62B).
TEST(Presets, ParameterCountsMatchThePublishedModels) {
  const std::vector<std::pair<std::string, double>> expected{{"glm-4-9b-chat", 9.40e9},
                                                             {"glm-4v-9b", 13.9e9},
                                                             {"chatglm3-6b", 6.24e9},
                                                             {"llama-3-8b", 8.03e9},
                                                             {"qwen2-7b", 7.62e9}};
  for (const auto& [name, params] : expected) {
    const double n = static_cast<double>(preset_spec(name).parameter_count());
    EXPECT_NEAR(n / params, 1.0, 0.01) << name << ": " << n;
  }
}

// Weight bytes follow from the parameter count and the dtype: bf16 two bytes a parameter, q8_0
// 34 bytes per 32 for every matrix.
TEST(Presets, WeightBytesFollowTheDtype) {
  const ModelSpec bf16 = preset_spec("llama-3-8b");
  const Plan p = make_plan(bf16, request_for("cuda:0", 4096));
  const double params = static_cast<double>(bf16.parameter_count());
  EXPECT_NEAR(static_cast<double>(p.devices[0].weight_bytes) / (2.0 * params), 1.0, 0.001);
  const Plan q = make_plan(preset_spec("llama-3-8b", DType::Q8_0), request_for("cuda:0", 4096));
  EXPECT_NEAR(static_cast<double>(q.devices[0].weight_bytes) / (34.0 / 32.0 * params), 1.0, 0.001);
  // KV cache: 32 layers x 2 (k, v) x 8 heads x 128 x 4096 tokens x f16 (RunLimits' default).
  EXPECT_EQ(p.devices[0].kv_bytes, 32ull * 2 * 8 * 128 * 4096 * 2);
}

// KV bytes are exact for every cache dtype: rows of kv width elements (q8_0: kv width / 32 blocks
// of 34 bytes), context rows, a k and a v tensor per layer, per sequence.
TEST(Presets, KvBytesFollowTheKvDtype) {
  const ModelSpec spec = preset_spec("llama-3-8b");
  const uint64_t rows = 32ull * 2 * 4096 * 3;  // layers x (k, v) x context x batch
  const uint64_t width = 8 * 128;
  const std::pair<DType, uint64_t> row_bytes[] = {
      {DType::F32, width * 4}, {DType::F16, width * 2}, {DType::BF16, width * 2}, {DType::Q8_0, width / 32 * 34}};
  for (const auto& [kv, bytes] : row_bytes) {
    PlanRequest r = request_for("cuda:0", 4096);
    r.limits.kv_dtype = kv;
    r.limits.max_batch = 3;
    const Plan p = make_plan(spec, r);
    EXPECT_EQ(p.devices[0].kv_bytes, rows * bytes) << dtype_name(kv);
    EXPECT_NE(p.describe().find(fmt::format("{} KV cache", dtype_name(kv))), std::string::npos) << p.describe();
  }
}

// q8_0 needs cache rows of whole blocks: a kv width that is not a multiple of 32 is refused at plan
// time, naming the model's dims and the fix.
TEST(Presets, Q8CacheNeedsAKvWidthOfWholeBlocks) {
  ModelSpec spec = preset_spec("llama-3-8b");
  spec.config.head_dim = 120;  // 8 kv heads x 120 = 960 = 30 blocks: fine
  PlanRequest r = request_for("cuda:0", 4096);
  r.limits.kv_dtype = DType::Q8_0;
  EXPECT_NO_THROW(unit_costs(spec, r.limits));
  spec.config.head_dim = 98;  // 784: not whole blocks
  expect_error([&] { unit_costs(spec, r.limits); }, ErrorKind::Usage,
               {"q8_0", "8 kv heads x head_dim 98 = 784", "multiple of 32", "f16"});
  r.limits.kv_dtype = DType::F16;
  EXPECT_NO_THROW(unit_costs(spec, r.limits));
  r.limits.kv_dtype = DType::Q4_0;
  expect_error([&] { unit_costs(spec, r.limits); }, ErrorKind::Usage, {"q4_0", "f32, f16, bf16 or q8_0"});
}

TEST(Presets, Glm4vOnFour24GiBCardsKeepsTheTowerWholeAndFits) {
  const ModelSpec spec = preset_spec("glm-4v-9b");
  const PlanRequest r = request_for("cuda:0=24GiB,cuda:1=24GiB,cuda:2=24GiB,cuda:3=24GiB", 8192);
  const Plan plan = make_plan(spec, r);
  EXPECT_TRUE(plan.fits()) << plan.describe();
  EXPECT_NO_THROW(check_plan_fits(plan, spec, r));
  // The tower is one unit on one device, with its activations budgeted there.
  const int tower = plan.device_index_of("vision");
  ASSERT_GE(tower, 0);
  EXPECT_GT(plan.devices[static_cast<size_t>(tower)].workspace_bytes, 500ull << 20) << plan.describe();
  EXPECT_GT(plan.devices[static_cast<size_t>(tower)].vision_bytes, 500ull << 20) << plan.describe();
  EXPECT_NE(plan.describe().find("vision tower on cuda:"), std::string::npos) << plan.describe();
}

TEST(Presets, Glm4vOnTwo12GiBCardsInBf16IsRefusedWithTheShortfallAndQuantizedWeights) {
  const ModelSpec spec = preset_spec("glm-4v-9b");
  const PlanRequest r = request_for("cuda:0=12GiB,cuda:1=12GiB", 8192);
  const Plan plan = make_plan(spec, r);
  EXPECT_FALSE(plan.fits());
  const std::string msg =
      expect_error([&] { check_plan_fits(plan, spec, r); }, ErrorKind::OutOfMemory, {"over", "q8_0", "cuda:"});
  EXPECT_NE(msg.find("budget is 12.00 GiB"), std::string::npos) << msg;
  // The q8_0 suggestion is real: that plan fits.
  PlanRequest q = r;
  q.limits.weight_quant = WeightQuant{DType::Q8_0};
  EXPECT_TRUE(make_plan(spec, q).fits());
}

// A budget one byte below a device's planned total is refused at plan time.
TEST(Budgets, OneByteTooSmallIsRefused) {
  const ModelSpec spec = preset_spec("qwen2-7b");
  const Plan loose = make_plan(spec, request_for("cuda:0,cuda:1", 4096));
  std::vector<std::string> entries;
  for (const auto& d : loose.devices) entries.push_back(fmt::format("{}={}", d.device.id.str(), d.total()));
  const std::string tight = fmt::format("{}", fmt::join(entries, ","));
  const PlanRequest exact = request_for(tight, 4096);
  const Plan fits = make_plan(spec, exact);
  EXPECT_TRUE(fits.fits()) << fits.describe();
  EXPECT_EQ(fits.assignment, loose.assignment);
  const std::string short_by_one =
      fmt::format("cuda:0={},cuda:1={}", loose.devices[0].total() - 1, loose.devices[1].total());
  const PlanRequest too_small = request_for(short_by_one, 4096, Strategy::Sequential);
  const Plan refused = make_plan(spec, too_small);
  if (!refused.fits()) {
    expect_error([&] { check_plan_fits(refused, spec, too_small); }, ErrorKind::OutOfMemory, {"cuda:"});
  } else {
    // A strategy may move a layer to make room; then the total must still be within budget everywhere.
    for (const auto& d : refused.devices) EXPECT_LE(d.total(), d.device.budget);
  }
}

TEST(Strategies, EveryStrategyPlacesEveryUnitContiguously) {
  const ModelSpec spec = preset_spec("glm-4-9b-chat");
  for (Strategy s : {Strategy::Auto, Strategy::Balanced, Strategy::BalancedLow0, Strategy::Sequential}) {
    const Plan p = make_plan(spec, request_for("cuda:0=24GiB,cuda:1=24GiB,cuda:2=24GiB", 8192, s));
    ASSERT_EQ(p.assignment.size(), spec.modules.size());
    for (size_t i = 1; i < p.assignment.size(); ++i) {
      EXPECT_GE(p.assignment[i].second, p.assignment[i - 1].second)
          << strategy_name(s) << " at " << p.assignment[i].first;
    }
    EXPECT_TRUE(p.fits()) << strategy_name(s) << "\n" << p.describe();
  }
  // auto: the fewest devices that fit (it fits on one 24 GiB card in bf16 at 8k? no: 18.8 GiB + KV).
  const Plan a = make_plan(spec, request_for("cuda:0=80GiB,cuda:1=80GiB", 8192, Strategy::Auto));
  EXPECT_EQ(a.crossings.size(), 0u) << a.describe();
  // balanced_low_0: device 0 keeps only the embedding.
  const Plan low0 =
      make_plan(spec, request_for("cuda:0=24GiB,cuda:1=24GiB,cuda:2=24GiB", 8192, Strategy::BalancedLow0));
  EXPECT_EQ(low0.devices[0].modules, std::vector<std::string>{"embed"});
  // sequential fills cuda:0 first.
  const Plan seq = make_plan(spec, request_for("cuda:0=24GiB,cuda:1=24GiB,cuda:2=24GiB", 8192, Strategy::Sequential));
  EXPECT_GT(seq.devices[0].total(), seq.devices[1].total());
  EXPECT_TRUE(seq.devices[2].modules.empty());
}

TEST(Strategies, BalancedGivesUnequalDevicesEqualSharesUpToTheirBudget) {
  const ModelSpec spec = preset_spec("llama-3-8b");
  const Plan p = make_plan(spec, request_for("cuda:0=6GiB,cuda:1=24GiB,cuda:2=24GiB", 4096));
  EXPECT_TRUE(p.fits()) << p.describe();
  EXPECT_LE(p.devices[0].total(), 6ull << 30);
  const double a = static_cast<double>(p.devices[1].weight_bytes);
  const double b = static_cast<double>(p.devices[2].weight_bytes);
  EXPECT_NEAR(a / b, 1.0, 0.25) << p.describe();
}

TEST(PlanJson, SavedPlanReplaysExactly) {
  const ModelSpec spec = preset_spec("chatglm3-6b", DType::F16);
  const Plan p = make_plan(spec, request_for("cuda:0=10GiB,cuda:1=10GiB", 8192));
  const auto json = plan_to_json(p, spec);
  const Plan back = plan_from_json(nlohmann::json::parse(json.dump()), spec, "plan.json");
  EXPECT_EQ(back.assignment, p.assignment);
  ASSERT_EQ(back.devices.size(), p.devices.size());
  for (size_t i = 0; i < p.devices.size(); ++i) {
    EXPECT_EQ(back.devices[i].total(), p.devices[i].total());
    EXPECT_EQ(back.devices[i].device.budget, p.devices[i].device.budget);
  }
  EXPECT_EQ(back.limits.max_context, 8192);
  // Onto another model: refused, naming what differs.
  const ModelSpec other = preset_spec("glm-4-9b-chat");
  expect_error([&] { plan_from_json(nlohmann::json::parse(json.dump()), other, "plan.json"); }, ErrorKind::Usage,
               {"plan.json", "layers", "ferry plan --save"});
  // A plan missing a unit.
  auto broken = nlohmann::json::parse(json.dump());
  broken["assignment"].erase("layers.3");
  expect_error([&] { plan_from_json(broken, spec, "plan.json"); }, ErrorKind::Usage, {"layers.3"});
}

TEST(DeviceMapExport, CoversEveryModuleWithCudaOrdinals) {
  const ModelSpec spec = preset_spec("glm-4v-9b");
  const Plan p = make_plan(spec, request_for("cuda:0=24GiB,cuda:1=24GiB", 8192));
  const auto map = export_device_map(p, spec);
  EXPECT_EQ(map.at("transformer.embedding"), p.device_index_of("embed"));
  EXPECT_EQ(map.at("transformer.encoder.layers.39"), p.device_index_of("layers.39"));
  EXPECT_EQ(map.at("transformer.output_layer"), map.at("transformer.encoder.final_layernorm"));
  EXPECT_EQ(map.at("transformer.vision.transformer"), map.at("transformer.vision.patch_embedding"));
  EXPECT_TRUE(map.contains("transformer.vision.linear_proj"));
  EXPECT_EQ(map.size(), 2u + 40u + 2u + 2u + 4u);
  // The exported map read back pins the same plan.
  const auto pins = pins_from_device_map(
      nlohmann::json::parse(map.dump()), spec,
      p.devices.empty() ? std::vector<DeviceSpec>{} : parse_device_list("cuda:0=24GiB,cuda:1=24GiB"), "map.json");
  for (size_t i = 0; i < pins.size(); ++i) {
    ASSERT_TRUE(pins[i].has_value()) << spec.modules[i].name;
    EXPECT_EQ(*pins[i], p.device_index_of(spec.modules[i].name)) << spec.modules[i].name;
  }
}

}  // namespace
}  // namespace ferry
