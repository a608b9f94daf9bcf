// The block layouts against llama.cpp's own files, both ways, for every quantized matrix of each
// quantized llama golden's model.gguf (written by llama-quantize), with attn_q / attn_k rows in
// GGUF's permuted order:
// - dequantized by ferry, it equals bit for bit the f32 matrix of the case's hf/ copy (the exact
//   dequantization, checked by the golden's maker against llama.cpp's dequantize_row_*);
// - where the case ships the f32 weights llama-quantize started from (hf_f32_source/), ferry's
//   quantizers turn them into model.gguf's bytes exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
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

// GGUF row r of a matrix whose rows convert_hf_to_gguf.py permuted over `heads` heads of
// head_dim rows (0: not permuted) holds this HF row: GGUF row h*hd + 2i + j is HF row h*hd + j*hd/2 + i.
int64_t hf_row_of(int64_t r, int heads, int head_dim) {
  if (heads == 0) return r;
  const int64_t h = r / head_dim, i = r % head_dim / 2, j = r % 2;
  return h * head_dim + j * (head_dim / 2) + i;
}

// One quantized matrix of a case's model.gguf and its f32 twin (same values or source, HF layout).
struct QuantizedMatrix {
  const TensorRecord* gguf = nullptr;
  const TensorRecord* twin = nullptr;
  int heads = 0;  // attn_q / attn_k: heads whose rows are permuted
  int head_dim = 0;
  int64_t rows = 0, cols = 0;

  // The twin's rows in GGUF's order, as an f32 [rows, cols] tensor.
  Tensor twin_in_gguf_order() const {
    Tensor t = Tensor::host(DType::F32, Shape{rows, cols}, twin->name);
    const size_t row_bytes = static_cast<size_t>(cols) * 4;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(t.row(r), twin->data + static_cast<size_t>(hf_row_of(r, heads, head_dim)) * row_bytes, row_bytes);
    }
    return t;
  }
};

// Calls `check` for every quantized matrix of text/<name>/model.gguf, with its twin from the
// checkpoint in text/<name>/<twin_dir>, and prints how many of each type it saw.
void for_each_quantized_matrix(const std::string& name, const std::string& twin_dir,
                               const std::function<void(const QuantizedMatrix&)>& check) {
  const std::string dir = golden_dir() + "/text/" + name;
  const nlohmann::json shape = read_json(dir + "/cases.json")["shape"];
  const int n_head = shape["n_head"], n_kv = shape["n_kv"], head_dim = shape["head_dim"];
  const Checkpoint gguf = open_checkpoint(dir + "/model.gguf");
  const Checkpoint twin = open_checkpoint(dir + "/" + twin_dir);
  std::map<std::string, int> matrices;  // per dtype
  for (const TensorRecord& t : gguf.tensors.all()) {
    if (!dtype_traits(t.dtype).is_quantized) continue;
    SCOPED_TRACE(name + " " + t.name + " (" + std::string(dtype_name(t.dtype)) + ") vs " + twin_dir);
    QuantizedMatrix m;
    m.gguf = &t;
    m.head_dim = head_dim;
    m.twin = twin.tensors.find(hf_name(t.name, n_head, n_kv, &m.heads));
    ASSERT_NE(m.twin, nullptr);
    ASSERT_EQ(m.twin->dtype, DType::F32);
    ASSERT_EQ(m.twin->shape.numel(), t.shape.numel());
    m.cols = t.shape.last();
    m.rows = t.shape.numel() / m.cols;
    check(m);
    if (::testing::Test::HasFatalFailure()) return;
    matrices[std::string(dtype_name(t.dtype))]++;
  }
  EXPECT_FALSE(matrices.empty()) << name;
  for (const auto& [dtype, count] : matrices)
    std::printf("[ layout   ] %s (%s): %d %s matrices equal\n", name.c_str(), twin_dir.c_str(), count, dtype.c_str());
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
    for_each_quantized_matrix(name, "hf", [&](const QuantizedMatrix& m) {
      const Tensor want = m.twin_in_gguf_order();
      Tensor out = Tensor::host(DType::F32, Shape{m.rows, m.cols}, "out");
      for (const std::string& level : kernels::available_simd_levels()) {
        kernels::set_simd_level(level);
        kernels::to_f32(m.gguf->view().reshape(Shape{m.rows, m.cols}), out, pool);
        for (int64_t r = 0; r < m.rows; ++r) {
          ASSERT_EQ(std::memcmp(out.row(r), want.row(r), static_cast<size_t>(m.cols) * 4), 0)
              << "row " << r << " at level " << level;
        }
      }
    });
  }
}

// llama-quantize without an importance matrix quantizes each row on its own (quantize_row_*_ref,
// quantize_iq4_nl / quantize_iq4_xs with no weights); ferry's from_f32 must write the same bytes.
// Covers every type these goldens hold: q4_1, q5_0, iq4_nl, q3_k, q4_k, q5_k, q6_k.
TEST(QuantizedLayouts, QuantizingTheF32SourceGivesTheGgufBytes) {
  ThreadPool pool(2);
  std::set<std::string> covered;
  for (const char* name : kQuantizedCases) {
    if (!std::filesystem::exists(golden_dir() + "/text/" + name + "/hf_f32_source")) continue;
    for_each_quantized_matrix(name, "hf_f32_source", [&](const QuantizedMatrix& m) {
      const DType type = m.gguf->dtype;
      Tensor ours = Tensor::host(type, Shape{m.rows, m.cols}, "ours");
      kernels::from_f32(m.twin_in_gguf_order(), ours, pool);
      ASSERT_EQ(ours.nbytes(), m.gguf->nbytes);
      const auto* got = static_cast<const uint8_t*>(ours.data());
      const size_t block_bytes = dtype_traits(type).block_bytes;
      const int64_t blocks_per_row = m.cols / dtype_traits(type).block_size;
      for (size_t b = 0; b < m.gguf->nbytes / block_bytes; ++b) {
        if (std::memcmp(got + b * block_bytes, m.gguf->data + b * block_bytes, block_bytes) != 0) {
          const int64_t row = static_cast<int64_t>(b) / blocks_per_row;
          FAIL() << "first differing block: " << b << " (row " << row << ", block " << b % blocks_per_row
                 << " of the row; source row " << hf_row_of(row, m.heads, m.head_dim) << ")";
        }
      }
      covered.insert(std::string(dtype_name(type)));
    });
  }
  const std::set<std::string> expected = {"q4_1", "q5_0", "iq4_nl", "q3_k", "q4_k", "q5_k", "q6_k"};
  EXPECT_EQ(covered, expected);
}

}  // namespace
}  // namespace ferry
