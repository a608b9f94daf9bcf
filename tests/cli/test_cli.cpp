// The scriptable interface of the `ferry` binary, which tests, goldens and benchmarks rely on:
// --prompt-ids, --temperature 0, --json, `ferry logits`, exit codes and error messages.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../engine/engine_fixture.h"
#include "../golden/golden_util.h"
#include "cli_runner.h"

namespace ferry {
namespace {

using testing::CliRun;

CliRun ferry(const std::string& args) {
  return testing::run_ferry(args);
}

std::string golden_case(const std::string& name) {
  return testing::golden_dir() + "/text/" + name;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

TEST(Cli, GenerateJsonReproducesTheLlamaCppGreedyIds) {
  std::ifstream in(golden_case("qwen2") + "/cases.json");
  const auto cases = nlohmann::json::parse(in);
  const auto& p = cases["prompts"][0];
  const auto prompt = p["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
  const CliRun r =
      ferry("generate -q --model " + golden_case("qwen2") + "/model.gguf --prompt-ids " + join_ids(prompt) +
            " --temperature 0 --ignore-eos --max-tokens " + std::to_string(greedy.size()) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // exactly one JSON object on stdout
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), prompt);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), greedy);
  EXPECT_TRUE(j["text"].is_string());
}

TEST(Cli, LogitsFileMatchesTheGolden) {
  std::ifstream in(golden_case("glm4") + "/cases.json");
  const auto cases = nlohmann::json::parse(in);
  const auto& p = cases["prompts"][1];
  testing::TempDir dir("cli_logits");
  const std::string out = dir.str() + "/logits.f32";
  const CliRun r = ferry("logits -q --kv-dtype f32 --model " + golden_case("glm4") + "/hf --prompt-ids " +
                         join_ids(p["prompt_ids"].get<std::vector<int32_t>>()) + " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ours = testing::read_binary<float>(out);
  const auto ref = testing::read_binary<float>(golden_case("glm4") + "/" + p["logits_file"].get<std::string>());
  ASSERT_EQ(ours.size(), ref.size());
  EXPECT_LE(testing::max_abs_diff(ours.data(), ref.data(), ref.size()), 1e-4f);
}

// `logits -o -` writes the floats to standard output (no file named "-").
TEST(Cli, LogitsToStandardOutputMatchTheGolden) {
  std::ifstream in(golden_case("glm4") + "/cases.json");
  const auto cases = nlohmann::json::parse(in);
  const auto& p = cases["prompts"][1];
  const bool dash_before = std::filesystem::exists("-");
  const CliRun r = ferry("logits -q --kv-dtype f32 --model " + golden_case("glm4") + "/hf --prompt-ids " +
                         join_ids(p["prompt_ids"].get<std::vector<int32_t>>()) + " -o -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::filesystem::exists("-"), dash_before);
  const auto ref = testing::read_binary<float>(golden_case("glm4") + "/" + p["logits_file"].get<std::string>());
  ASSERT_EQ(r.out.size(), ref.size() * sizeof(float));
  std::vector<float> ours(ref.size());
  std::memcpy(ours.data(), r.out.data(), r.out.size());
  EXPECT_LE(testing::max_abs_diff(ours.data(), ref.data(), ref.size()), 1e-4f);
}

// A full disk is an error, not a success that wrote nothing.
TEST(Cli, OutputThatCannotBeWrittenExitsNonZero) {
  const std::string model = golden_case("qwen2") + "/model.gguf";
  const CliRun json = ferry("inspect " + model + " --json >/dev/full");
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_NE(json.err.find("could not write the output"), std::string::npos) << json.err;
  const CliRun logits = ferry("logits -q --model " + model + " --prompt-ids 1,2 -o /dev/full");
  EXPECT_EQ(logits.exit_code, 1);
  EXPECT_NE(logits.err.find("/dev/full"), std::string::npos) << logits.err;
}

TEST(Cli, VersionAndMistypedCommands) {
  const CliRun v = ferry("--version");
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out.rfind("ferry ", 0), 0u) << v.out;
  EXPECT_NE(v.out.find("backends: cpu"), std::string::npos) << v.out;
  const CliRun typo = ferry("genrate --prompt-ids 1");
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_NE(typo.err.find("unknown command 'genrate' (did you mean 'generate'?)"), std::string::npos) << typo.err;
  const CliRun devices = ferry("devics");
  EXPECT_NE(devices.err.find("did you mean 'devices'?"), std::string::npos) << devices.err;
  const CliRun far = ferry("xyzzyq");
  EXPECT_EQ(far.exit_code, 1);
  EXPECT_NE(far.err.find("unknown command 'xyzzyq'"), std::string::npos) << far.err;
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
}

TEST(Cli, GenerateFromTextOnTwoDevicesPrintsThePlan) {
  testing::TempDir dir("cli_text");
  testing::make_model(dir.str(), tiny::Arch::Glm4, "hf", 3, DType::F32, 4);
  const CliRun r = ferry("generate --model " + dir.str() +
                         " --devices cpu:0=64MiB,cpu:1=64MiB --prompt 'Hello there' --max-tokens 8 --temperature 0 "
                         "--ignore-eos --json --report");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"].size(), 8u);
  EXPECT_GT(j["prompt_ids"].size(), 0u);
  for (const char* needle : {"cpu:0", "cpu:1", "layers.", "loading weights", "copies between devices"}) {
    EXPECT_NE(r.err.find(needle), std::string::npos) << needle << " in:\n" << r.err;
  }
  // What each device holds is what the plan said: weights, KV cache, workspace and the peak.
  ASSERT_EQ(j["devices"].size(), 2u);
  for (const auto& d : j["devices"]) {
    EXPECT_EQ(d["weight_bytes"], d["planned_weight_bytes"]) << d.dump();
    EXPECT_EQ(d["kv_bytes"], d["planned_kv_bytes"]) << d.dump();
    EXPECT_EQ(d["workspace_bytes"], d["planned_workspace_bytes"]) << d.dump();
    EXPECT_GT(d["workspace_bytes"].get<uint64_t>(), 0u) << d.dump();
    EXPECT_EQ(d["peak_bytes"], d["planned_bytes"]) << d.dump();
  }
}

TEST(Cli, InspectNamesArchitectureAndEosIds) {
  const CliRun r = ferry("inspect --json " + golden_case("chatglm") + "/hf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["family"], "chatglm");
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["kv_heads"], 2);
  EXPECT_EQ(j["eos_ids"], nlohmann::json::array({2}));
  // embedding, final norm, output, 7 per layer, and the unused rotary inv_freq buffer
  EXPECT_EQ(j["dtypes"]["f32"]["tensors"], 3 + 2 * 7 + 1);
}

TEST(Cli, BadInputExitsNonZeroWithAClearMessage) {
  CliRun r = ferry("generate --model /no/such/model --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/no/such/model"), std::string::npos) << r.err;
  r = ferry("generate --model " + golden_case("llama") + "/model.gguf --prompt-ids 1,x,3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'x'"), std::string::npos) << r.err;
  r = ferry("generate -q --model " + golden_case("llama") + "/model.gguf --prompt-ids 1,99999");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("99999"), std::string::npos) << r.err;
  r = ferry("generate --model " + golden_case("llama") + "/model.gguf --devices gpu:0 --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gpu:0"), std::string::npos) << r.err;
  r = ferry("generate --model " + golden_case("llama") + "/model.gguf --devices cpu:0=4KiB --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("out of memory"), std::string::npos) << r.err;
  // Values refused before any weight is read, each naming the option.
  const std::string m = "generate -q --model " + golden_case("llama") + "/model.gguf ";
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--prompt-ids 1,2, ", "ends with a comma"},
           {"--prompt-ids 1 --max-tokens 0", "--max-tokens"},
           {"--prompt-ids 1 --temperature -1", "--temperature"},
           {"--prompt-ids 1 --top-k -5", "--top-k"},
           {"--prompt-ids 1 --top-p 2", "top"},
           {"--prompt-ids 1 --threads 100000", "--threads"},
           {"--prompt-ids 1 --ctx 2305843009213693952", "--ctx"},
           {"--prompt ''", "--prompt is empty"},
       }) {
    r = ferry(m + args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": " << r.err;
  }
  r = ferry("frobnicate");
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace ferry
