// sentencepiece tokenizer.model files: a small Llama-2-style BPE model trained here with the
// sentencepiece trainer, loaded by ferry through libsentencepiece and compared with the library's
// own encoding; and ferry's own sentencepiece BPE (llama.cpp's algorithm, which GGUF "llama"
// vocabularies use) on the same vocabulary against the library.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <random>

#include "core/error.h"
#include "text/sentencepiece_model.h"
#include "text/tokenizer.h"
#include "text/tokenizer_loader.h"
#include "text_test_util.h"

using namespace ferry;

namespace {

using Ids = std::vector<int32_t>;

// Training text: English-like words, digits, some accents and CJK, so merges form across them.
std::string training_text() {
  std::mt19937 rng(5);
  const std::vector<std::string> words = {"the", "ferry", "crossed", "river", "at",    "dawn",  "and",   "again",
                                          "in",  "the",   "evening", "café",  "naïve", "中文",  "字",    "2024",
                                          "42",  "boat",  "water",   "bank",  "north", "south", "there", "theirs"};
  std::string text;
  for (int line = 0; line < 400; ++line) {
    for (int w = 0; w < 12; ++w) text += (w ? " " : "") + words[rng() % words.size()];
    text += ".\n";
  }
  return text;
}

// A BPE model with Llama 2's settings: byte fallback, dummy prefix, no normalization, spaces kept.
struct TrainedModel {
  test::TempDir dir{"spm_model"};
  std::string path;
  TrainedModel() {
    const std::string input = dir.write_text("train.txt", training_text());
    const std::string prefix = dir.file("tokenizer");
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + input + " --model_prefix=" + prefix +
        " --vocab_size=400 --model_type=bpe --byte_fallback=true --character_coverage=1.0"
        " --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=true"
        " --split_digits=true --minloglevel=2");
    if (!status.ok()) throw std::runtime_error("training a sentencepiece model failed: " + status.ToString());
    path = prefix + ".model";
  }
};

const TrainedModel& model() {
  static const TrainedModel m;
  return m;
}

Ids library_ids(const sentencepiece::SentencePieceProcessor& sp, const std::string& text) {
  std::vector<int> ids;
  EXPECT_TRUE(sp.Encode(text, &ids).ok());
  return Ids(ids.begin(), ids.end());
}

std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> pieces = {"the",    " ferry", "river", " ",  "  ",      "café",
                                                  "ü",      "中文",   "😀",     "\n", "2024",    "x",
                                                  "theirs", "naïve",  "ß",     "\t", "at dawn", "Ω"};
  std::string text;
  for (int i = 0, n = static_cast<int>(rng() % 10); i < n; ++i) text += pieces[rng() % pieces.size()];
  return text;
}

}  // namespace

TEST(SentencepieceModel, LoadsThroughTheLibraryAndEncodesAsItDoes) {
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model().path).ok());
  const Tokenizer tok = load_tokenizer(model().path);
  EXPECT_EQ(tok.n_vocab(), sp.GetPieceSize());
  EXPECT_EQ(tok.vocab().bos, sp.bos_id());
  EXPECT_EQ(tok.vocab().eos, sp.eos_id());
  EXPECT_TRUE(tok.vocab().add_space_prefix);
  std::mt19937 rng(1);
  for (int i = 0; i < 300; ++i) {
    const std::string text = random_text(rng);
    const Ids ids = tok.encode(text, false);
    ASSERT_EQ(ids, library_ids(sp, text)) << text;
    Ids with_bos = {sp.bos_id()};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    EXPECT_EQ(tok.encode(text, true), with_bos);  // Llama's tokenizer adds bos
    std::string decoded;
    ASSERT_TRUE(sp.Decode(std::vector<int>(ids.begin(), ids.end()), &decoded).ok());
    EXPECT_EQ(tok.decode(ids), decoded) << text;
  }
  // Control tokens written in the text are parsed; each text run after one gets the dummy prefix,
  // as Hugging Face's Llama tokenizer does.
  Ids expected = {sp.bos_id()};
  for (int id : library_ids(sp, "the ferry")) expected.push_back(id);
  expected.push_back(sp.eos_id());
  EXPECT_EQ(tok.encode("<s>the ferry</s>", false), expected);
}

TEST(SentencepieceModel, FerrysOwnBpeMatchesTheLibrary) {
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model().path).ok());
  // The vocabulary alone (pieces, scores, types) run by ferry's score-ordered BPE, as for a GGUF
  // "llama" vocabulary converted from this model.
  const Tokenizer own = Tokenizer::from_vocab(load_tokenizer(model().path).vocab());
  std::mt19937 rng(2);
  for (int i = 0; i < 300; ++i) {
    const std::string text = random_text(rng);
    ASSERT_EQ(own.encode(text, false), library_ids(sp, text)) << text;
  }
  for (const std::string text :
       {"the ferry crossed the river at dawn", "  two spaces", "😀 emoji falls back to bytes"}) {
    EXPECT_EQ(own.encode(text, false), library_ids(sp, text)) << text;
  }
}

TEST(SentencepieceModel, AddedTokensFromTheConfigBeside) {
  test::TempDir dir("spm_config");
  std::filesystem::copy_file(model().path, dir.file("tokenizer.model"));
  dir.write_text("tokenizer_config.json", R"({"add_bos_token": false, "added_tokens_decoder": {
      "400": {"content": "[gMASK]", "special": true}, "401": {"content": "<|user|>", "special": true}}})");
  const Tokenizer tok = load_tokenizer(dir.str());
  EXPECT_EQ(tok.n_vocab(), 402);
  const Ids ids = tok.encode("[gMASK]<|user|>", true);
  EXPECT_EQ(ids, (Ids{400, 401}));  // add_bos_token false
}

TEST(SentencepieceModel, UnreadableFilesGetClearErrors) {
  test::TempDir dir("spm_bad");
  const std::string path = dir.write_text("tokenizer.model", std::string("\x0A\x05hello", 7));
  try {
    load_sentencepiece_tokenizer(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.model"), std::string::npos) << e.what();
  }
  try {
    load_tokenizer(dir.write_text("other.bin", "\x01\x02\x03"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a tokenizer ferry reads"), std::string::npos) << e.what();
  }
}
