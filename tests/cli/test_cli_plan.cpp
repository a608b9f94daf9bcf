// `ferry plan` and the placement options of the run commands, through the real binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>

#include "../engine/engine_fixture.h"
#include "cli_runner.h"
#include "common/golden_dir.h"

namespace ferry {
namespace {

using testing::run_ferry;
using testing::TempDir;

TEST(CliPlan, Glm4vFitsOnFour24GiBCardsWithTheTowerWhole) {
  const auto r = run_ferry(
      "plan --config glm-4v-9b --devices cuda:0=24GiB,cuda:1=24GiB,cuda:2=24GiB,cuda:3=24GiB --max-context 8192 "
      "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out);
  EXPECT_TRUE(plan["fits"].get<bool>());
  int towers = 0;
  for (const auto& d : plan["devices"]) {
    for (const auto& m : d["modules"]) towers += m == "vision";
    EXPECT_LE(d["total_bytes"].get<uint64_t>(), d["budget"].get<uint64_t>());
  }
  EXPECT_EQ(towers, 1);
  EXPECT_EQ(plan["limits"]["max_context"], 8192);
}

// Issue 5's two layouts: each fits, prints the tower's device and weights and the vision step's
// activation budget, and keeps the tower on one device.
TEST(CliPlan, Glm4vOnTwo24GiBAndFour12GiBCardsShowsTheTowerAndItsActivations) {
  for (const std::string devices :
       {"cuda:0=24GiB,cuda:1=24GiB", "cuda:0=12GiB,cuda:1=12GiB,cuda:2=12GiB,cuda:3=12GiB"}) {
    SCOPED_TRACE(devices);
    const auto r = run_ferry("plan --config glm-4v-9b --devices " + devices + " --max-context 8192");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string text = r.out + r.err;
    EXPECT_NE(text.find("vision tower on cuda:"), std::string::npos) << text;
    EXPECT_NE(text.find("vision step activations at 1 image(s)"), std::string::npos) << text;
    const auto j = run_ferry("plan --config glm-4v-9b --devices " + devices + " --max-context 8192 --json");
    ASSERT_EQ(j.exit_code, 0) << j.err;
    const auto plan = nlohmann::json::parse(j.out);
    int towers = 0;
    for (const auto& d : plan["devices"]) {
      const bool has_tower = std::find(d["modules"].begin(), d["modules"].end(), "vision") != d["modules"].end();
      towers += has_tower ? 1 : 0;
      // The tower's step needs hundreds of MiB (1601 tokens x 1792 wide, a 15360-wide MLP).
      if (has_tower) {
        EXPECT_GT(d["vision_workspace_bytes"].get<uint64_t>(), 500ull << 20);
      }
      EXPECT_LE(d["total_bytes"].get<uint64_t>(), d["budget"].get<uint64_t>());
    }
    EXPECT_EQ(towers, 1);
  }
}

TEST(CliPlan, Glm4vOnTwo12GiBCardsIsRefusedWithTheShortfallAndQuantization) {
  const auto r = run_ferry("plan --config glm-4v-9b --devices cuda:0=12GiB,cuda:1=12GiB --max-context 8192");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("over"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("q8_0"), std::string::npos) << r.err;
  // --json still prints the plan, marked as not fitting, and fails.
  const auto j = run_ferry("plan --config glm-4v-9b --devices cuda:0=12GiB,cuda:1=12GiB --max-context 8192 --json");
  EXPECT_EQ(j.exit_code, 1);
  EXPECT_FALSE(nlohmann::json::parse(j.out)["fits"].get<bool>());
  // q8_0 weights fit.
  EXPECT_EQ(run_ferry("plan --config glm-4v-9b --devices cuda:0=12GiB,cuda:1=12GiB --max-context 8192 --dtype q8_0")
                .exit_code,
            0);
}

TEST(CliPlan, EveryPresetPlans) {
  for (const char* preset : {"glm-4-9b-chat", "glm-4v-9b", "chatglm3-6b", "llama-3-8b", "qwen2-7b"}) {
    const auto r = run_ferry(std::string("plan --config ") + preset + " --devices cuda:0=24GiB,cuda:1=24GiB");
    EXPECT_EQ(r.exit_code, 0) << preset << ": " << r.err;
    EXPECT_NE(r.out.find("cuda:1"), std::string::npos) << r.out;
  }
  const auto bad = run_ferry("plan --config no-such-model --devices cuda:0");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("no-such-model"), std::string::npos) << bad.err;
}

TEST(CliPlan, SaveReplayAndExportAccelerate) {
  TempDir dir("plan_cli");
  testing::make_model(dir.str() + "/m", tiny::Arch::Llama, "hf", 3, DType::F32, 4);
  const std::string model = dir.str() + "/m";
  const std::string saved = dir.str() + "/plan.json";
  const auto r = run_ferry("plan --model " + model + " --devices cpu:0,cpu:1 --ctx 64 --save " + saved);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Replayed by generate: the same plan (printed), the same tokens as one device.
  const std::string gen = "generate -q --prompt-ids 1,2,3,4 --max-tokens 5 --temperature 0 --json --model " + model;
  const auto one = run_ferry(gen + " --devices cpu:0 --ctx 64");
  const auto replay = run_ferry(gen + " --plan " + saved);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  const auto a = nlohmann::json::parse(one.out);
  const auto b = nlohmann::json::parse(replay.out);
  EXPECT_EQ(a["ids"], b["ids"]);
  ASSERT_EQ(b["devices"].size(), 2u);
  for (const auto& d : b["devices"]) {
    EXPECT_GT(d["peak_bytes"].get<uint64_t>(), 0u) << d;
    EXPECT_LE(d["peak_bytes"].get<uint64_t>(), d["planned_bytes"].get<uint64_t>()) << d;
  }
  EXPECT_EQ(b["devices"][1]["copies"], 1) << "the hidden state crosses once per decoded token";
  // --plan with --devices is a usage error.
  EXPECT_EQ(run_ferry(gen + " --plan " + saved + " --devices cpu:0").exit_code, 1);
  // A plan for q8_0 weights replays as a q8_0 run: the same ids as quantizing without a plan.
  const std::string quantized = dir.str() + "/q8.json";
  ASSERT_EQ(
      run_ferry("plan --model " + model + " --devices cpu:0,cpu:1 --ctx 64 --dtype q8_0 --save " + quantized).exit_code,
      0);
  const auto replayed = run_ferry(gen + " --plan " + quantized);
  const auto direct = run_ferry(gen + " --devices cpu:0,cpu:1 --ctx 64 --dtype q8_0");
  ASSERT_EQ(replayed.exit_code, 0) << replayed.err;
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  EXPECT_EQ(nlohmann::json::parse(replayed.out)["ids"], nlohmann::json::parse(direct.out)["ids"]);
  const auto twice = run_ferry(gen + " --plan " + quantized + " --dtype q4_0");
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_NE(twice.err.find("drop --dtype"), std::string::npos) << twice.err;
  // The accelerate export names every module with transformers' names.
  const auto exp = run_ferry("plan --model " + model + " --devices cpu:0,cpu:1 --ctx 64 --export accelerate");
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  const auto map = nlohmann::json::parse(exp.out);
  EXPECT_EQ(map["model.embed_tokens"], "cpu");
  EXPECT_TRUE(map.contains("model.layers.3"));
  EXPECT_TRUE(map.contains("lm_head"));
}

// A saved plan is checked as the command line is (issue 14, item 3): device names, duplicates,
// budgets, threads, limits, the strategy's name and the model it was made for; and the options it
// overrides are refused, not ignored.
TEST(CliPlan, ASavedPlanIsCheckedLikeTheCommandLine) {
  TempDir dir("plan_checked");
  testing::make_model(dir.str() + "/m", tiny::Arch::Llama, "hf", 3, DType::F32, 2);
  // The same sizes, another architecture (Qwen2: biases, a tied head).
  testing::make_model(dir.str() + "/q", tiny::Arch::Qwen2, "hf", 3, DType::F32, 2);
  const std::string model = dir.str() + "/m";
  const std::string saved = dir.str() + "/plan.json";
  ASSERT_EQ(
      run_ferry("plan --model " + model + " --devices cpu:0=256MiB,cpu:1=256MiB --ctx 64 --save " + saved).exit_code,
      0);
  std::ifstream in(saved);
  const nlohmann::json plan = nlohmann::json::parse(in);
  const std::string gen = "generate -q --prompt-ids 1,2,3 --max-tokens 2 --model " + model + " --plan ";
  const auto refused = [&](const std::string& what, const std::function<void(nlohmann::json&)>& edit,
                           const std::string& message, const std::string& extra = "") {
    SCOPED_TRACE(what);
    nlohmann::json j = plan;
    edit(j);
    const std::string path = dir.str() + "/edited.json";
    std::ofstream(path) << j.dump();
    const auto r = run_ferry(gen + path + extra);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  };
  refused(
      "threads", [](auto& j) { j["devices"][0]["threads"] = 100000; }, "asks for 100000 threads");
  refused(
      "negative threads", [](auto& j) { j["devices"][1]["threads"] = -2; }, "asks for -2 threads");
  refused(
      "twice", [](auto& j) { j["devices"][1]["name"] = "cpu:0"; }, "device cpu:0 is listed twice");
  refused(
      "budget", [](auto& j) { j["devices"][0]["budget"] = -5; }, "a budget of -5 bytes");
  refused(
      "device name", [](auto& j) { j["devices"][0]["name"] = "tpu:0"; }, "device \"tpu:0\"");
  refused(
      "strategy", [](auto& j) { j["strategy"] = "greedy"; }, "greedy");
  refused(
      "context", [](auto& j) { j["limits"]["max_context"] = 0; }, "limits.max_context = 0 is outside");
  refused(
      "chunk", [](auto& j) { j["limits"]["prefill_chunk"] = -1; }, "limits.prefill_chunk = -1 is outside");
  refused(
      "ctx given", [](auto&) {}, "drop --ctx", " --ctx 32");
  refused(
      "strategy given", [](auto&) {}, "drop --strategy", " --strategy auto");
  refused(
      "chunk given", [](auto&) {}, "drop --prefill-chunk", " --prefill-chunk 8");
  // Made for the Llama, replayed on the Qwen2 of the same sizes: refused before anything runs.
  const auto other =
      run_ferry("generate -q --prompt-ids 1,2,3 --max-tokens 2 --model " + dir.str() + "/q --plan " + saved);
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_NE(other.err.find("made for a model with architecture 'LlamaForCausalLM'"), std::string::npos) << other.err;
  // The unedited plan still runs.
  EXPECT_EQ(run_ferry(gen + saved).exit_code, 0);
}

// A config with absurd sizes is refused up front (issue 14, item 4), not planned for minutes.
TEST(CliPlan, ImplausibleSizesAreRefusedUpFront) {
  TempDir dir("plan_absurd");
  for (const auto& [key, value, message] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"num_hidden_layers", 100000, "the number of layers = 100000 is implausible"},
           {"num_hidden_layers", 1000000000, "the number of layers = 1000000000 is implausible"},
           {"vocab_size", 1000000000, "the vocabulary size = 1000000000 is implausible"}}) {
    SCOPED_TRACE(key + "=" + std::to_string(value));
    nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"hidden_size", 4096},
                        {"intermediate_size", 14336},
                        {"num_attention_heads", 32},
                        {"num_key_value_heads", 8},
                        {"num_hidden_layers", 32},
                        {"vocab_size", 128256},
                        {"max_position_embeddings", 8192}};
    c[key] = value;
    const std::string path = dir.write_text("config.json", c.dump());
    const auto r = run_ferry("plan --config " + path + " --devices cuda:0=80GiB");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

TEST(CliPlan, DeviceMapsPinModulesAndBadMapsFailBeforeLoading) {
  TempDir dir("plan_map");
  testing::make_model(dir.str() + "/m", tiny::Arch::Qwen2, "hf", 4, DType::F32, 4);
  const std::string model = dir.str() + "/m";
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.str() + "/" + name) << text;
    return dir.str() + "/" + name;
  };
  const std::string gen = "generate --prompt-ids 1,2,3 --max-tokens 3 --temperature 0 --json --ctx 64 --model " +
                          model + " --devices cpu:0,cpu:1,cpu:2";
  const auto ok =
      run_ferry(gen + " --device-map " +
                write("ok.json", R"({"model.embed_tokens": 2, "lm_head": 2, "model.norm": 2, "model.layers.0": 1})"));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("cpu:2    embed"), std::string::npos) << ok.err;
  const auto typo = run_ferry(gen + " --device-map " + write("typo.json", R"({"model.layer.1": 1})"));
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_NE(typo.err.find("did you mean \"model.layers.1\""), std::string::npos) << typo.err;
  EXPECT_EQ(typo.err.find("loading weights"), std::string::npos) << "refused before any weight is read";
  const auto strict =
      run_ferry(gen + " --strict-map --device-map " + write("part.json", R"({"model.embed_tokens": 0})"));
  EXPECT_EQ(strict.exit_code, 1);
  EXPECT_NE(strict.err.find("model.norm + lm_head -> cpu:0"), std::string::npos) << strict.err;
  EXPECT_NE(strict.err.find("model.layers.0 -> cpu:"), std::string::npos) << strict.err;
  const auto tiny_budget = run_ferry("generate --prompt-ids 1,2 --max-tokens 2 --ctx 64 --model " + model +
                                     " --devices cpu:0=64KiB,cpu:1=64KiB");
  EXPECT_EQ(tiny_budget.exit_code, 1);
  EXPECT_NE(tiny_budget.err.find("what would fit"), std::string::npos) << tiny_budget.err;
  EXPECT_EQ(tiny_budget.err.find("loading weights"), std::string::npos);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// Small models print their parameter count in its own unit (the qwen2 golden has 151,664, which
// printed as "0.00B"); an unknown --config names the presets; a bad byte size lists the units.
TEST(CliPlan, ParameterCountsPresetsAndByteUnitsAreSpelledOut) {
  const std::string model = testing::golden_dir() + "/text/qwen2/model.gguf";
  const auto plan = run_ferry("plan --model " + model + " --devices cpu:0");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("152K parameters"), std::string::npos) << plan.out;
  const auto inspect = run_ferry("inspect " + model);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("152K (151664)"), std::string::npos) << inspect.out;
  const auto preset = run_ferry("plan --config glm-4-9b-chat --devices cuda:0=24GiB,cuda:1=24GiB");
  ASSERT_EQ(preset.exit_code, 0) << preset.err;
  EXPECT_NE(preset.out.find("9.40B parameters"), std::string::npos) << preset.out;

  const auto unknown = run_ferry("plan --config glm-5-preset --devices cuda:0=24GiB");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("neither a config.json file nor a preset"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("glm-4v-9b"), std::string::npos) << unknown.err;

  const auto bytes = run_ferry("plan --model " + model + " --devices cpu:0=6XB");
  EXPECT_EQ(bytes.exit_code, 1);
  EXPECT_NE(bytes.err.find("KiB, MiB, GiB, TiB"), std::string::npos) << bytes.err;
  EXPECT_NE(bytes.err.find("KB, MB, GB, TB"), std::string::npos) << bytes.err;
}

}  // namespace
}  // namespace ferry
