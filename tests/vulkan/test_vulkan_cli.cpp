// The `ferry` binary on Vulkan devices: `ferry devices`, generation on a GPU alone, offloading to
// the CPU what does not fit it, partitions of one GPU, budgets from free memory, the bandwidth
// probe, and the errors for a GPU that is not there. Builds without the Vulkan backend too: then
// these tests say why they skip (or fail, with FERRY_REQUIRE_VULKAN=1).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_runner.h"
#include "golden/golden_util.h"
#include "vulkan_available.h"

namespace ferry {
namespace {

using testing::CliRun;
using testing::run_ferry;

class VulkanCli : public testing::VulkanTest<::testing::Test> {};

struct GoldenPrompt {
  std::string model;
  std::vector<int32_t> prompt, greedy;
};

// The first prompt of the qwen2 case (llama.cpp's ids), from its GGUF copy.
GoldenPrompt qwen2_prompt() {
  const std::string dir = testing::golden_dir() + "/text/qwen2";
  std::ifstream in(dir + "/cases.json");
  const auto cases = nlohmann::json::parse(in);
  const auto& p = cases["prompts"][0];
  return {dir + "/model.gguf", p["prompt_ids"].get<std::vector<int32_t>>(),
          p["greedy_ids"].get<std::vector<int32_t>>()};
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

// `generate --json` of the golden prompt on `devices` (extra flags appended).
nlohmann::json generate(const GoldenPrompt& g, const std::string& devices, const std::string& extra = "") {
  const CliRun r = run_ferry("generate -q --model " + g.model + " --prompt-ids " + join(g.prompt) +
                             " --temperature 0 --ignore-eos --max-tokens " + std::to_string(g.greedy.size()) +
                             " --ctx 256 --json --devices " + devices + " " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return nlohmann::json::object();
  return nlohmann::json::parse(r.out);
}

nlohmann::json device_entry(const nlohmann::json& run, const std::string& name) {
  for (const auto& d : run["devices"]) {
    if (d["name"] == name) return d;
  }
  ADD_FAILURE() << "no device " << name << " in " << run.dump();
  return nlohmann::json::object();
}

// Measured equals planned, and the driver's allocations are within 5% of the plan.
void expect_memory_as_planned(const nlohmann::json& run) {
  for (const auto& d : run["devices"]) {
    SCOPED_TRACE(d.dump());
    const auto planned = d["planned_bytes"].get<double>();
    EXPECT_EQ(d["peak_bytes"], d["planned_bytes"]);
    if (d["name"].get<std::string>().rfind("vulkan:", 0) != 0 || planned == 0) continue;
    EXPECT_GE(d["allocated_bytes"].get<double>(), planned * 0.95);
    EXPECT_LE(d["allocated_bytes"].get<double>(), planned * 1.05);
  }
}

TEST_F(VulkanCli, DevicesListsTheGpuWithMemoryBudgetAndFeatures) {
  if (no_device()) return;
  const CliRun r = run_ferry("devices --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  bool found = false;
  for (const auto& d : j["devices"]) {
    if (d["id"] != "vulkan:0") continue;
    found = true;
    EXPECT_FALSE(d["name"].get<std::string>().empty());
    EXPECT_TRUE(d["kind"] == "discrete" || d["kind"] == "integrated" || d["kind"] == "cpu" || d["kind"] == "virtual" ||
                d["kind"] == "other");
    EXPECT_GT(d["total_bytes"].get<uint64_t>(), 0u);
    EXPECT_GT(d["default_budget"].get<uint64_t>(), 0u);
    EXPECT_LT(d["default_budget"].get<uint64_t>(), d["free_bytes"].get<uint64_t>());  // a reserve is kept
    for (const char* f : {"subgroup", "f16", "int8", "integer-dot", "cooperative-matrix"}) {
      EXPECT_TRUE(d["features"].contains(f)) << f;
    }
    EXPECT_GT(std::stoi(d["features"]["subgroup"].get<std::string>()), 0);
  }
  EXPECT_TRUE(found) << r.out;
  const CliRun text = run_ferry("devices");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("vulkan:0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cpu:0"), std::string::npos) << text.out;
}

TEST_F(VulkanCli, GenerateOnTheGpuAloneGivesLlamaCppIdsWithMemoryAsPlanned) {
  if (no_device()) return;
  const GoldenPrompt g = qwen2_prompt();
  const auto run = generate(g, "vulkan:0", "--report");
  ASSERT_TRUE(run.contains("ids"));
  EXPECT_EQ(run["ids"].get<std::vector<int32_t>>(), g.greedy);
  ASSERT_EQ(run["devices"].size(), 1u);
  EXPECT_EQ(run["devices"][0]["name"], "vulkan:0");
  expect_memory_as_planned(run);
}

TEST_F(VulkanCli, AutoFillsTheGpuFirstAndOffloadsTheRestToTheCpu) {
  if (no_device()) return;
  const GoldenPrompt g = qwen2_prompt();
  const auto whole = generate(g, "vulkan:0");
  ASSERT_TRUE(whole.contains("devices"));
  // A GPU budget of 70% of the model's: auto fills it first, the CPU takes the rest.
  const auto budget = static_cast<uint64_t>(whole["devices"][0]["planned_bytes"].get<double>() * 0.7);
  const auto run = generate(g, "vulkan:0=" + std::to_string(budget) + ",cpu:0", "--strategy auto");
  ASSERT_TRUE(run.contains("ids"));
  EXPECT_EQ(run["ids"].get<std::vector<int32_t>>(), g.greedy);
  const auto gpu = device_entry(run, "vulkan:0");
  const auto cpu = device_entry(run, "cpu:0");
  EXPECT_GT(gpu["planned_weight_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(cpu["planned_weight_bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(gpu["planned_bytes"].get<uint64_t>(), budget);
  expect_memory_as_planned(run);
}

TEST_F(VulkanCli, TwoPartitionsOfOneGpuAndTheCpuGiveTheSameIds) {
  if (no_device()) return;
  const GoldenPrompt g = qwen2_prompt();
  const auto run = generate(g, "vulkan:0.0,vulkan:0.1,cpu:0", "--strategy balanced");
  ASSERT_TRUE(run.contains("ids"));
  EXPECT_EQ(run["ids"].get<std::vector<int32_t>>(), g.greedy);
  ASSERT_EQ(run["devices"].size(), 3u);
  for (const auto& d : run["devices"]) EXPECT_GT(d["planned_bytes"].get<uint64_t>(), 0u) << d.dump();
  expect_memory_as_planned(run);
}

TEST_F(VulkanCli, PlanWithoutABudgetUsesTheGpusFreeMemoryLessTheReserve) {
  if (no_device()) return;
  const CliRun listed = run_ferry("devices --json");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  uint64_t default_budget = 0;
  const auto devices = nlohmann::json::parse(listed.out);
  for (const auto& d : devices["devices"]) {
    if (d["id"] == "vulkan:0") default_budget = d["default_budget"].get<uint64_t>();
  }
  const CliRun r = run_ferry("plan --model " + qwen2_prompt().model + " --devices vulkan:0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out);
  ASSERT_EQ(plan["devices"].size(), 1u);
  // Free memory moves a little as other processes allocate: the same figure within 1%.
  const auto budget = plan["devices"][0]["budget"].get<double>();
  EXPECT_NEAR(budget, static_cast<double>(default_budget), static_cast<double>(default_budget) * 0.01);
}

TEST_F(VulkanCli, BenchMeasuresTheGpusBandwidthOnTheDevice) {
  if (no_device()) return;
  const CliRun r = run_ferry("bench -q --model " + qwen2_prompt().model +
                             " --devices vulkan:0 --prompt-tokens 8 --gen-tokens 4 --reps 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["device_read_bandwidth"]["vulkan:0"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["bandwidth_fraction"].get<double>(), 0.0);
  EXPECT_GT(j["device_read_bytes_per_token"]["vulkan:0"].get<double>(), 0.0);
}

TEST_F(VulkanCli, AGpuThatIsNotThereIsAClearError) {
  if (no_device()) return;
  const std::string model = qwen2_prompt().model;
  for (const std::string devices : {"vulkan:7", "vulkan:7=1GiB"}) {
    const CliRun r = run_ferry("generate -q --model " + model + " --prompt-ids 1,2 --devices " + devices);
    EXPECT_EQ(r.exit_code, 1) << devices;
    EXPECT_NE(r.err.find("vulkan:7"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ferry devices"), std::string::npos) << r.err;
  }
}

// Machines without Vulkan: no driver (the loader pointed at a driver file that does not exist), or
// no loader at all (FERRY_VULKAN_LOADER naming a library that does not exist, as on a machine
// without libvulkan1). CPU devices run as before, `ferry devices` says why there is no GPU, and
// asking for one says what to install. Needs no device, so it runs everywhere the binary does.
struct WithoutVulkan {
  std::vector<std::pair<const char*, const char*>> environment;
  std::string install_hint;  // what the error must name
};

class VulkanCliWithout : public ::testing::TestWithParam<WithoutVulkan> {};

TEST_P(VulkanCliWithout, CpuRunsAndAskingForAGpuSaysWhatIsMissing) {
  struct Environment {
    explicit Environment(const WithoutVulkan& w) : vars(w.environment) {
      for (const auto& [name, value] : vars) setenv(name, value, 1);
    }
    ~Environment() {
      for (const auto& [name, value] : vars) unsetenv(name);
    }
    std::vector<std::pair<const char*, const char*>> vars;
  } environment(GetParam());
  const std::string model = qwen2_prompt().model;
  const CliRun cpu = run_ferry("generate -q --model " + model + " --prompt-ids 1,2 -n 2 --devices cpu:0");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.err;
  const CliRun listed = run_ferry("devices --json");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto j = nlohmann::json::parse(listed.out);
  for (const auto& d : j["devices"]) EXPECT_EQ(d["id"].get<std::string>().rfind("vulkan:", 0), std::string::npos);
  ASSERT_EQ(j["unavailable"].size(), 1u) << listed.out;
  const std::string why = j["unavailable"][0];
  for (const std::string devices : {"vulkan:0", "vulkan:0=1GiB,cpu:0"}) {
    const CliRun r = run_ferry("generate -q --model " + model + " --prompt-ids 1,2 -n 2 --devices " + devices);
    EXPECT_EQ(r.exit_code, 1) << devices;
    // A build without the backend says to install the headers and rebuild.
    const std::string hint = testing::missing_backend() ? std::string("libvulkan-dev") : GetParam().install_hint;
    EXPECT_NE(r.err.find(hint), std::string::npos) << r.err;
    EXPECT_NE(why.find(hint), std::string::npos) << why;
  }
}

INSTANTIATE_TEST_SUITE_P(
    NoDriverOrNoLoader, VulkanCliWithout,
    ::testing::Values(WithoutVulkan{{{"VK_ICD_FILENAMES", "/nonexistent/ferry-no-driver.json"},  // loaders < 1.3.207
                                     {"VK_DRIVER_FILES", "/nonexistent/ferry-no-driver.json"}},
                                    "mesa-vulkan-drivers"},
                      WithoutVulkan{{{"FERRY_VULKAN_LOADER", "/nonexistent/libvulkan.so.1"}}, "libvulkan1"}));

}  // namespace
}  // namespace ferry
