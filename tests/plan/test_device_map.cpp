// Device maps in accelerate's format: what they pin, and every mistake refused before loading,
// with the module, the device and the fix in the message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "engine/model_config_reader.h"
#include "formats/json_file.h"
#include "models/presets.h"
#include "plan/device_map.h"
#include "plan/strategy.h"

namespace ferry {
namespace {

using testing::expect_error;

ModelSpec llama(bool tied = false) {
  auto json = parse_json_text(*preset_config("llama-3-8b"), "llama-3-8b");
  json["tie_word_embeddings"] = tied;
  return make_decoder_spec_from_config(model_config_from_hf(json, nullptr, "llama-3-8b"), DType::BF16, "llama-3-8b");
}

const std::vector<DeviceSpec> kDevices = parse_device_list("cuda:0=24GiB,cuda:1=24GiB");

std::vector<std::optional<int>> pins(const std::string& map, const ModelSpec& spec) {
  return pins_from_device_map(nlohmann::json::parse(map), spec, kDevices, "map.json");
}

TEST(DeviceMap, PrefixesPinWholeUnits) {
  const ModelSpec spec = llama();
  const auto p = pins(R"({"model.embed_tokens": 0, "model.layers.1": "cuda:1", "model.norm": 1, "lm_head": 1})", spec);
  EXPECT_EQ(p[0], 0);              // embed
  EXPECT_FALSE(p[1].has_value());  // layers.0: not in the map
  EXPECT_EQ(p[2], 1);              // layers.1
  EXPECT_EQ(p.back(), 1);          // head
  // "model.layers" covers every layer; a longer key wins; "" covers everything.
  const auto q = pins(R"({"": 0, "model.layers": 1, "model.layers.31": 0})", spec);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 1);
  EXPECT_EQ(q[32], 0);
  EXPECT_EQ(q.back(), 0);
  // ferry's own unit names work too, and sub-module keys agreeing with each other are fine.
  const auto r = pins(R"({"layers.4": 1, "model.layers.5.mlp": 1, "model.layers.5.self_attn": 1})", spec);
  EXPECT_EQ(r[5], 1);
  EXPECT_EQ(r[6], 1);
}

TEST(DeviceMap, PartialMapsKeepPinsAndPlaceTheRest) {
  const ModelSpec spec = llama();
  PlanRequest req;
  req.devices = kDevices;
  req.limits.max_context = 4096;
  req.strategy = Strategy::Balanced;
  req.pinned = pins(R"({"model.embed_tokens": 1, "model.layers.0": 1})", spec);
  const Plan plan = make_plan(spec, req);
  EXPECT_EQ(plan.device_index_of("embed"), 1);
  EXPECT_EQ(plan.device_index_of("layers.0"), 1);
  EXPECT_TRUE(plan.fits()) << plan.describe();
  for (const auto& [module, device] : plan.assignment) EXPECT_GE(device, 0) << module;
  // --strict-map: the missing units are listed, grouped, with where they would go.
  const std::string msg = expect_error([&] { require_complete(req.pinned, spec, plan); }, ErrorKind::Usage,
                                       {"model.layers.1-", "model.norm", "-> cuda:", "--strict-map"});
  EXPECT_EQ(msg.find("model.layers.0 "), std::string::npos) << msg;
}

TEST(DeviceMap, UnknownNameSuggestsTheNearestRealOne) {
  expect_error([&] { pins(R"({"model.layer.3": 0})", llama()); }, ErrorKind::Usage,
               {"map.json", "model.layer.3", "did you mean \"model.layers.3\""});
  expect_error([&] { pins(R"({"transformer.encoder.layers.0": 0})", llama()); }, ErrorKind::Usage,
               {"transformer.encoder.layers.0", "did you mean"});
}

TEST(DeviceMap, CuttingAUnitIsRefused) {
  expect_error([&] { pins(R"({"model.layers.3.mlp": 0, "model.layers.3.self_attn": 1})", llama()); }, ErrorKind::Usage,
               {"cuts placement unit 'layers.3'", "model.layers.3.mlp", "cuda:0", "cuda:1"});
  // The head is one unit: final norm and lm_head together.
  expect_error([&] { pins(R"({"model.norm": 0, "lm_head": 1})", llama()); }, ErrorKind::Usage,
               {"'head'", "model.norm", "lm_head"});
}

TEST(DeviceMap, TiedEmbeddingAndHeadMustShareADevice) {
  expect_error([&] { pins(R"({"model.embed_tokens": 0, "lm_head": 1, "model.norm": 1})", llama(true)); },
               ErrorKind::Usage, {"tied", "cuda:0", "cuda:1", "model.embed_tokens", "lm_head"});
  // Untied: fine.
  EXPECT_NO_THROW(pins(R"({"model.embed_tokens": 0, "lm_head": 1, "model.norm": 1})", llama(false)));
}

TEST(DeviceMap, DevicesMustBeAmongTheRunsDevices) {
  expect_error([&] { pins(R"({"model.layers.0": 5})", llama()); }, ErrorKind::Usage,
               {"model.layers.0", "no device 5", "cuda:0, cuda:1"});
  expect_error([&] { pins(R"({"model.layers.0": "cpu:3"})", llama()); }, ErrorKind::Usage, {"cpu:3"});
  expect_error([&] { pins(R"({"model.layers.0": "disk"})", llama()); }, ErrorKind::Unsupported,
               {"disk", "not supported"});
  expect_error([&] { pins(R"({"model.layers.0": [1]})", llama()); }, ErrorKind::Usage, {"not a device"});
  expect_error([&] { pins(R"([1, 2])", llama()); }, ErrorKind::Usage, {"JSON object"});
}

TEST(DeviceMap, OverBudgetPlanSaysByHowMuchAndWhatWouldFit) {
  const ModelSpec spec = llama();
  PlanRequest req;
  req.devices = parse_device_list("cuda:0=8GiB,cuda:1=6GiB");
  req.limits.max_context = 8192;
  req.strategy = Strategy::Balanced;
  const Plan plan = make_plan(spec, req);
  ASSERT_FALSE(plan.fits());
  expect_error([&] { check_plan_fits(plan, spec, req); }, ErrorKind::OutOfMemory,
               {"over", "budget", "q8_0 weights fit", "another device with at least"});
  // Too long a context alone: a shorter one is offered, and it really fits.
  PlanRequest ctx = req;
  ctx.devices = parse_device_list("cuda:0=9GiB,cuda:1=8GiB");
  const Plan long_ctx = make_plan(spec, ctx);
  ASSERT_FALSE(long_ctx.fits()) << long_ctx.describe();
  const std::string msg =
      expect_error([&] { check_plan_fits(long_ctx, spec, ctx); }, ErrorKind::OutOfMemory, {"--max-context"});
  const auto at = msg.find("--max-context ");
  ASSERT_NE(at, std::string::npos);
  PlanRequest shorter = ctx;
  shorter.limits.max_context = std::stoll(msg.substr(at + 14));
  EXPECT_TRUE(make_plan(spec, shorter).fits());
  shorter.limits.max_context += 1;
  EXPECT_FALSE(make_plan(spec, shorter).fits()) << "the suggested context is the longest that fits";
}

}  // namespace
}  // namespace ferry
