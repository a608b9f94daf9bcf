// `--dtype` through the real binary: an f32 checkpoint quantized while loading runs like the GGUF
// llama-quantize made from it, plans count exactly what is loaded, and what cannot be done is
// refused with what to do instead.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "common/golden_dir.h"

namespace ferry {
namespace {

using testing::run_ferry;

std::string case_dir(const std::string& name) {
  return testing::golden_dir() + "/text/" + name;
}

nlohmann::json generate_json(const std::string& model_args) {
  const auto r = run_ferry(
      "generate -q --temperature 0 --json --max-tokens 12 --prompt-ids 133,216,132,44,6,92,35,62,191 "
      "--model " +
      model_args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

TEST(CliDtype, QuantizedWhileLoadingRunsLikeLlamaQuantizesFile) {
  for (const auto& [name, dtype] : {std::pair{"llama_q4_k_m", "q4_k_m"}, std::pair{"llama_q5_k_m", "q5_k_m"},
                                    std::pair{"llama_q3_k", "q3_k"}, std::pair{"llama_q4_1", "q4_1"}}) {
    SCOPED_TRACE(name);
    const auto ours = generate_json(testing::quote(case_dir(name) + "/hf_f32_source") + " --dtype " + dtype);
    const auto theirs = generate_json(testing::quote(case_dir(name) + "/model.gguf"));
    EXPECT_EQ(ours["ids"], theirs["ids"]);
    // Not the f32 model's path: the quantization took effect.
    const auto f32 = generate_json(testing::quote(case_dir(name) + "/hf_f32_source"));
    EXPECT_NE(ours["ids"], f32["ids"]);
  }
}

TEST(CliDtype, PlannedWeightBytesAreWhatIsLoaded) {
  const std::string model = testing::quote(case_dir("llama_q4_k_m") + "/hf_f32_source");
  for (const char* dtype : {"q4_k_m", "q6_k", "iq4_xs", "q2_k", "q8_0", "f16"}) {
    SCOPED_TRACE(dtype);
    const auto j = generate_json(model + " --devices cpu:0,cpu:1 --dtype " + dtype);
    ASSERT_TRUE(j.contains("devices"));
    for (const auto& d : j["devices"]) {
      EXPECT_GT(d["weight_bytes"].get<uint64_t>(), 0u) << d;
      EXPECT_EQ(d["weight_bytes"], d["planned_weight_bytes"]) << d;
    }
  }
  const auto plan = run_ferry("plan --model " + model + " --dtype q4_k_m");
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("q4_k_m weights"), std::string::npos) << plan.out;
}

TEST(CliDtype, WhatCannotBeDoneIsRefusedWithTheWayOut) {
  const auto requantize = run_ferry("generate -q --prompt-ids 1,2 --max-tokens 1 --dtype q4_0 --model " +
                                    testing::quote(case_dir("llama_q8_0") + "/model.gguf"));
  EXPECT_EQ(requantize.exit_code, 1);
  EXPECT_NE(requantize.err.find("already quantized"), std::string::npos) << requantize.err;
  EXPECT_NE(requantize.err.find("Drop --dtype"), std::string::npos) << requantize.err;
  const auto unknown = run_ferry("generate -q --prompt-ids 1,2 --max-tokens 1 --dtype q7_k --model " +
                                 testing::quote(case_dir("llama") + "/hf"));
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("q4_k_m"), std::string::npos) << "the accepted names are listed: " << unknown.err;
  const auto plan = run_ferry("plan --dtype q7_k --model " + testing::quote(case_dir("llama") + "/hf"));
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_NE(plan.err.find("not a weight type"), std::string::npos) << plan.err;
}

}  // namespace
}  // namespace ferry
