// The text goldens as data (../shared/golden/text/* and glm/chatglm_text_*): what each case feeds
// and expects, and one run of a case on a loaded model. Shared by the CPU/opaque golden suite and
// the Vulkan suite, which run the same cases on other devices.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/session.h"
#include "golden_util.h"
#include "runtime/placement.h"
#include "runtime/weight_store.h"

namespace ferry::testing {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

struct Expectation {
  std::vector<int32_t> prompt;
  std::vector<int32_t> positions;  // empty: 0..n-1
  std::vector<int32_t> greedy;
  std::vector<float> logits_last;   // [V]
  std::vector<float> logits_steps;  // [steps, V]
  float tolerance = 1e-4f;
  size_t greedy_checked = 0;        // leading greedy steps compared free-running
  std::vector<int> teacher_forced;  // further steps checked with the reference tokens fed back
  size_t vocab_compared = 0;        // logits compared over [0, vocab_compared)
};

// One prompt of a case, from one copy of its model.
struct TextCase {
  std::string label;       // "<prompt> gguf" / "<prompt> hf" / the glm case's name
  std::string model_path;  // model.gguf, hf/ or model/
  Expectation expect;
  std::string weights_dtype;  // the golden's: F32, Q8_0, Q4_0, Q4_1, ..., Q4_K_M, Q5_K_M
  bool from_gguf = false;
};

inline const char* const kTextCases[] = {
    "llama",        "qwen2",       "glm4",       "glm",          "chatglm",
    "llama_q8_0",   "llama_q4_0",  "mistral",    "qwen3",        "llama31_rope_scaling",
    "qwen2_yarn",   "llama_q4_1",  "llama_q5_0", "llama_iq4_nl", "llama_q3_k",
    "llama_q4_k_m", "llama_q5_k_m"};
inline const char* const kChatGlmCases[] = {"chatglm_text_rope1", "chatglm_text_rope1_strong",
                                            "chatglm_text_rope500_strong"};

// Every prompt of text/<name>, from model.gguf and from hf/ (whose quantized cases hold the exactly
// dequantized weights and f32 goldens of their own).
inline std::vector<TextCase> text_cases(const std::string& name) {
  const std::string dir = golden_dir() + "/text/" + name;
  const nlohmann::json cases = read_json(dir + "/cases.json");
  const std::string dtype = cases["weights_dtype"];
  const bool quantized = dtype != "F32";
  const float tol = cases["tolerance"]["logits_max_abs"].get<float>();
  std::vector<TextCase> out;
  for (const auto& p : cases["prompts"]) {
    const std::string prompt = p["name"];
    Expectation gguf;
    gguf.prompt = p["prompt_ids"].get<std::vector<int32_t>>();
    gguf.greedy = p["greedy_ids"].get<std::vector<int32_t>>();
    gguf.logits_last = read_binary<float>(dir + "/" + p["logits_file"].get<std::string>());
    gguf.logits_steps = read_binary<float>(dir + "/" + p["step_logits_file"].get<std::string>());
    gguf.tolerance = tol;
    gguf.greedy_checked = quantized ? p["greedy_compare_steps"].get<size_t>() : gguf.greedy.size();
    if (quantized) gguf.teacher_forced = p["greedy_check_steps_teacher_forced"].get<std::vector<int>>();
    Expectation hf = gguf;
    if (quantized) {
      hf.greedy = p["greedy_ids_dequant_f32"].get<std::vector<int32_t>>();
      hf.logits_last = read_binary<float>(dir + "/" + p["logits_dequant_f32_file"].get<std::string>());
      hf.logits_steps = read_binary<float>(dir + "/" + p["step_logits_dequant_f32_file"].get<std::string>());
      hf.tolerance = 1e-4f;
      hf.greedy_checked = hf.greedy.size();
      hf.teacher_forced.clear();
    }
    out.push_back({prompt + " gguf", dir + "/model.gguf", std::move(gguf), dtype, true});
    out.push_back({prompt + " hf", dir + "/hf", std::move(hf), "F32", false});
  }
  return out;
}

// glm/<name>: THUDM's original ChatGLM code, with its explicit positions.
inline TextCase chatglm_case(const std::string& name) {
  const std::string dir = golden_dir() + "/glm/" + name;
  const nlohmann::json ex = read_json(dir + "/expected.json");
  Expectation e;
  e.prompt = read_binary<int32_t>(dir + "/prompt_ids.i32.bin");
  e.positions = read_binary<int32_t>(dir + "/position_ids.i32.bin");
  e.greedy = ex["greedy_ids"].get<std::vector<int32_t>>();
  e.logits_last = read_binary<float>(dir + "/logits_last.f32.bin");
  e.logits_steps = read_binary<float>(dir + "/logits_greedy_steps.f32.bin");
  e.tolerance = ex["tolerance_suggestion"]["logits_abs"].get<float>();
  e.greedy_checked = e.greedy.size();
  e.vocab_compared = e.logits_last.size();
  // The decode steps use the positions the reference used.
  const auto decode_positions = ex["greedy_decode_position_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(decode_positions.front(), e.positions.back() + 1);
  return {name, dir + "/model", std::move(e), "F32", false};
}

// Runs prompt + greedy steps on a loaded model; checks the logits at every step and the ids.
// Returns each step row's largest difference from the reference (all rows, checked or not: the
// steps follow the reference's tokens). The references were made with an f32 KV cache, and the
// logit tolerance (1e-4) holds only with one: an f16 cache alone moves logits by ~5e-3, so the
// session asks for f32 explicitly (whatever RunLimits' default is); see run_greedy_with_cache for
// the narrower caches.
inline std::vector<float> run_text_case(const Checkpoint& ckpt, const Placement& placement, const WeightStore& weights,
                                        const Expectation& e, int64_t context = 256, DType kv_dtype = DType::F32) {
  const int V = ckpt.config().vocab;
  const size_t Vc = e.vocab_compared ? e.vocab_compared : static_cast<size_t>(V);
  std::vector<float> row_diffs;
  EXPECT_GE(static_cast<size_t>(V), Vc);
  if (static_cast<size_t>(V) < Vc) return row_diffs;
  Session s(ckpt.spec, placement, weights, context, RunLimits{}.prefill_chunk, kv_dtype);
  std::vector<float> logits = e.positions.empty() ? s.eval(e.prompt) : s.eval(e.prompt, e.positions);
  EXPECT_EQ(logits.size(), static_cast<size_t>(V));
  if (logits.size() != static_cast<size_t>(V)) return row_diffs;
  EXPECT_LE(max_abs_diff(logits.data(), e.logits_last.data(), Vc), e.tolerance) << "last prompt position";

  const size_t steps = e.greedy.size();
  // Free-running greedy for greedy_checked steps; after that, teacher-forced (feed the reference
  // token) and compare ids only at the listed steps.
  for (size_t step = 0; step < steps; ++step) {
    const float* ref = e.logits_steps.data() + step * Vc;
    row_diffs.push_back(max_abs_diff(logits.data(), ref, Vc));
    const bool free_running = step < e.greedy_checked;
    const bool check_id = free_running || std::find(e.teacher_forced.begin(), e.teacher_forced.end(),
                                                    static_cast<int>(step)) != e.teacher_forced.end();
    if (free_running || check_id) {
      EXPECT_LE(max_abs_diff(logits.data(), ref, Vc), e.tolerance) << "step " << step;
      EXPECT_EQ(argmax(logits.data(), Vc), e.greedy[step]) << "greedy id at step " << step;
    }
    if (step + 1 == steps) break;
    const int32_t next = e.greedy[step];  // equal to ours wherever checked
    logits = s.eval(std::vector<int32_t>{next});
  }
  return row_diffs;
}

// A free-running greedy run of a case with a KV cache of `kv_dtype`: each step feeds the token the
// run itself picked, as generation does.
struct CacheRun {
  size_t steps = 0;             // greedy steps compared (the reference's)
  size_t ids_matching = 0;      // leading steps whose id equals the reference's
  float max_logit_diff = 0.0f;  // largest |logit - reference| over the prompt row and the step rows
  bool all_ids_match() const { return ids_matching == steps; }  // (rows after a mismatch not compared)
};

// Runs `e` free-running with a `kv_dtype` cache; measures, asserts nothing.
inline CacheRun run_greedy_with_cache(const Checkpoint& ckpt, const Placement& placement, const WeightStore& weights,
                                      const Expectation& e, DType kv_dtype, int64_t context = 256) {
  const int V = ckpt.config().vocab;
  const size_t Vc = e.vocab_compared ? e.vocab_compared : static_cast<size_t>(V);
  CacheRun r;
  r.steps = e.greedy.size();
  Session s(ckpt.spec, placement, weights, context, RunLimits{}.prefill_chunk, kv_dtype);
  std::vector<float> logits = e.positions.empty() ? s.eval(e.prompt) : s.eval(e.prompt, e.positions);
  r.max_logit_diff = max_abs_diff(logits.data(), e.logits_last.data(), Vc);
  for (size_t step = 0; step < r.steps; ++step) {
    r.max_logit_diff = std::max(r.max_logit_diff, max_abs_diff(logits.data(), e.logits_steps.data() + step * Vc, Vc));
    const int32_t next = argmax(logits.data(), Vc);
    if (next != e.greedy[step]) break;
    ++r.ids_matching;
    if (step + 1 < r.steps) logits = s.eval(std::vector<int32_t>{next});
  }
  return r;
}

}  // namespace ferry::testing
