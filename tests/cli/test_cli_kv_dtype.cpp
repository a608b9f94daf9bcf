// --kv-dtype through the real binary: on generate, chat, bench and logits (RunOptions) and on
// `ferry plan`; the default (RunLimits' f16); what each device allocates for the cache equals the
// plan; bad values and a q8_0 cache a model's kv width cannot hold are clear usage errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../engine/engine_fixture.h"
#include "cli_runner.h"
#include "common/golden_dir.h"

namespace ferry {
namespace {

using testing::CliRun;
using testing::run_ferry;

std::string golden_model(const std::string& name) {
  return testing::golden_dir() + "/text/" + name + "/model.gguf";
}

// A tiny model whose kv width (2 kv heads x 16) is one q8_0 block.
class CliKvDtype : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("cli_kv_dtype");
    testing::make_model(dir_->str(), tiny::Arch::Qwen2, "hf", 31, DType::F32, 4);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model() { return dir_->str(); }
  static testing::TempDir* dir_;
};
testing::TempDir* CliKvDtype::dir_ = nullptr;

// Every cache dtype: generate on two devices, and each device's KV cache, workspace and peak as
// the plan said (q8_0: a row of 32 is one block of 34 bytes).
TEST_F(CliKvDtype, GenerateAllocatesThePlannedKvCacheForEveryDtype) {
  for (const char* kv : {"f32", "f16", "bf16", "q8_0"}) {
    SCOPED_TRACE(kv);
    const CliRun r = run_ferry("generate --model " + model() + " --kv-dtype " + kv +
                               " --devices cpu:0=64MiB,cpu:1=64MiB --ctx 96 --prompt-ids 1,2,3,4,5 --max-tokens 6 "
                               "--temperature 0 --ignore-eos --json --report");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(std::string(kv) + " KV cache"), std::string::npos) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"].size(), 6u);
    uint64_t kv_bytes = 0;
    for (const auto& d : j["devices"]) {
      EXPECT_EQ(d["kv_bytes"], d["planned_kv_bytes"]) << d.dump();
      EXPECT_EQ(d["peak_bytes"], d["planned_bytes"]) << d.dump();
      kv_bytes += d["kv_bytes"].get<uint64_t>();
    }
    const uint64_t row = std::string(kv) == "f32" ? 128 : std::string(kv) == "q8_0" ? 34 : 64;
    EXPECT_EQ(kv_bytes, 4u * 2u * 96u * row);  // layers x (k, v) x context x row bytes
  }
}

// No --kv-dtype: RunLimits' default, f16, in the plan a run prints and in `ferry plan`.
TEST_F(CliKvDtype, TheDefaultIsF16) {
  const CliRun r = run_ferry("generate --model " + model() + " --prompt-ids 1,2 --max-tokens 1 --ctx 32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("f16 KV cache"), std::string::npos) << r.err;
  const CliRun p = run_ferry("plan --model " + model() + " --ctx 32 --json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(nlohmann::json::parse(p.out)["limits"]["kv_dtype"], "f16");
  const CliRun help = run_ferry("generate --help");
  EXPECT_NE(help.out.find("f32, f16, bf16, q8_0 (default f16"), std::string::npos) << help.out;
}

// Every model-running command takes the option; a bad value names the accepted ones.
TEST_F(CliKvDtype, BadValuesAreUsageErrorsListingTheDtypes) {
  for (const std::string cmd : {"generate --prompt-ids 1 --max-tokens 1", "logits --prompt-ids 1 -o /dev/null",
                                "bench --prompt-tokens 2 --gen-tokens 1 --reps 1", "chat"}) {
    SCOPED_TRACE(cmd);
    const CliRun r = run_ferry(cmd + " -q --model " + model() + " --kv-dtype q4_0", "hi\n");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("--kv-dtype 'q4_0' is not a KV-cache dtype; use one of f32, f16, bf16, q8_0"),
              std::string::npos)
        << r.err;
  }
  const CliRun plan = run_ferry("plan --model " + model() + " --kv-dtype fp8");
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_NE(plan.err.find("use one of f32, f16, bf16, q8_0"), std::string::npos) << plan.err;
}

// The bench and logits commands run with the cache asked for (bench reports it).
TEST_F(CliKvDtype, BenchAndLogitsRunEveryDtype) {
  for (const char* kv : {"f32", "q8_0"}) {
    SCOPED_TRACE(kv);
    const CliRun b = run_ferry("bench -q --model " + model() + " --kv-dtype " + kv +
                               " --prompt-tokens 4 --gen-tokens 2 --reps 1 --json");
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(nlohmann::json::parse(b.out)["kv_dtype"], kv);
    const CliRun l =
        run_ferry("logits -q --model " + model() + " --kv-dtype " + kv + " --prompt-ids 1,2,3 -o /dev/null");
    EXPECT_EQ(l.exit_code, 0) << l.err;
  }
}

// q8_0 rounds each cache row in blocks of 32: the qwen2 golden's kv width of 16 is refused before
// any weight is read, naming the dims and the fix; `ferry plan` too.
TEST(CliKvDtypeErrors, Q8CacheOfAKvWidthThatIsNotWholeBlocksIsRefused) {
  for (const std::string cmd : {"generate -q --prompt-ids 1 --max-tokens 1", "plan"}) {
    const CliRun r = run_ferry(cmd + " --model " + golden_model("qwen2") + " --kv-dtype q8_0");
    EXPECT_EQ(r.exit_code, 1) << cmd;
    for (const char* needle : {"q8_0 KV cache", "1 kv heads x head_dim 16 = 16", "multiple of 32", "--kv-dtype f16"}) {
      EXPECT_NE(r.err.find(needle), std::string::npos) << cmd << ": " << needle << " in " << r.err;
    }
  }
}

// `ferry plan --kv-dtype` counts the cache in that dtype, and a saved plan replays with its own
// dtype (giving --kv-dtype with --plan is refused).
TEST_F(CliKvDtype, PlanCountsTheDtypeAndASavedPlanBringsItsOwn) {
  testing::TempDir dir("cli_kv_plan");
  const std::string saved = dir.str() + "/q8.json";
  const CliRun p = run_ferry("plan --model " + model() + " --ctx 64 --kv-dtype q8_0 --save " + saved);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("q8_0 KV cache"), std::string::npos) << p.out;
  const CliRun j = run_ferry("plan --model " + model() + " --ctx 64 --kv-dtype q8_0 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out)["devices"][0]["kv_bytes"], 4u * 2u * 64u * 34u);
  const CliRun replay = run_ferry("generate --model " + model() + " --plan " + saved +
                                  " --prompt-ids 1,2 --max-tokens 2 --json --report");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.err.find("q8_0 KV cache"), std::string::npos) << replay.err;
  const nlohmann::json report = nlohmann::json::parse(replay.out);  // outlives the loop over its devices
  for (const auto& d : report["devices"]) {
    EXPECT_EQ(d["kv_bytes"], d["planned_kv_bytes"]) << d.dump();
  }
  const CliRun twice =
      run_ferry("generate -q --model " + model() + " --plan " + saved + " --kv-dtype f16 --prompt-ids 1");
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_NE(twice.err.find("drop --kv-dtype"), std::string::npos) << twice.err;
}

}  // namespace
}  // namespace ferry
