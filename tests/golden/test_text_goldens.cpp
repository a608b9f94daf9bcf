// The text-model goldens: logits and greedy ids produced by llama.cpp (text/) and by THUDM's
// original ChatGLM code (glm/chatglm_text_*), reproduced from both the GGUF and the HF copy.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/opaque/opaque_device.h"
#include "backends/registry.h"
#include "core/device.h"
#include "core/error.h"
#include "engine/checkpoint.h"
#include "engine/session.h"
#include "engine/weight_loader.h"
#include "text_cases.h"

namespace ferry {
namespace {

using testing::chatglm_case;
using testing::golden_dir;
using testing::kChatGlmCases;
using testing::kTextCases;
using testing::max_abs_diff;
using testing::read_binary;
using testing::run_text_case;
using testing::text_cases;
using testing::TextCase;

// Where a golden runs: a CPU device; the opaque device, whose memory only its backend reads (every
// byte moves through the device interface); and split, the embedding, the head and the first layers on the opaque
// device and the later layers on a CPU device (crossings both ways).
enum class Where { Cpu, Opaque, OpaqueThenCpu };
const char* where_name(Where s) {
  return s == Where::Cpu ? "cpu:0" : s == Where::Opaque ? "opaque:0" : "opaque:0 + cpu:1";
}
constexpr Where kSetups[] = {Where::Cpu, Where::Opaque, Where::OpaqueThenCpu};

struct Loaded {
  Checkpoint ckpt;
  DeviceSet devices;
  Placement placement;
  WeightStore weights;
  explicit Loaded(const std::string& path, Where setup = Where::Cpu) : ckpt(open_checkpoint(path)) {
    const DeviceId first{setup == Where::Cpu ? DeviceType::Cpu : DeviceType::Opaque, 0};
    devices.add(create_device(DeviceSpec{first, Allocator::kUnlimited, 2}, 2));
    if (setup == Where::OpaqueThenCpu) {
      devices.add(create_device(DeviceSpec{DeviceId{DeviceType::Cpu, 1}, Allocator::kUnlimited, 2}, 2));
      // The later half of the layers on cpu:1; embed and head (tied in some cases) on the opaque
      // device, so activations cross both ways.
      const int layers = ckpt.config().n_layer;
      for (const auto& m : ckpt.spec.modules) placement.module_device[m.name] = &devices.at(0);
      for (int l = layers / 2; l < layers; ++l) placement.module_device[layer_module(l)] = &devices.at(1);
    } else {
      placement = Placement::single(devices.at(0));
    }
    load_weights(ckpt, placement, weights);
  }
  // Data moved into and out of the opaque device (zeros when it has none).
  opaque::TransferCounts opaque_transfers() {
    auto* d = dynamic_cast<opaque::OpaqueDevice*>(&devices.at(0));
    return d != nullptr ? d->transfers() : opaque::TransferCounts{};
  }
};

// Runs a case on `setup`; returns each step row's largest difference from the reference.
std::vector<float> check_case(const TextCase& c, Where setup = Where::Cpu) {
  SCOPED_TRACE(c.label + " from " + c.model_path + " on " + where_name(setup));
  Loaded m(c.model_path, setup);
  const std::vector<float> row_diffs = run_text_case(m.ckpt, m.placement, m.weights, c.expect);
  if (setup != Where::Cpu) {
    // The weights went in by write (the opaque device cannot use the mapped file in place), and every
    // step wrote its inputs and read its logits (or, split, its crossings) through the interface.
    const opaque::TransferCounts t = m.opaque_transfers();
    EXPECT_GE(t.bytes_written, m.weights.bytes_on(m.devices.at(0)));
    EXPECT_GT(t.reads, 0u);
  }
  return row_diffs;
}

// Whether ferry's matmul meets the weights of a quantized golden with activations rounded as
// llama.cpp rounds them (q8_0, q8_1 or q8_K by weight type).
bool rounds_activations_like_llama_cpp(const std::string& weights_dtype) {
  return weights_dtype != "F32" && kernels::q8_0_activations() == kernels::Q8Activations::Q8_0;
}

// How many of a prompt's step rows the golden maker's numpy emulation of ggml's activation
// rounding reproduced within 1e-5 (cases.json checks.<prompt>.*activation_rounding*), or all rows
// where the case does not say.
double emulated_rows_within(const std::string& name, const TextCase& c) {
  const nlohmann::json cases = testing::read_json(golden_dir() + "/text/" + name + "/cases.json");
  const std::string prompt = c.label.substr(0, c.label.find(' '));
  for (const auto& [key, value] : cases["checks"][prompt].items()) {
    if (key.find("activation_rounding") != std::string::npos) return value["rows_within_1e-5"].get<double>();
  }
  return static_cast<double>(c.expect.greedy.size());
}

// One line per GGUF copy of a case: its largest logit difference from llama.cpp and how many step
// rows are within 1e-5 / 1e-4 (printed, and recorded in the test's XML output).
void report(const TextCase& c, const std::vector<float>& diffs) {
  if (diffs.empty()) return;
  const float worst = *std::max_element(diffs.begin(), diffs.end());
  const auto within = [&](float tol) {
    return std::count_if(diffs.begin(), diffs.end(), [&](float d) { return d <= tol; });
  };
  const std::string line =
      fmt::format("{} ({}): max |logit - llama.cpp| {:.3g} over {} rows; {} within 1e-5, {} within 1e-4", c.label,
                  c.weights_dtype, worst, diffs.size(), within(1e-5f), within(1e-4f));
  std::printf("[ report   ] %s\n", line.c_str());
  ::testing::Test::RecordProperty(c.label, line);
}

class TextGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(TextGolden, MatchesLlamaCppFromGgufAndHf) {
  for (const TextCase& c : text_cases(GetParam())) {
    if (!c.from_gguf) {
      for (Where setup : kSetups) check_case(c, setup);
      continue;
    }
    const std::vector<float> diffs = check_case(c);
    report(c, diffs);
    for (Where setup : {Where::Opaque, Where::OpaqueThenCpu}) {
      EXPECT_EQ(check_case(c, setup), diffs) << "the same arithmetic";
    }
    if (c.weights_dtype != "F32" && rounds_activations_like_llama_cpp(c.weights_dtype)) {
      // llama.cpp rounds activations (to q8_0, q8_1 or q8_K by weight type) before each quantized
      // matmul, and so do we by default: the same arithmetic, so nearly every row is as close as
      // an f32 case. A row can still differ where float noise moves one block's scale across an
      // f16 rounding boundary (or one x * scale across k + 0.5): the golden maker's exact numpy
      // emulation of ggml's rounding gets 9 of llama_q4_1 p1's 24 rows within 1e-5 (and ferry the
      // same 9, to the same logits). So: 90% of the rows, or as many as that emulation got. With
      // f32 activations no row gets within 1e-4 (they differ by up to 0.3).
      const auto close = std::count_if(diffs.begin(), diffs.end(), [](float d) { return d <= 1e-4f; });
      EXPECT_GE(static_cast<double>(close),
                std::min(0.9 * static_cast<double>(diffs.size()), emulated_rows_within(GetParam(), c)))
          << c.label << ": rows within 1e-4 of llama.cpp";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, TextGolden, ::testing::ValuesIn(kTextCases));

// The f32-exact cases (every text case's F32 copies, the dequantized hf/ twins included, and the
// ChatGLM cases) with narrower KV caches, free-running greedy as generation runs.
std::vector<TextCase> f32_cases() {
  std::vector<TextCase> out;
  for (const char* name : kTextCases) {
    for (TextCase& c : text_cases(name)) {
      if (c.weights_dtype == "F32") out.push_back(std::move(c));
    }
  }
  for (const char* name : kChatGlmCases) out.push_back(chatglm_case(name));
  return out;
}

// The case a label belongs to, for the lists below: "qwen3 p1" (text/<name> and the prompt) or the
// ChatGLM case's name.
std::string case_key(const TextCase& c) {
  const size_t text = c.model_path.find("/text/");
  if (text == std::string::npos) return c.label;
  const std::string name = c.model_path.substr(text + 6, c.model_path.find('/', text + 6) - text - 6);
  return name + " " + c.label.substr(0, c.label.find(' '));
}

// Where a q8_0 cache changes the free-running greedy ids (both copies of a case alike, the same at
// every SIMD level): its logits move by up to ~0.47, past these cases' top-1/top-2 margins.
// Reported, not asserted; every other case keeps its ids with q8_0, and every case with f16 and bf16.
const std::set<std::string> kQ8CacheChangesIds = {"glm4 p1",       "qwen3 p1",      "llama31_rope_scaling p0",
                                                  "qwen2_yarn p0", "qwen2_yarn p1", "llama_q4_1 p1"};

// The F32 text goldens with narrower KV caches, free-running greedy as generation runs: the greedy
// ids stay the reference's (f16, RunLimits' default, and bf16: every case; q8_0: all but the cases
// above), and the largest logit difference is reported per case (f16 measured at most 0.0201, bf16
// 0.138, q8_0 0.471; the bounds asserted leave room). q8_0 needs a kv width of whole blocks of 32:
// the qwen2 cases (1 kv head x 16) are refused, as they should be.
TEST(TextGoldenKvCache, NarrowCachesKeepTheGreedyIds) {
  for (const TextCase& c : f32_cases()) {
    SCOPED_TRACE(c.label + " from " + c.model_path);
    Loaded m(c.model_path);
    for (DType kv : {DType::F16, DType::BF16, DType::Q8_0}) {
      const std::string key = case_key(c);
      std::string line;
      if (m.ckpt.config().kv_width() % dtype_traits(kv).block_size != 0) {
        EXPECT_THROW(testing::run_greedy_with_cache(m.ckpt, m.placement, m.weights, c.expect, kv), Error);
        line = fmt::format("{} cache: refused (kv width {})", dtype_name(kv), m.ckpt.config().kv_width());
      } else {
        const testing::CacheRun r = testing::run_greedy_with_cache(m.ckpt, m.placement, m.weights, c.expect, kv);
        line = fmt::format("{} cache: greedy ids {}/{} as the reference's, max |logit - reference| {:.3g}",
                           dtype_name(kv), r.ids_matching, r.steps, r.max_logit_diff);
        const bool changes = kv == DType::Q8_0 && kQ8CacheChangesIds.count(key) > 0;
        if (!changes) {
          EXPECT_TRUE(r.all_ids_match()) << line;
        }
        if (kv == DType::F16) {
          EXPECT_LE(r.max_logit_diff, 0.04f) << line;
        } else if (kv == DType::BF16) {
          EXPECT_LE(r.max_logit_diff, 0.3f) << line;
        }
      }
      std::printf("[ kv cache ] %s (%s): %s\n", key.c_str(), c.label.c_str(), line.c_str());
      ::testing::Test::RecordProperty(key + " " + c.label + " " + std::string(dtype_name(kv)), line);
    }
  }
}

class ChatGlmGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatGlmGolden, MatchesThudmOriginalCode) {
  const TextCase c = chatglm_case(GetParam());
  for (Where setup : kSetups) check_case(c, setup);
}

INSTANTIATE_TEST_SUITE_P(AllCases, ChatGlmGolden, ::testing::ValuesIn(kChatGlmCases));

// All prompt positions at once must equal the reference's per-position logits.
TEST(ChatGlmGoldenAllLogits, EveryPromptPosition) {
  const std::string dir = golden_dir() + "/glm/chatglm_text_rope500_strong";
  const auto prompt = read_binary<int32_t>(dir + "/prompt_ids.i32.bin");
  const auto positions = read_binary<int32_t>(dir + "/position_ids.i32.bin");
  const auto all = read_binary<float>(dir + "/logits_all_prompt.f32.bin");
  Loaded m(dir + "/model");
  Session s(m.ckpt.spec, m.placement, m.weights, 64, RunLimits{}.prefill_chunk, DType::F32);  // as the reference
  const std::vector<float> logits = s.eval(prompt, positions, /*all_logits=*/true);
  const size_t V = static_cast<size_t>(m.ckpt.config().vocab);
  ASSERT_EQ(all.size(), prompt.size() * V);
  EXPECT_LE(max_abs_diff(logits.data(), all.data(), all.size()), 1e-4f);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// A q8_0 / q4_0 GGUF loaded onto a CPU device: every matrix the graph multiplies by that the CPU
// kernels repack (kernels::repacks_weight: whole 16-row groups, on a level with packed kernels) is
// held Layout::Packed; every other weight as stored, an untied token embedding table (only looked
// up) included; and the device is charged exactly the checkpoint's bytes: repacking reorders, it
// does not add.
TEST(RepackedWeights, CpuDeviceRepacksAtLoadAndChargesTheStoredBytes) {
  for (const char* name : {"llama_q8_0", "llama_q4_0"}) {
    Loaded m(golden_dir() + "/text/" + name + "/model.gguf");
    std::map<std::string, int> readers;  // modules reading each weight name
    std::set<std::string> embedding_tables;
    for (const auto& module : m.ckpt.spec.modules) {
      for (const auto& p : module.params) {
        readers[p.name] += 1;
        if (p.role == LogicalTensor::TokenEmbedding) embedding_tables.insert(p.name);
      }
    }
    int packed = 0, kept = 0;
    size_t bytes = 0;
    for (const auto& [weight, tensor] : m.weights.all()) {
      bytes += Allocator::rounded(tensor.nbytes());
      const bool only_looked_up = embedding_tables.count(weight) != 0 && readers[weight] == 1;
      const bool repacks = !only_looked_up && kernels::repacks_weight(tensor.dtype(), tensor.shape());
      EXPECT_EQ(tensor.layout(), repacks ? Layout::Packed : Layout::Rows) << name << " " << weight;
      (repacks ? packed : kept) += 1;
    }
    const bool level_packs = kernels::repacks_weight(DType::Q8_0, Shape{16, 32});
    EXPECT_EQ(packed > 0, level_packs) << name << ": " << packed << " packed, " << kept << " kept";
    EXPECT_GT(kept, 0) << name << ": the norms stay as stored";
    EXPECT_EQ(m.devices.at(0).allocator().live(), bytes) << name;
  }
}

}  // namespace
}  // namespace ferry
