// Reads the golden checkpoints (see ../shared/golden/README.md and each case's README) with both
// readers and checks what the READMEs state: architectures, sizes, tensor names, shapes and
// dtypes. Each text case holds the same model as GGUF and as HF safetensors, so the bytes of
// tensors stored without permutation must agree across the two files (exactly, after
// dequantizing, for the Q8_0 and Q4_0 cases).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/half.h"
#include "format_test_util.h"
#include "formats/gguf.h"
#include "formats/json_file.h"
#include "formats/safetensors.h"

using namespace ferry;
using namespace ferry::testing;

namespace {

struct TextCase {
  const char* name;
  const char* arch;          // GGUF general.architecture
  const char* hf_embedding;  // HF name of the token embedding
  int64_t vocab;
  int64_t hidden;
  uint32_t n_head;
  uint32_t n_kv_head;
  uint32_t rope_dims;
  float rope_base;
  size_t gguf_tensors;  // counted from the README's tensor table
  size_t hf_tensors;
  DType matrix_dtype;  // dtype of the 2-D GGUF tensors
};

// n_layer is 2 everywhere. GGUF counts: llama 9 per layer + 3; qwen2 12 per layer + 2 (tied, no
// output.weight); glm4 13 + 3; glm 11 + 3; chatglm 7 + 3 (HF also has rotary_pos_emb.inv_freq).
const TextCase kCases[] = {
    {"llama", "llama", "model.embed_tokens.weight", 320, 64, 4, 2, 16, 10000.0f, 21, 21, DType::F32},
    {"llama_q8_0", "llama", "model.embed_tokens.weight", 320, 64, 4, 2, 16, 10000.0f, 21, 21, DType::Q8_0},
    {"llama_q4_0", "llama", "model.embed_tokens.weight", 320, 64, 4, 2, 16, 10000.0f, 21, 21, DType::Q4_0},
    {"qwen2", "qwen2", "model.embed_tokens.weight", 352, 80, 5, 1, 16, 1e6f, 26, 26, DType::F32},
    {"glm4", "glm4", "model.embed_tokens.weight", 320, 64, 4, 2, 16, 10000.0f, 29, 29, DType::F32},
    {"glm", "chatglm", "model.embed_tokens.weight", 320, 64, 4, 2, 8, 10000.0f, 25, 25, DType::F32},
    {"chatglm", "chatglm", "transformer.embedding.word_embeddings.weight", 320, 64, 4, 2, 8, 20000.0f, 17, 18,
     DType::F32},
};

std::string case_dir(const TextCase& c) {
  return golden_dir() + "/text/" + c.name;
}

// Independent dequantization of a GGUF row, from the block layouts in the GGUF spec.
std::vector<float> dequantize(const TensorRecord& r) {
  const int64_t n = r.shape.numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (r.dtype == DType::F32) {
    std::memcpy(out.data(), r.data, r.nbytes);
    return out;
  }
  for (int64_t blk = 0; blk < n / 32; ++blk) {
    float* y = out.data() + blk * 32;
    if (r.dtype == DType::Q8_0) {
      const uint8_t* p = r.data + blk * 34;
      uint16_t d;
      std::memcpy(&d, p, 2);
      for (int j = 0; j < 32; ++j) y[j] = f16_to_f32(d) * static_cast<float>(static_cast<int8_t>(p[2 + j]));
    } else {
      const uint8_t* p = r.data + blk * 18;
      uint16_t d;
      std::memcpy(&d, p, 2);
      for (int j = 0; j < 16; ++j) {
        y[j] = f16_to_f32(d) * static_cast<float>((p[2 + j] & 15) - 8);
        y[j + 16] = f16_to_f32(d) * static_cast<float>((p[2 + j] >> 4) - 8);
      }
    }
  }
  return out;
}

class GoldenText : public ::testing::TestWithParam<TextCase> {};

}  // namespace

TEST_P(GoldenText, GgufMetadataAndTensors) {
  const TextCase& c = GetParam();
  const std::string path = case_dir(c) + "/model.gguf";
  const GgufFile g = GgufFile::open(path);
  EXPECT_TRUE(g.version() == 2 || g.version() == 3) << g.version();
  EXPECT_EQ(g.data_offset() % g.alignment(), 0u);

  const std::string a = c.arch;
  EXPECT_EQ(g.get_string("general.architecture"), a);
  EXPECT_EQ(g.get_u32(a + ".block_count"), 2u);
  EXPECT_EQ(g.get_u32(a + ".embedding_length"), static_cast<uint32_t>(c.hidden));
  EXPECT_EQ(g.get_u32(a + ".attention.head_count"), c.n_head);
  EXPECT_EQ(g.get_u32(a + ".attention.head_count_kv"), c.n_kv_head);
  EXPECT_EQ(g.get_u32(a + ".rope.dimension_count"), c.rope_dims);
  EXPECT_FLOAT_EQ(g.get_f32(a + ".rope.freq_base"), c.rope_base);
  EXPECT_GT(g.get_u32(a + ".context_length"), 0u);

  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "llama");
  const std::vector<std::string> tokens = g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), static_cast<size_t>(c.vocab));
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");

  const TensorSet& set = g.tensors();
  EXPECT_EQ(set.size(), c.gguf_tensors);
  const TensorRecord* embd = set.find("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (Shape{c.vocab, c.hidden}));
  EXPECT_EQ(embd->dtype, c.matrix_dtype);
  const TensorRecord* norm = set.find("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->shape, (Shape{c.hidden}));
  EXPECT_EQ(norm->dtype, DType::F32);  // 1-D norms stay F32 even in the quantized cases
  const TensorRecord* attn_norm = set.find("blk.1.attn_norm.weight");
  ASSERT_NE(attn_norm, nullptr);
  EXPECT_EQ(attn_norm->dtype, DType::F32);
  EXPECT_EQ(set.find("blk.2.attn_norm.weight"), nullptr);
  EXPECT_EQ(set.find("output.weight") == nullptr, std::string(c.name) == "qwen2");  // qwen2 is tied
  for (const TensorRecord& r : set.all()) {
    EXPECT_EQ(r.dtype, r.shape.rank == 2 ? c.matrix_dtype : DType::F32) << r.name;
    EXPECT_EQ((r.data - r.file->data()) % static_cast<ptrdiff_t>(g.alignment()), 0) << r.name;
  }
}

TEST_P(GoldenText, SafetensorsTwinHasTheSameWeights) {
  const TextCase& c = GetParam();
  const TensorSet hf = open_safetensors(case_dir(c) + "/hf");
  EXPECT_EQ(hf.size(), c.hf_tensors);
  for (const TensorRecord& r : hf.all()) EXPECT_EQ(r.dtype, DType::F32) << r.name;
  const TensorRecord* embd = hf.find(c.hf_embedding);
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (Shape{c.vocab, c.hidden}));

  const nlohmann::json config = read_json_file(case_dir(c) + "/hf/config.json");
  EXPECT_EQ(json_int(config, "hidden_size", "config.json"), c.hidden);

  // Same model in both files: the embedding (never permuted) must agree value for value.
  const GgufFile g = GgufFile::open(case_dir(c) + "/model.gguf");
  const std::vector<float> from_gguf = dequantize(*g.tensors().find("token_embd.weight"));
  ASSERT_EQ(from_gguf.size() * sizeof(float), embd->nbytes);
  EXPECT_EQ(std::memcmp(from_gguf.data(), embd->data, embd->nbytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenText, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<TextCase>& param) { return std::string(param.param.name); });

TEST(GoldenText, LlamaShapesFromTheReadme) {
  const std::string dir = golden_dir() + "/text/llama";
  const GgufFile g = GgufFile::open(dir + "/model.gguf");
  const TensorSet& set = g.tensors();
  // ne = [in, out] in GGUF is [out, in] outermost-first, as HF stores nn.Linear weights.
  EXPECT_EQ(set.find("blk.0.attn_q.weight")->shape, (Shape{64, 64}));
  EXPECT_EQ(set.find("blk.0.attn_q.weight")->dtype, DType::F32);
  EXPECT_EQ(set.find("blk.0.attn_k.weight")->shape, (Shape{32, 64}));
  EXPECT_EQ(set.find("blk.0.ffn_gate.weight")->shape, (Shape{160, 64}));
  EXPECT_EQ(set.find("blk.0.ffn_down.weight")->shape, (Shape{64, 160}));
  EXPECT_EQ(set.find("output.weight")->shape, (Shape{320, 64}));
  EXPECT_EQ(g.get_u32("llama.context_length"), 2048u);

  // v_proj and down_proj are not permuted by the converter: identical bytes in both files.
  const TensorSet hf = open_safetensors(dir + "/hf/model.safetensors");
  for (const auto& [gguf_name, hf_name] : {std::pair{"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
                                           std::pair{"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"}}) {
    const TensorRecord* a = set.find(gguf_name);
    const TensorRecord* b = hf.find(hf_name);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->shape, b->shape);
    ASSERT_EQ(a->nbytes, b->nbytes);
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << gguf_name;
  }
}

TEST(GoldenText, QuantizedCasesHoldQuantizedMatrices) {
  const GgufFile q8 = GgufFile::open(golden_dir() + "/text/llama_q8_0/model.gguf");
  const TensorRecord* q = q8.tensors().find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::Q8_0);
  EXPECT_EQ(q->shape, (Shape{64, 64}));
  EXPECT_EQ(q->nbytes, 64u * 2 * 34);  // 64 rows of 2 blocks
  const GgufFile q4 = GgufFile::open(golden_dir() + "/text/llama_q4_0/model.gguf");
  EXPECT_EQ(q4.tensors().find("blk.1.ffn_down.weight")->dtype, DType::Q4_0);
  EXPECT_EQ(q4.tensors().find("blk.1.ffn_down.weight")->nbytes, 64u * 5 * 18);  // rows of 160 = 5 blocks

  // The HF twin holds the exactly dequantized weights (README), for every matrix not permuted.
  const TensorSet hf = open_safetensors(golden_dir() + "/text/llama_q8_0/hf");
  const std::vector<float> v = dequantize(*q8.tensors().find("blk.0.attn_v.weight"));
  const TensorRecord* hv = hf.find("model.layers.0.self_attn.v_proj.weight");
  ASSERT_EQ(v.size() * 4, hv->nbytes);
  EXPECT_EQ(std::memcmp(v.data(), hv->data, hv->nbytes), 0);
}

TEST(GoldenGlm, ChatglmTextModelDirectory) {
  const std::string dir = golden_dir() + "/glm/chatglm_text_rope1_strong/model";
  const nlohmann::json config = read_json_file(dir + "/config.json");
  EXPECT_EQ(json_string(config, "model_type", "config.json"), "chatglm");
  EXPECT_EQ(json_int(config, "hidden_size", "config.json"), 64);
  EXPECT_EQ(json_int(config, "num_layers", "config.json"), 2);
  EXPECT_EQ(json_int(config, "padded_vocab_size", "config.json"), 300);
  EXPECT_EQ(json_int(config, "multi_query_group_num", "config.json"), 2);
  EXPECT_EQ(json_opt_int_list(config, "eos_token_id", "config.json"), (std::vector<int64_t>{284, 291, 293}));

  const TensorSet set = open_safetensors(dir);
  const nlohmann::json names = read_json_file(dir + "/tensor_names.json");
  ASSERT_TRUE(names.is_object());
  EXPECT_EQ(set.size(), names.size());
  for (const auto& [name, shape] : names.items()) {
    const TensorRecord* r = set.find(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->dtype, DType::F32) << name;
    ASSERT_EQ(r->shape.rank, static_cast<int>(shape.size())) << name;
    for (int i = 0; i < r->shape.rank; ++i) EXPECT_EQ(r->shape[i], shape[static_cast<size_t>(i)].get<int64_t>());
  }
  EXPECT_EQ(set.find("transformer.embedding.word_embeddings.weight")->shape, (Shape{300, 64}));
  EXPECT_EQ(set.find("transformer.encoder.layers.0.self_attention.query_key_value.weight")->shape, (Shape{128, 64}));
}
