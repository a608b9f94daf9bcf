// The block layouts against llama.cpp's own files: every quantized matrix of each quantized llama
// golden's model.gguf (written by llama-quantize), dequantized by ferry, equals bit for bit the
// f32 matrix of its hf/ copy (the exact dequantization, checked by the golden's maker against
// llama.cpp's dequantize_row_*), with attn_q / attn_k rows in GGUF's permuted order.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "core/thread_pool.h"
#include "engine/checkpoint.h"
#include "text_cases.h"

namespace ferry {
namespace {

using testing::golden_dir;
using testing::read_json;

constexpr const char* kQuantizedCases[] = {"llama_q8_0",   "llama_q4_0", "llama_q4_1",   "llama_q5_0",
                                           "llama_iq4_nl", "llama_q3_k", "llama_q4_k_m", "llama_q5_k_m"};

// The HF name of a GGUF llama tensor (the golden READMEs' table) and, for attn_q / attn_k, the
// number of heads whose rows convert_hf_to_gguf.py permuted (0: rows as they are).
std::string hf_name(const std::string& gguf, int n_head, int n_kv, int* permuted_heads) {
  *permuted_heads = 0;
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  const size_t dot = gguf.find('.', 4);
  const std::string layer = gguf.substr(4, dot - 4);
  const std::string rest = gguf.substr(dot + 1);
  const std::map<std::string, std::string> names = {
      {"attn_q.weight", "self_attn.q_proj.weight"},          {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},          {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},           {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},           {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  if (rest == "attn_q.weight") *permuted_heads = n_head;
  if (rest == "attn_k.weight") *permuted_heads = n_kv;
  return "model.layers." + layer + "." + names.at(rest);
}

// Restores the SIMD level the test found.
struct LevelGuard {
  std::string saved = kernels::simd_level();
  ~LevelGuard() { kernels::set_simd_level(saved); }
};

TEST(QuantizedLayouts, GgufBlocksDequantizeToTheHfCopyBitForBit) {
  LevelGuard guard;
  ThreadPool pool(2);
  for (const char* name : kQuantizedCases) {
    const std::string dir = golden_dir() + "/text/" + name;
    const nlohmann::json shape = read_json(dir + "/cases.json")["shape"];
    const int n_head = shape["n_head"], n_kv = shape["n_kv"], head_dim = shape["head_dim"];
    const Checkpoint gguf = open_checkpoint(dir + "/model.gguf");
    const Checkpoint hf = open_checkpoint(dir + "/hf");
    std::map<std::string, int> matrices;  // per dtype
    for (const TensorRecord& t : gguf.tensors.all()) {
      if (!dtype_traits(t.dtype).is_quantized) continue;
      SCOPED_TRACE(std::string(name) + " " + t.name + " (" + std::string(dtype_name(t.dtype)) + ")");
      int heads = 0;
      const TensorRecord* want = hf.tensors.find(hf_name(t.name, n_head, n_kv, &heads));
      ASSERT_NE(want, nullptr);
      ASSERT_EQ(want->dtype, DType::F32);
      ASSERT_EQ(want->shape.numel(), t.shape.numel());
      const int64_t cols = t.shape.last(), rows = t.shape.numel() / cols;
      Tensor out = Tensor::host(DType::F32, Shape{rows, cols}, "out");
      for (const std::string& level : kernels::available_simd_levels()) {
        kernels::set_simd_level(level);
        kernels::to_f32(t.view().reshape(Shape{rows, cols}), out, pool);
        for (int64_t r = 0; r < rows; ++r) {
          // GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i.
          int64_t hf_row = r;
          if (heads != 0) {
            const int64_t h = r / head_dim, i = r % head_dim / 2, j = r % 2;
            hf_row = h * head_dim + j * (head_dim / 2) + i;
          }
          const auto* got = static_cast<const uint8_t*>(out.row(r));
          ASSERT_EQ(std::memcmp(got, want->data + hf_row * cols * 4, static_cast<size_t>(cols) * 4), 0)
              << "row " << r << " at level " << level;
        }
      }
      matrices[std::string(dtype_name(t.dtype))]++;
    }
    EXPECT_FALSE(matrices.empty()) << name;
    for (const auto& [dtype, count] : matrices)
      std::printf("[ layout   ] %s: %d %s matrices equal\n", name, count, dtype.c_str());
  }
}

}  // namespace
}  // namespace ferry
