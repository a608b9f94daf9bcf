// The tiny-checkpoint generator (tools/tiny_model): deterministic by seed, golden layouts for every
// architecture, the Hugging Face and GGUF copies hold the same model, quantized copies stay within
// a quantization step, and the tokenizer files agree with each other.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "../../tools/tiny_model/generate.h"
#include "backends/cpu/kernels/simd.h"
#include "core/error.h"
#include "core/half.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "text/tokenizer.h"
#include "text/vocab.h"
#include "tools/test_support.h"

using namespace ferry;
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

const std::vector<tiny::Arch> kArchs = {tiny::Arch::Llama, tiny::Arch::Qwen2, tiny::Arch::Glm, tiny::Arch::Glm4,
                                        tiny::Arch::ChatGlm};

tiny::Options options(tiny::Arch arch, const std::string& dir, const std::string& format, DType dtype,
                      uint64_t seed = 7) {
  tiny::Options o;
  o.arch = arch;
  o.out_dir = dir;
  o.format = format;
  o.dtype = dtype;
  o.seed = seed;
  return o;
}

// Reference decoding written from the block layouts in core/dtype.h (independent of kernels/).
std::vector<float> decode(const TensorRecord& r) {
  const size_t n = static_cast<size_t>(r.shape.numel());
  std::vector<float> out(n);
  switch (r.dtype) {
    case DType::F32:
      std::memcpy(out.data(), r.data, n * 4);
      break;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, r.data + 2 * i, 2);
        out[i] = r.dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    case DType::Q8_0:
      for (size_t b = 0; b < n / 32; ++b) {
        BlockQ8_0 block;
        std::memcpy(&block, r.data + b * sizeof(block), sizeof(block));
        for (size_t j = 0; j < 32; ++j) out[b * 32 + j] = f16_to_f32(block.d) * static_cast<float>(block.qs[j]);
      }
      break;
    case DType::Q4_0:
      for (size_t b = 0; b < n / 32; ++b) {
        BlockQ4_0 block;
        std::memcpy(&block, r.data + b * sizeof(block), sizeof(block));
        const float d = f16_to_f32(block.d);
        for (size_t j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * static_cast<float>((block.qs[j] & 15) - 8);
          out[b * 32 + j + 16] = d * static_cast<float>((block.qs[j] >> 4) - 8);
        }
      }
      break;
    default:
      ADD_FAILURE() << r.name << ": unexpected dtype " << dtype_name(r.dtype);
  }
  return out;
}

// The Hugging Face -> GGUF tensor names of each golden case README's table (empty: not in GGUF).
std::string gguf_name_for(const std::string& hf) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^model\.embed_tokens\.weight$)"), "token_embd.weight"},
      {std::regex(R"(^model\.norm\.weight$)"), "output_norm.weight"},
      {std::regex(R"(^lm_head\.weight$)"), "output.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.input_layernorm\.weight$)"), "blk.$1.attn_norm.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.self_attn\.q_proj\.(weight|bias)$)"), "blk.$1.attn_q.$2"},
      {std::regex(R"(^model\.layers\.(\d+)\.self_attn\.k_proj\.(weight|bias)$)"), "blk.$1.attn_k.$2"},
      {std::regex(R"(^model\.layers\.(\d+)\.self_attn\.v_proj\.(weight|bias)$)"), "blk.$1.attn_v.$2"},
      {std::regex(R"(^model\.layers\.(\d+)\.self_attn\.o_proj\.weight$)"), "blk.$1.attn_output.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.post_self_attn_layernorm\.weight$)"), "blk.$1.post_attention_norm.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.post_attention_layernorm\.weight$)"), "blk.$1.ffn_norm.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.post_mlp_layernorm\.weight$)"), "blk.$1.post_ffw_norm.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.mlp\.gate_proj\.weight$)"), "blk.$1.ffn_gate.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.mlp\.(up_proj|gate_up_proj)\.weight$)"), "blk.$1.ffn_up.weight"},
      {std::regex(R"(^model\.layers\.(\d+)\.mlp\.down_proj\.weight$)"), "blk.$1.ffn_down.weight"},
      {std::regex(R"(^transformer\.embedding\.word_embeddings\.weight$)"), "token_embd.weight"},
      {std::regex(R"(^transformer\.rotary_pos_emb\.inv_freq$)"), ""},
      {std::regex(R"(^transformer\.encoder\.layers\.(\d+)\.input_layernorm\.weight$)"), "blk.$1.attn_norm.weight"},
      {std::regex(R"(^transformer\.encoder\.layers\.(\d+)\.self_attention\.query_key_value\.(weight|bias)$)"),
       "blk.$1.attn_qkv.$2"},
      {std::regex(R"(^transformer\.encoder\.layers\.(\d+)\.self_attention\.dense\.weight$)"),
       "blk.$1.attn_output.weight"},
      {std::regex(R"(^transformer\.encoder\.layers\.(\d+)\.post_attention_layernorm\.weight$)"),
       "blk.$1.ffn_norm.weight"},
      {std::regex(R"(^transformer\.encoder\.layers\.(\d+)\.mlp\.dense_h_to_4h\.weight$)"), "blk.$1.ffn_up.weight"},
      {std::regex(R"(^transformer\.encoder\.layers\.(\d+)\.mlp\.dense_4h_to_h\.weight$)"), "blk.$1.ffn_down.weight"},
      {std::regex(R"(^transformer\.encoder\.final_layernorm\.weight$)"), "output_norm.weight"},
      {std::regex(R"(^transformer\.output_layer\.weight$)"), "output.weight"},
  };
  for (const auto& [pattern, replacement] : rules) {
    if (std::regex_match(hf, pattern)) return std::regex_replace(hf, pattern, replacement);
  }
  ADD_FAILURE() << "no GGUF name known for " << hf;
  return "?";
}

// Tensor names in file order, straight from a safetensors header.
std::vector<std::string> safetensors_order(const std::string& path) {
  const std::vector<uint8_t> raw = test::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | raw[static_cast<size_t>(i)];
  const ordered_json header = ordered_json::parse(std::string(raw.begin() + 8, raw.begin() + 8 + static_cast<long>(n)));
  std::vector<std::string> names;
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") names.push_back(name);
  }
  return names;
}

std::string golden_case(tiny::Arch arch) {
  return test::golden_dir() + "/text/" + tiny::arch_name(arch);
}

bool is_vocab_tensor(const std::string& name) {
  static const std::set<std::string> names = {
      "model.embed_tokens.weight",       "lm_head.weight",    "transformer.embedding.word_embeddings.weight",
      "transformer.output_layer.weight", "token_embd.weight", "output.weight"};
  return names.count(name) > 0;
}

// The golden case's sizes, read from its config.json, as generator overrides.
void use_golden_sizes(tiny::Options& o) {
  const json c = json::parse(test::read_text(golden_case(o.arch) + "/hf/config.json"));
  if (o.arch == tiny::Arch::ChatGlm) {
    o.layers = c.at("num_layers").get<int64_t>(), o.hidden = c.at("hidden_size").get<int64_t>(),
    o.heads = c.at("num_attention_heads").get<int64_t>();
    o.kv_heads = c.at("multi_query_group_num").get<int64_t>(), o.head_dim = c.at("kv_channels").get<int64_t>(),
    o.ffn = c.at("ffn_hidden_size").get<int64_t>();
    o.max_context = c.at("seq_length").get<int64_t>();
  } else {
    o.layers = c.at("num_hidden_layers").get<int64_t>(), o.hidden = c.at("hidden_size").get<int64_t>(),
    o.heads = c.at("num_attention_heads").get<int64_t>();
    o.kv_heads = c.at("num_key_value_heads").get<int64_t>(), o.head_dim = c.at("head_dim").get<int64_t>(),
    o.ffn = c.at("intermediate_size").get<int64_t>();
    o.max_context = c.at("max_position_embeddings").get<int64_t>();
  }
}

}  // namespace

TEST(TinyModelRandom, SplitMix64MatchesItsReferenceOutputs) {
  // SplitMix64 seeded with 0 (Vigna's reference implementation): the first three outputs.
  EXPECT_EQ(tiny::stream_u64(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(tiny::stream_u64(0, 1), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(tiny::stream_u64(0, 2), 0x06c45d188009454full);
}

TEST(TinyModelRandom, NormalSamplesHaveTheRightMoments) {
  const uint64_t key = tiny::stream_key(3, "moments");
  const int n = 200000;
  double sum = 0, sum2 = 0, sum4 = 0;
  int within_one = 0;
  for (int i = 0; i < n; ++i) {
    const double z = tiny::stream_normal(key, static_cast<uint64_t>(i));
    ASSERT_LE(std::fabs(z), 6.0);
    sum += z, sum2 += z * z, sum4 += z * z * z * z;
    within_one += std::fabs(z) < 1.0;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  EXPECT_NEAR(sum4 / n, 2.9, 0.06);                                 // Irwin-Hall(12): kurtosis 3 - 1.2/12
  EXPECT_NEAR(static_cast<double>(within_one) / n, 0.6827, 0.005);  // a normal's one-sigma mass
  EXPECT_NE(tiny::stream_key(3, "a"), tiny::stream_key(3, "b"));
  EXPECT_NE(tiny::stream_key(3, "a"), tiny::stream_key(4, "a"));
}

TEST(TinyModel, SameSeedGivesIdenticalFilesAndAnotherSeedDoesNot) {
  for (DType dtype : {DType::F32, DType::Q8_0}) {
    test::TempDir a("same_a"), b("same_b"), c("other");
    tiny::Options oa = options(tiny::Arch::Llama, a.str(), "both", dtype, 5);
    oa.threads = 1;
    tiny::Options ob = options(tiny::Arch::Llama, b.str(), "both", dtype, 5);
    ob.threads = 3;  // the thread count must not matter
    const tiny::Result ra = tiny::write_tiny_model(oa);
    tiny::write_tiny_model(ob);
    tiny::write_tiny_model(options(tiny::Arch::Llama, c.str(), "both", dtype, 6));
    ASSERT_EQ(ra.files.size(), 6u);
    for (const std::string& f : ra.files) {
      const std::vector<uint8_t> fa = test::read_file(a.file(f));
      ASSERT_FALSE(fa.empty()) << f;
      EXPECT_TRUE(fa == test::read_file(b.file(f))) << f << " differs between two runs with seed 5";
      const bool weights = f == "model.safetensors" || f == "model.gguf";
      EXPECT_EQ(fa == test::read_file(c.file(f)), !weights) << f;
    }
  }
}

TEST(TinyModel, FilesDoNotDependOnTheKernelsSimdLevel) {
  // What differs between machines is the SIMD level the kernels pick; the files must not.
  const std::string original = kernels::simd_level();
  std::vector<std::vector<uint8_t>> outputs;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : {DType::BF16, DType::Q4_0, DType::Q8_0}) {
      test::TempDir dir("simd");
      tiny::write_tiny_model(options(tiny::Arch::Glm4, dir.str(), dtype == DType::BF16 ? "hf" : "both", dtype));
      if (dtype != DType::BF16) outputs.push_back(test::read_file(dir.file("model.gguf")));
      outputs.push_back(test::read_file(dir.file("model.safetensors")));
    }
  }
  kernels::set_simd_level(original);
  const size_t per_level = 5;
  ASSERT_EQ(outputs.size() % per_level, 0u);
  for (size_t i = per_level; i < outputs.size(); ++i) EXPECT_TRUE(outputs[i] == outputs[i % per_level]) << i;
}

class TinyModelArch : public ::testing::TestWithParam<tiny::Arch> {};

TEST_P(TinyModelArch, HasTheGoldenTensorNamesShapesAndMetadata) {
  const tiny::Arch arch = GetParam();
  test::TempDir dir("layout");
  tiny::Options o = options(arch, dir.str(), "both", DType::F32);
  use_golden_sizes(o);
  const tiny::Result r = tiny::write_tiny_model(o);
  const int64_t vocab = r.hyper.vocab;
  const std::string golden = golden_case(arch);

  // Safetensors: the same names in the same order; the same shapes but for the vocabulary rows.
  const std::vector<std::string> names = safetensors_order(dir.file("model.safetensors"));
  EXPECT_EQ(names, safetensors_order(golden + "/hf/model.safetensors"));
  const TensorSet ours = open_safetensors(dir.str());
  const TensorSet theirs = open_safetensors(golden + "/hf/model.safetensors");
  ASSERT_EQ(ours.all().size(), theirs.all().size());
  for (const TensorRecord& t : theirs.all()) {
    const TensorRecord* mine = ours.find(t.name);
    ASSERT_NE(mine, nullptr) << t.name;
    Shape expected = t.shape;
    if (is_vocab_tensor(t.name)) expected[0] = vocab;
    EXPECT_EQ(mine->shape, expected) << t.name;
    EXPECT_EQ(mine->dtype, DType::F32) << t.name;
  }

  // GGUF: the same tensors in the same order, and every <arch>.* key with the golden's type and value.
  const GgufFile g = GgufFile::open(dir.file("model.gguf"));
  const GgufFile gold = GgufFile::open(golden + "/model.gguf");
  ASSERT_EQ(g.tensors().all().size(), gold.tensors().all().size());
  for (size_t i = 0; i < g.tensors().all().size(); ++i) {
    const TensorRecord& mine = g.tensors().all()[i];
    const TensorRecord& t = gold.tensors().all()[i];
    EXPECT_EQ(mine.name, t.name);
    Shape expected = t.shape;
    if (is_vocab_tensor(t.name)) expected[0] = vocab;
    EXPECT_EQ(mine.shape, expected) << t.name;
    EXPECT_EQ(g.ggml_types()[i], gold.ggml_types()[i]) << t.name;
  }
  const std::string a = gold.get_string("general.architecture");
  EXPECT_EQ(g.get_string("general.architecture"), a);
  std::set<std::string> arch_keys_ours, arch_keys_golden;
  for (const std::string& k : g.keys()) {
    if (k.rfind(a + ".", 0) == 0) arch_keys_ours.insert(k);
  }
  for (const std::string& k : gold.keys()) {
    if (k.rfind(a + ".", 0) != 0 && k != "general.file_type") continue;
    arch_keys_golden.insert(k);
    const GgufValue* mine = g.find(k);
    ASSERT_NE(mine, nullptr) << k;
    EXPECT_EQ(mine->type, gold.find(k)->type) << k;
    if (k == a + ".vocab_size") {
      EXPECT_EQ(g.get_u32(k), static_cast<uint32_t>(vocab));
    } else if (mine->type == GgufType::F32) {
      EXPECT_EQ(g.get_f32(k), gold.get_f32(k)) << k;
    } else {
      EXPECT_EQ(g.get_int(k), gold.get_int(k)) << k;
    }
  }
  arch_keys_golden.erase("general.file_type");
  EXPECT_EQ(arch_keys_ours, arch_keys_golden);

  // config.json: the golden's fields; only the vocabulary size and token ids may differ.
  const json cfg = json::parse(test::read_text(dir.file("config.json")));
  const json gold_cfg = json::parse(test::read_text(golden + "/hf/config.json"));
  std::set<std::string> ours_keys, golden_keys;
  for (const auto& [k, v] : cfg.items()) ours_keys.insert(k);
  for (const auto& [k, v] : gold_cfg.items()) golden_keys.insert(k);
  EXPECT_EQ(ours_keys, golden_keys);
  static const std::set<std::string> may_differ = {"vocab_size",   "padded_vocab_size", "bos_token_id",
                                                   "eos_token_id", "pad_token_id",      "_name_or_path"};
  for (const auto& [k, v] : gold_cfg.items()) {
    if (may_differ.count(k) || !cfg.contains(k)) continue;
    EXPECT_EQ(cfg[k], v) << k;
  }
  EXPECT_EQ(cfg.contains("padded_vocab_size") ? cfg["padded_vocab_size"] : cfg["vocab_size"], vocab);
}

TEST_P(TinyModelArch, HuggingFaceAndGgufHoldTheSameModel) {
  const tiny::Arch arch = GetParam();
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    test::TempDir dir("same_model");
    const tiny::Result r = tiny::write_tiny_model(options(arch, dir.str(), "both", dtype));
    const TensorSet hf = open_safetensors(dir.str());
    const GgufFile g = GgufFile::open(dir.file("model.gguf"));
    const bool quantized = dtype_traits(dtype).is_quantized;
    const json cfg = json::parse(test::read_text(dir.file("config.json")));
    EXPECT_EQ(cfg["torch_dtype"], quantized || dtype == DType::F32 ? "float32"
                                  : dtype == DType::F16            ? "float16"
                                                                   : "bfloat16");

    size_t matched = 0;
    for (const TensorRecord& h : hf.all()) {
      EXPECT_EQ(h.dtype, quantized ? DType::F32 : dtype) << h.name;
      const std::string gname = gguf_name_for(h.name);
      if (gname.empty()) continue;
      const TensorRecord* t = g.tensors().find(gname);
      ASSERT_NE(t, nullptr) << gname << " (for " << h.name << ") is missing from model.gguf";
      ++matched;
      EXPECT_EQ(t->shape, h.shape) << gname;
      EXPECT_EQ(t->dtype, h.shape.rank == 2 ? dtype : DType::F32) << gname << ": 1-D tensors stay f32";
      const std::vector<float> hv = decode(h), gv = decode(*t);
      const bool permuted = arch == tiny::Arch::Llama &&
                            (gname.find("attn_q.") != std::string::npos || gname.find("attn_k.") != std::string::npos);
      if (!permuted) {
        EXPECT_TRUE(std::memcmp(hv.data(), gv.data(), hv.size() * 4) == 0) << gname << " differs from " << h.name;
        continue;
      }
      // GGUF row h*hd + 2i + j == HF row h*hd + j*hd/2 + i (the llama golden README).
      const int64_t hd = r.hyper.head_dim, cols = h.shape[1], heads = h.shape[0] / hd;
      for (int64_t head = 0; head < heads; ++head) {
        for (int64_t i = 0; i < hd / 2; ++i) {
          for (int64_t j = 0; j < 2; ++j) {
            const float* grow = gv.data() + (head * hd + 2 * i + j) * cols;
            const float* hrow = hv.data() + (head * hd + j * hd / 2 + i) * cols;
            ASSERT_EQ(std::memcmp(grow, hrow, static_cast<size_t>(cols) * 4), 0)
                << gname << " head " << head << " pair " << i << " member " << j;
          }
        }
      }
      // ... and the permutation really moves rows (it is not the identity).
      EXPECT_NE(std::memcmp(gv.data() + cols, hv.data() + cols, static_cast<size_t>(cols) * 4), 0);
    }
    EXPECT_EQ(matched, g.tensors().all().size()) << "model.gguf holds tensors the Hugging Face copy does not";
    EXPECT_EQ(g.get_u32("general.file_type"), dtype == DType::F32    ? 0u
                                              : dtype == DType::F16  ? 1u
                                              : dtype == DType::Q4_0 ? 2u
                                              : dtype == DType::Q8_0 ? 7u
                                                                     : 32u);
    if (arch == tiny::Arch::Qwen2) {  // tied embeddings: no separate output matrix anywhere
      EXPECT_EQ(hf.find("lm_head.weight"), nullptr);
      EXPECT_EQ(g.tensors().find("output.weight"), nullptr);
      EXPECT_EQ(cfg["tie_word_embeddings"], true);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, TinyModelArch, ::testing::ValuesIn(kArchs),
                         [](const auto& param_info) { return tiny::arch_name(param_info.param); });

TEST(TinyModel, QuantizedGgufIsWithinAQuantizationStepOfTheF32Model) {
  test::TempDir f32_dir("f32"), q8_dir("q8"), q4_dir("q4");
  tiny::write_tiny_model(options(tiny::Arch::Qwen2, f32_dir.str(), "hf", DType::F32, 11));
  tiny::write_tiny_model(options(tiny::Arch::Qwen2, q8_dir.str(), "gguf", DType::Q8_0, 11));
  tiny::write_tiny_model(options(tiny::Arch::Qwen2, q4_dir.str(), "gguf", DType::Q4_0, 11));
  const TensorSet source = open_safetensors(f32_dir.str());
  const GgufFile q8 = GgufFile::open(q8_dir.file("model.gguf"));
  const GgufFile q4 = GgufFile::open(q4_dir.file("model.gguf"));
  int quantized_tensors = 0;
  for (const TensorRecord& s : source.all()) {
    const std::string gname = gguf_name_for(s.name);
    const std::vector<float> x = decode(s);
    const std::vector<float> y8 = decode(*q8.tensors().find(gname));
    const std::vector<float> y4 = decode(*q4.tensors().find(gname));
    if (s.shape.rank == 1) {  // norms and biases are not quantized
      EXPECT_EQ(x, y8) << s.name;
      EXPECT_EQ(x, y4) << s.name;
      continue;
    }
    ++quantized_tensors;
    double max_err8 = 0;
    for (size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      // Q8_0 step d = amax/127: rounding costs d/2, storing d in fp16 up to 127 * d * 2^-11 more.
      const double step8 = amax / 127.0, tol8 = step8 * (0.5 + 127.0 / 2048.0) + 1e-7;
      // Q4_0 step d = amax/8: the value opposite the block's extreme can clamp (one step), plus fp16 d.
      const double step4 = amax / 8.0, tol4 = step4 * (1.0 + 8.0 / 2048.0) + 1e-7;
      for (size_t j = 0; j < 32; ++j) {
        const double e8 = std::fabs(static_cast<double>(x[b * 32 + j]) - y8[b * 32 + j]);
        const double e4 = std::fabs(static_cast<double>(x[b * 32 + j]) - y4[b * 32 + j]);
        ASSERT_LE(e8, tol8) << s.name << " element " << b * 32 + j;
        ASSERT_LE(e4, tol4) << s.name << " element " << b * 32 + j;
        max_err8 = std::max(max_err8, e8);
      }
    }
    EXPECT_GT(max_err8, 0.0) << s.name << " was not quantized at all";
  }
  EXPECT_EQ(quantized_tensors, 1 + 2 * 7);  // embedding + 7 matrices per layer (tied: no output)
}

TEST(TinyModel, TokenizerFilesAgreeWithEachOtherAndWithGpt2ByteOrder) {
  test::TempDir dir("tokenizer");
  const tiny::Result r = tiny::write_tiny_model(options(tiny::Arch::Glm4, dir.str(), "both", DType::F32));
  const json tj = json::parse(test::read_text(dir.file("tokenizer.json")));
  ASSERT_EQ(tj["model"]["type"], "BPE");
  EXPECT_EQ(tj["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(tj["pre_tokenizer"]["add_prefix_space"], false);
  EXPECT_EQ(tj["decoder"]["type"], "ByteLevel");
  const json& vocab = tj["model"]["vocab"];
  const json& merges = tj["model"]["merges"];
  ASSERT_EQ(merges.size(), 250u);
  ASSERT_EQ(vocab.size(), 256u + merges.size());
  ASSERT_EQ(tj["added_tokens"].size(), 4u);

  // id -> token over vocab and added tokens: every id from 0 to 509 exactly once.
  std::vector<std::string> by_id(vocab.size() + 4);
  for (const auto& [token, id] : vocab.items()) {
    ASSERT_LT(id.get<size_t>(), by_id.size());
    ASSERT_TRUE(by_id[id.get<size_t>()].empty()) << "id " << id << " used twice";
    by_id[id.get<size_t>()] = token;
  }
  std::map<std::string, int> special;
  for (const json& t : tj["added_tokens"]) {
    EXPECT_EQ(t["special"], true);
    ASSERT_TRUE(by_id[t["id"].get<size_t>()].empty());
    by_id[t["id"].get<size_t>()] = t["content"];
    special[t["content"]] = t["id"];
  }
  for (size_t id = 0; id < by_id.size(); ++id) ASSERT_FALSE(by_id[id].empty()) << "id " << id << " unused";
  EXPECT_EQ(special.at("<|endoftext|>"), 506);
  ASSERT_EQ(special.size(), 4u);

  // GPT-2's vocabulary starts with the same 256 byte tokens: "!" = 0, "Ċ" (newline) = 198, "Ġ" (space) = 220.
  EXPECT_EQ(vocab.at("!"), 0);
  EXPECT_EQ(vocab.at("Ā"), 188);
  EXPECT_EQ(vocab.at("Ċ"), 198);
  EXPECT_EQ(vocab.at("Ġ"), 220);
  // Every merge joins two earlier tokens into the next id.
  for (size_t k = 0; k < merges.size(); ++k) {
    const std::string m = merges[k];
    const size_t space = m.find(' ');
    ASSERT_NE(space, std::string::npos) << m;
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    ASSERT_TRUE(vocab.contains(left) && vocab.contains(right)) << m;
    EXPECT_LT(vocab.at(left).get<size_t>(), 256 + k) << m;
    EXPECT_LT(vocab.at(right).get<size_t>(), 256 + k) << m;
    EXPECT_EQ(vocab.at(left + right), 256 + k) << m;
  }
  EXPECT_TRUE(vocab.contains("Ġthe"));
  EXPECT_TRUE(vocab.contains("Ġferry"));

  const json tc = json::parse(test::read_text(dir.file("tokenizer_config.json")));
  EXPECT_EQ(tc["bos_token"], "<|endoftext|>");
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");
  EXPECT_EQ(tc["add_bos_token"], false);
  EXPECT_EQ(tc["chat_template"], tiny::kChatTemplate);
  const json gen = json::parse(test::read_text(dir.file("generation_config.json")));
  EXPECT_EQ(gen["eos_token_id"],
            json::array({special["<|endoftext|>"], special["<|user|>"], special["<|observation|>"]}));
  EXPECT_EQ(gen["bos_token_id"], special["<|endoftext|>"]);
  EXPECT_EQ(gen["pad_token_id"], special["<|endoftext|>"]);

  // The GGUF vocabulary: the same tokens in id order, then unused pads up to the embedding rows.
  const GgufFile g = GgufFile::open(dir.file("model.gguf"));
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "default");
  const std::vector<std::string> tokens = g.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int32_t> types = g.get_i32_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 512u);
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), r.hyper.vocab);
  EXPECT_EQ(g.tensors().find("token_embd.weight")->shape[0], 512);
  ASSERT_EQ(types.size(), tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (id < by_id.size()) {
      EXPECT_EQ(tokens[id], by_id[id]) << id;
      EXPECT_EQ(types[id], id >= 506 ? 3 : 1) << id;
    } else {
      EXPECT_EQ(tokens[id], "<|pad_" + std::to_string(id - by_id.size()) + "|>");
      EXPECT_EQ(types[id], 5) << id;
    }
  }
  std::vector<std::string> merge_strings;
  for (const json& m : merges) merge_strings.push_back(m);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges"), merge_strings);
  EXPECT_EQ(g.get_u32("tokenizer.ggml.bos_token_id"), 506u);
  EXPECT_EQ(g.get_u32("tokenizer.ggml.eos_token_id"), 506u);
  EXPECT_EQ(g.get_u32("tokenizer.ggml.eot_token_id"), static_cast<uint32_t>(special["<|user|>"]));
  EXPECT_EQ(g.get_string("tokenizer.chat_template"), tiny::kChatTemplate);
}

// Byte-level BPE by merge rank, written from the GPT-2 algorithm: the reference for the next test.
std::vector<int32_t> reference_bpe(const std::string& text, const tiny::Tokenizer& tok) {
  std::map<std::string, int32_t> id_of;
  for (size_t i = 0; i < tok.tokens.size(); ++i) id_of[tok.tokens[i]] = static_cast<int32_t>(i);
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < tok.merges.size(); ++i) rank[tok.merges[i]] = i;
  std::map<uint8_t, std::string> byte_piece;
  for (const auto& [byte, cp] : tiny::gpt2_byte_order()) byte_piece[byte] = tiny::utf8_encode(cp);
  std::vector<int32_t> ids;
  for (const std::string& word : tiny::pretokenize_ascii(text)) {
    std::vector<std::string> parts;
    for (char c : word) parts.push_back(byte_piece[static_cast<uint8_t>(c)]);
    while (parts.size() > 1) {
      size_t best = parts.size();
      size_t best_rank = SIZE_MAX;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const auto it = rank.find(parts[i] + " " + parts[i + 1]);
        if (it != rank.end() && it->second < best_rank) best = i, best_rank = it->second;
      }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<long>(best) + 1);
    }
    for (const std::string& p : parts) ids.push_back(id_of.at(p));
  }
  return ids;
}

TEST(TinyModelTokenizer, FilesLoadInFerrysTokenizerAndEncodeLikeAReferenceBpe) {
  test::TempDir dir("tok_load");
  tiny::write_tiny_model(options(tiny::Arch::ChatGlm, dir.str(), "both", DType::F32));
  const tiny::Tokenizer& tok = tiny::default_tokenizer();
  const Tokenizer from_json = Tokenizer::from_vocab(vocab_from_tokenizer_json(dir.file("tokenizer.json")));
  const Tokenizer from_gguf = Tokenizer::from_vocab(vocab_from_gguf(GgufFile::open(dir.file("model.gguf"))));
  const std::string text = std::string(tiny::kTrainingText) + " Unseen words: xylophone, 1234567.";
  const std::vector<int32_t> expected = reference_bpe(text, tok);
  EXPECT_LT(expected.size() * 2, text.size());  // the merges compress their own text: 2.8 bytes a token
  EXPECT_EQ(from_json.encode(text, false), expected);
  EXPECT_EQ(from_gguf.encode(text, false), expected);
  EXPECT_EQ(from_json.decode(expected), text);
  for (const Tokenizer* t : {&from_json, &from_gguf}) {
    EXPECT_TRUE(t->vocab().is_eog(tok.endoftext));
    EXPECT_TRUE(t->vocab().is_eog(tok.user));
    EXPECT_TRUE(t->vocab().is_eog(tok.observation));
    EXPECT_FALSE(t->vocab().is_eog(tok.assistant));
    EXPECT_EQ(t->vocab().chat_template, tiny::kChatTemplate);
    std::vector<int32_t> turn = {tok.user};
    for (int32_t id : reference_bpe("\nhi", tok)) turn.push_back(id);
    turn.push_back(tok.assistant);
    EXPECT_EQ(t->encode("<|user|>\nhi<|assistant|>", false), turn);
  }
}

TEST(TinyModelTokenizer, LearnsTheMostFrequentPairFirstAndBreaksTiesLexically) {
  // Words "ab", " ab" x2, " cd": (a,b) x3 first, then (Ġ,ab) x2, then the tie (Ġ,c) vs (c,d) at one each
  // goes to "c d" because "c" < "Ġ".
  const tiny::Tokenizer t = tiny::train_tokenizer("ab ab ab cd", 3);
  EXPECT_EQ(t.merges, (std::vector<std::string>{"a b", "Ġ ab", "c d"}));
  EXPECT_EQ(t.size(), 256 + 3 + 4);
  EXPECT_EQ(t.tokens[256], "ab");
  EXPECT_EQ(t.tokens[257], "Ġab");
  EXPECT_EQ(t.tokens[t.endoftext], "<|endoftext|>");
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{t.endoftext, t.user, t.observation}));
}

TEST(TinyModelTokenizer, PreTokenizesLikeGpt2) {
  // Expected values: Python's re.findall with GPT-2's pattern (ASCII classes) on the same strings.
  EXPECT_EQ(tiny::pretokenize_ascii("Hello world's  test 42!\n\nok"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " test", " 42", "!", "\n", "\n", "ok"}));
  EXPECT_EQ(tiny::pretokenize_ascii("x \n\n  y"), (std::vector<std::string>{"x", " \n\n ", " y"}));
  EXPECT_EQ(tiny::pretokenize_ascii("a  \n b"), (std::vector<std::string>{"a", "  \n", " b"}));
  EXPECT_EQ(tiny::pretokenize_ascii("end  "), (std::vector<std::string>{"end", "  "}));
}

TEST(TinyModel, ShardedSafetensorsHoldTheSameTensors) {
  test::TempDir one("one"), three("three");
  tiny::write_tiny_model(options(tiny::Arch::Glm, one.str(), "hf", DType::BF16));
  tiny::Options o = options(tiny::Arch::Glm, three.str(), "hf", DType::BF16);
  o.shards = 3;
  const tiny::Result r = tiny::write_tiny_model(o);
  EXPECT_TRUE(fs::exists(three.file("model.safetensors.index.json")));
  EXPECT_TRUE(fs::exists(three.file("model-00003-of-00003.safetensors")));
  EXPECT_FALSE(fs::exists(three.file("model.safetensors")));
  EXPECT_NE(std::find(r.files.begin(), r.files.end(), "model.safetensors.index.json"), r.files.end());
  const TensorSet a = open_safetensors(one.str()), b = open_safetensors(three.str());
  ASSERT_EQ(a.all().size(), b.all().size());
  for (const TensorRecord& t : a.all()) {
    const TensorRecord* u = b.find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(u->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0) << t.name;
  }
}

TEST(TinyModel, ChatGlmCarriesTheRotaryBufferOfTheOriginalCode) {
  test::TempDir dir("chatglm");
  tiny::write_tiny_model(options(tiny::Arch::ChatGlm, dir.str(), "hf", DType::F32));
  const TensorSet hf = open_safetensors(dir.str());
  const TensorRecord* inv = hf.find("transformer.rotary_pos_emb.inv_freq");
  ASSERT_NE(inv, nullptr);
  ASSERT_EQ(inv->shape, (Shape{4}));  // kv_channels / 4
  // The golden chatglm checkpoints hold 1 / 10000^(2i/8) = 1, 0.1, 0.01, 0.001 (rope_ratio ignored).
  const TensorSet golden = open_safetensors(golden_case(tiny::Arch::ChatGlm) + "/hf/model.safetensors");
  EXPECT_EQ(decode(*inv), decode(*golden.find("transformer.rotary_pos_emb.inv_freq")));
}

TEST(TinyModel, PresetsHaveTheirAdvertisedSizes) {
  const tiny::Tokenizer& tok = tiny::default_tokenizer();
  tiny::Options o;
  o.preset = "bench300m";
  const tiny::Hyper bench = tiny::resolve_hyper(o, tok);
  const int64_t params = tiny::parameter_count(tiny::tensor_specs(tiny::Arch::Llama, bench));
  EXPECT_GT(params, 280'000'000);
  EXPECT_LT(params, 320'000'000);
  EXPECT_EQ(bench.vocab, 32000);
  o.preset = "demo";
  const tiny::Hyper demo = tiny::resolve_hyper(o, tok);
  EXPECT_EQ(demo.layers, 4);
  EXPECT_EQ(demo.hidden, 256);
  EXPECT_EQ(demo.vocab, 512);
  o.preset = "tiny";
  o.arch = tiny::Arch::Glm4;
  const tiny::Hyper glm4 = tiny::resolve_hyper(o, tok);
  EXPECT_NE(glm4.head_dim * glm4.heads, glm4.hidden);  // GLM-4-0414's wide heads are exercised
  EXPECT_LT(glm4.kv_heads, glm4.heads);                // and grouped-query attention everywhere
}

TEST(TinyModel, RefusesBadOptionsWithUsageErrors) {
  test::TempDir dir("bad");
  auto message = [&](const tiny::Options& o) -> std::string {
    try {
      tiny::write_tiny_model(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return {};
  };
  const std::string path = dir.str();
  EXPECT_NE(message(options(tiny::Arch::Llama, path, "hf", DType::Q8_0)).find("--format gguf"), std::string::npos);
  tiny::Options o = options(tiny::Arch::Llama, path, "gguf", DType::Q4_0);
  o.ffn = 100;
  EXPECT_NE(message(o).find("down_proj"), std::string::npos);
  o = options(tiny::Arch::Llama, path, "hf", DType::F32);
  o.kv_heads = 3;
  EXPECT_NE(message(o).find("--kv-heads 3"), std::string::npos);
  o = options(tiny::Arch::Llama, path, "hf", DType::F32);
  o.vocab = 300;
  EXPECT_NE(message(o).find("--vocab 300"), std::string::npos);
  o = options(tiny::Arch::Glm, path, "hf", DType::F32);
  o.head_dim = 18;
  EXPECT_NE(message(o).find("--head-dim 18"), std::string::npos);
  o = options(tiny::Arch::Llama, path, "hf", DType::F32);
  o.shards = 1000;
  EXPECT_NE(message(o).find("--shards"), std::string::npos);
  o = options(tiny::Arch::Llama, path, "gif", DType::F32);
  EXPECT_NE(message(o).find("gif"), std::string::npos);
  o = options(tiny::Arch::Llama, path, "hf", DType::F32);
  o.preset = "huge";
  EXPECT_NE(message(o).find("huge"), std::string::npos);
  EXPECT_THROW(tiny::parse_arch("gpt2"), Error);
  try {  // a directory that cannot be created is an I/O error naming it
    tiny::write_tiny_model(options(tiny::Arch::Llama, "/proc/ferry-no-such/x", "hf", DType::F32));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("/proc/ferry-no-such/x"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(path));  // nothing was written for a refused request
}

TEST(TinyModel, CommandLineToolWritesAModelAndFailsCleanlyOnBadArguments) {
  const std::string tool = FERRY_BINARY_DIR "/make_tiny_model";
  if (!fs::exists(tool)) GTEST_SKIP() << tool << " is not built (ninja make_tiny_model)";
  test::TempDir dir("cli");
  const std::string ok =
      tool + " --arch chatglm --format both --dtype q8_0 --seed 3 --out " + dir.str() + " >/dev/null";
  ASSERT_EQ(std::system(ok.c_str()), 0);
  EXPECT_TRUE(fs::exists(dir.file("model.gguf")));
  EXPECT_TRUE(fs::exists(dir.file("tokenizer.json")));
  const std::string bad =
      tool + " --arch llama --format hf --dtype q8_0 --out " + dir.file("x") + " 2>" + dir.file("err");
  const int status = std::system(bad.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(test::read_text(dir.file("err")).find("q8_0"), std::string::npos);
}
