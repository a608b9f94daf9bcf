// Quantizing while loading (--dtype) against llama-quantize: each quantized llama golden was made
// by llama-quantize from an f32 model that the case ships as hf_f32_source/. Loading that model
// with the case's --dtype must choose llama-quantize's type for every tensor, produce its blocks
// byte for byte, and so run the GGUF's own golden.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernels/packed_rows.h"
#include "common/placed_model.h"
#include "core/dtype.h"
#include "models/weight_quant.h"
#include "text_cases.h"

namespace ferry {
namespace {

using testing::golden_dir;
using testing::read_json;

struct QuantizedCase {
  const char* name;
  const char* dtype;  // what a user passes to --dtype for the file llama-quantize made
};

// llama_q3_k was made with --pure (every matrix Q3_K), so it is the plain q3_k; the _m cases are
// llama-quantize's mixes.
constexpr QuantizedCase kCases[] = {{"llama_q4_1", "q4_1"}, {"llama_q5_0", "q5_0"},     {"llama_iq4_nl", "iq4_nl"},
                                    {"llama_q3_k", "q3_k"}, {"llama_q4_k_m", "q4_k_m"}, {"llama_q5_k_m", "q5_k_m"}};

std::string case_dir(const QuantizedCase& c) {
  return golden_dir() + "/text/" + c.name;
}

// The GGUF row that holds HF row `r` of a q/k projection: convert_hf_to_gguf.py permutes each head's
// rows so that HF row h*hd + j*hd/2 + i lands at GGUF row h*hd + 2i + j.
int64_t gguf_row(const ParamSpec& p, int64_t r, int head_dim) {
  if (p.role != LogicalTensor::AttnQ && p.role != LogicalTensor::AttnK) return r;
  const int64_t h = r / head_dim, within = r % head_dim, half = head_dim / 2;
  return h * head_dim + 2 * (within % half) + within / half;
}

TEST(QuantizeAtLoad, EveryTensorGetsTheTypeLlamaQuantizeChose) {
  for (const QuantizedCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const Checkpoint source = open_checkpoint(case_dir(c) + "/hf_f32_source");
    const Checkpoint gguf = open_checkpoint(case_dir(c) + "/model.gguf");
    const WeightQuant quant = *parse_weight_quant(c.dtype);
    int matrices = 0;
    for (const auto& m : source.spec.modules) {
      for (const auto& p : m.params) {
        const ParamSpec* theirs = gguf.spec.find(p.role, p.layer);
        ASSERT_NE(theirs, nullptr) << p.name;
        EXPECT_EQ(dtype_name(quantized_dtype(source.spec, p, quant)), dtype_name(theirs->compute_dtype)) << p.name;
        matrices += p.shape.rank == 2;
      }
    }
    EXPECT_GE(matrices, 8);
  }
}

TEST(QuantizeAtLoad, LoadedBlocksEqualLlamaQuantizesAndRunTheGgufGolden) {
  for (const QuantizedCase& c : kCases) {
    SCOPED_TRACE(c.name);
    Checkpoint source = open_checkpoint(case_dir(c) + "/hf_f32_source");
    const Checkpoint gguf = open_checkpoint(case_dir(c) + "/model.gguf");
    const int head_dim = read_json(case_dir(c) + "/cases.json")["shape"]["head_dim"];
    apply_weight_quant(source.spec, *parse_weight_quant(c.dtype));
    const testing::PlacedModel placed(source, testing::placement_request("cpu:0", Strategy::Balanced, 256, 64));
    int compared = 0;
    for (const auto& m : source.spec.modules) {
      for (const auto& p : m.params) {
        if (!dtype_traits(p.compute_dtype).is_quantized) continue;
        const Tensor* ours = placed.weights.find(p.name);
        const ParamSpec* theirs_spec = gguf.spec.find(p.role, p.layer);
        ASSERT_NE(ours, nullptr) << p.name;
        ASSERT_NE(theirs_spec, nullptr) << p.name;
        const TensorRecord* theirs = gguf.tensors.find(theirs_spec->checkpoint_name());
        ASSERT_NE(theirs, nullptr) << p.name;
        ASSERT_EQ(ours->dtype(), theirs->dtype) << p.name;
        ASSERT_EQ(ours->shape(), theirs->shape) << p.name;
        const size_t row_bytes = ours->row_bytes();
        std::vector<uint8_t> unpacked;  // a weight the CPU backend repacked (q4_k) read back as rows
        for (int64_t r = 0; r < ours->shape().rows(); ++r) {
          const uint8_t* want = theirs->data + gguf_row(p, r, head_dim) * static_cast<int64_t>(row_bytes);
          ASSERT_EQ(std::memcmp(kernels::standard_row(*ours, r, unpacked), want, row_bytes), 0)
              << p.name << " row " << r;
        }
        ++compared;
      }
    }
    EXPECT_GE(compared, 8);
    // The same blocks run the golden of llama.cpp's quantized file, with its tolerance and steps.
    for (const testing::TextCase& tc : testing::text_cases(c.name)) {
      if (!tc.from_gguf) continue;
      SCOPED_TRACE(tc.label);
      testing::run_text_case(source, placed.placement, placed.weights, tc.expect);
    }
  }
}

}  // namespace
}  // namespace ferry
