// Reading vocabularies from GGUF metadata and from Hugging Face tokenizer.json files, and the
// errors for files ferry cannot use.
#include <gtest/gtest.h>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "text/tokenizer.h"
#include "text_test_util.h"

using namespace ferry;

namespace {

using Ids = std::vector<int32_t>;

// Expects `fn` to throw a ferry::Error of `kind` whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, ErrorKind kind, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (std::string_view part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// A small byte-level (gpt2) tokenizer in GGUF form: the 256 byte characters, one merge, and
// chat tokens.
GgufWriter gpt2_gguf() {
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));  // replaced below
  // Byte-level characters for the bytes used here: printable ASCII maps to itself.
  for (int b = 0x21; b <= 0x7E; ++b) tokens[b] = std::string(1, static_cast<char>(b));
  tokens[' '] = "\xC4\xA0";
  for (int b = 0; b < 256; ++b) {
    if (tokens[b].size() == 1 && (b < 0x21 || b > 0x7E)) tokens[b] = "\xC4\x80" + std::to_string(b);  // unused
  }
  tokens.push_back("hi");             // 256
  tokens.push_back("<|endoftext|>");  // 257
  tokens.push_back("<|im_start|>");   // 258
  tokens.push_back("<|im_end|>");     // 259
  std::vector<int32_t> types(tokens.size(), 1);
  types[257] = types[258] = types[259] = 3;
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {"h i"});
  w.set_u32("tokenizer.ggml.eos_token_id", 257);
  w.set_u32("tokenizer.ggml.padding_token_id", 257);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
  return w;
}

Vocab load_gguf(const GgufWriter& w, const test::TempDir& dir) {
  const std::string path = dir.file("vocab.gguf");
  w.write(path);
  return vocab_from_gguf(GgufFile::open(path));
}

}  // namespace

TEST(VocabFromGguf, ReadsAByteLevelVocabulary) {
  test::TempDir dir("gguf_gpt2");
  const Vocab v = load_gguf(gpt2_gguf(), dir);
  EXPECT_EQ(v.kind, Vocab::Kind::Bpe);
  EXPECT_EQ(v.size(), 260);
  ASSERT_EQ(v.merges.size(), 1u);
  EXPECT_EQ(v.merges[0], (std::pair<std::string, std::string>{"h", "i"}));
  EXPECT_EQ(v.eos, 257);
  EXPECT_EQ(v.pad, 257);
  EXPECT_EQ(v.bos, -1);
  EXPECT_FALSE(v.add_bos);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_EQ(v.pre, "qwen2");
  EXPECT_FALSE(v.chat_template.empty());
  // eos plus <|im_end|> found by its text.
  EXPECT_EQ(v.eog_ids, (Ids{257, 259}));
  EXPECT_EQ(v.scores.size(), 260u);  // absent scores are zeros

  const Tokenizer tok = Tokenizer::from_vocab(v);
  // "hi" -> h i -> hi; " hi" -> Ġ h i -> Ġ hi (there is no "Ġ hi" merge).
  EXPECT_EQ(tok.encode("<|im_start|>hi hi<|im_end|>", false), (Ids{258, 256, ' ', 256, 259}));
  EXPECT_EQ(tok.decode({258, 256, ' ', 256, 259}), "hi hi");
}

TEST(VocabFromGguf, GlmTurnTokensEndGeneration) {
  test::TempDir dir("gguf_glm");
  GgufWriter w = gpt2_gguf();
  std::vector<std::string> tokens;
  {
    const Vocab base = load_gguf(w, dir);
    tokens = base.tokens;
  }
  tokens.push_back("<|user|>");         // 260
  tokens.push_back("<|observation|>");  // 261
  std::vector<int32_t> types(tokens.size(), 1);
  for (int id : {257, 258, 259, 260, 261}) types[id] = 3;
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.eot_token_id", 260);
  const Vocab v = load_gguf(w, dir);
  EXPECT_EQ(v.eot, 260);
  EXPECT_EQ(v.eog_ids, (Ids{257, 259, 260, 261}));
}

TEST(VocabFromGguf, RejectsWhatItCannotUse) {
  test::TempDir dir("gguf_bad");
  {
    GgufWriter w = gpt2_gguf();
    w.set_string("tokenizer.ggml.model", "bert");
    expect_error([&] { load_gguf(w, dir); }, ErrorKind::Unsupported, {"vocab.gguf", "bert"});
  }
  {
    GgufWriter w = gpt2_gguf();
    w.set_u32("tokenizer.ggml.eos_token_id", 9999);
    expect_error([&] { load_gguf(w, dir); }, ErrorKind::Format, {"vocab.gguf", "eos_token_id", "9999"});
  }
  {
    GgufWriter w = gpt2_gguf();
    w.set_u32("tokenizer.ggml.padding_token_id", 260);  // n_vocab: tolerated, dropped
    EXPECT_EQ(load_gguf(w, dir).pad, -1);
  }
  {
    GgufWriter w = gpt2_gguf();
    w.set_string_array("tokenizer.ggml.merges", {"hi"});
    expect_error([&] { load_gguf(w, dir); }, ErrorKind::Format, {"tokenizer.ggml.merges[0]"});
  }
  {
    GgufWriter w = gpt2_gguf();
    w.set_f32_array("tokenizer.ggml.scores", {0.0f, 1.0f});
    expect_error([&] { load_gguf(w, dir); }, ErrorKind::Format, {"2 scores", "260 tokens"});
  }
  {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    expect_error([&] { load_gguf(w, dir); }, ErrorKind::Format, {"tokenizer.ggml.model"});
  }
}

namespace {

// A Qwen2-style byte-level tokenizer.json: vocab of single characters plus "Ġt", "he", "Ġthe";
// merges in both spellings; added special tokens past the model vocabulary.
const char* kByteLevelJson = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 7, "content": "<|endoftext|>", "special": true},
    {"id": 8, "content": "<|im_start|>", "special": true},
    {"id": 9, "content": "<|im_end|>", "special": true},
    {"id": 10, "content": "<think>", "special": false}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
  "post_processor": {"type": "ByteLevel"},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false, "ignore_merges": false,
    "vocab": {"t": 0, "h": 1, "e": 2, "Ġ": 3, "Ġt": 4, "he": 5, "Ġthe": 6},
    "merges": ["Ġ t", ["h", "e"], "Ġt he"]}
})";

// A sentencepiece-converted (Llama-2 style) tokenizer.json.
const char* kMetaspaceJson = R"({
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true},
    {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {}},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "<0xA9>": 5,
              "▁": 6, "a": 7, "b": 8, "▁a": 9, "ab": 10},
    "merges": ["▁ a", "a b"]}
})";

}  // namespace

TEST(VocabFromTokenizerJson, ReadsAByteLevelTokenizerWithItsConfigs) {
  test::TempDir dir("json_bytelevel");
  const std::string path = dir.write_text("tokenizer.json", kByteLevelJson);
  dir.write_text("tokenizer_config.json", R"({"add_bos_token": false, "bos_token": null,
      "eos_token": {"content": "<|im_end|>", "special": true}, "pad_token": "<|endoftext|>",
      "chat_template": "{{ messages }}"})");
  dir.write_text("generation_config.json", R"({"bos_token_id": 7, "eos_token_id": [9, 7]})");

  const Vocab v = vocab_from_tokenizer_json(path);
  EXPECT_EQ(v.kind, Vocab::Kind::Bpe);
  ASSERT_EQ(v.size(), 11);
  EXPECT_EQ(v.tokens[6], "Ġthe");
  EXPECT_EQ(v.tokens[9], "<|im_end|>");
  EXPECT_EQ(v.type(9), TokenType::Control);
  EXPECT_EQ(v.type(10), TokenType::UserDefined);
  EXPECT_EQ(v.type(4), TokenType::Normal);
  ASSERT_EQ(v.merges.size(), 3u);
  EXPECT_EQ(v.merges[1], (std::pair<std::string, std::string>{"h", "e"}));
  EXPECT_EQ(v.eos, 9);
  EXPECT_EQ(v.pad, 7);
  EXPECT_EQ(v.bos, 7);  // from generation_config.json
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.eog_ids, (Ids{7, 9}));
  ASSERT_EQ(v.pre_tokenizers.size(), 2u);
  EXPECT_EQ(v.pre_tokenizers[0].pattern, "(?i:'s|'t)|\\p{L}+");
  EXPECT_EQ(v.pre_tokenizers[1].kind, PreTokenizerStep::Kind::ByteLevel);
  ASSERT_EQ(v.normalizers.size(), 1u);
  EXPECT_EQ(v.normalizers[0].kind, NormalizerStep::Kind::Nfc);
  EXPECT_EQ(v.chat_template, "{{ messages }}");

  const Tokenizer tok = Tokenizer::from_vocab(v);
  // The Split regex isolates letters, so the space is a word of its own: "the" -> t he, " " -> Ġ.
  // (Hugging Face tokenizers gives the same ids for this file.)
  EXPECT_EQ(tok.encode("<|im_start|>the the<|im_end|>", true), (Ids{8, 0, 5, 3, 0, 5, 9}));
  EXPECT_EQ(tok.decode({8, 0, 5, 3, 0, 5, 9}), "the the");
  EXPECT_EQ(tok.encode("<think>", false, false), (Ids{10}));
}

TEST(VocabFromTokenizerJson, ReadsASentencepieceStyleTokenizer) {
  test::TempDir dir("json_metaspace");
  const std::string path = dir.write_text("tokenizer.json", kMetaspaceJson);
  const Vocab v = vocab_from_tokenizer_json(path);
  EXPECT_EQ(v.kind, Vocab::Kind::Spm);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_TRUE(v.byte_fallback);
  EXPECT_EQ(v.bos, 1);  // from the TemplateProcessing post-processor
  EXPECT_TRUE(v.add_bos);
  EXPECT_EQ(v.unk, 0);
  EXPECT_EQ(v.type(0), TokenType::Unknown);
  EXPECT_EQ(v.type(1), TokenType::Control);
  EXPECT_EQ(v.type(3), TokenType::Byte);
  EXPECT_EQ(v.eos, -1);

  const Tokenizer tok = Tokenizer::from_vocab(v);
  // "▁ab": ▁a (rank 0) before ab (rank 1) -> ▁a b.
  EXPECT_EQ(tok.encode("ab", true), (Ids{1, 9, 8}));
  // "▁b▁é": no merges apply; é falls back to bytes.
  EXPECT_EQ(tok.encode("b é", false), (Ids{6, 8, 6, 4, 5}));
  EXPECT_EQ(tok.decode({1, 9, 8}), "ab");
  EXPECT_EQ(tok.decode({6, 8, 6, 4, 5}), "b é");
}

// A tokenizer with no token for any character of a text (and no unknown token) refuses it instead
// of returning no ids (issue 14, item 6); text it covers in part still encodes, as in HF.
TEST(VocabFromTokenizerJson, TextWithNoTokenAtAllIsAnErrorNotAnEmptyPrompt) {
  test::TempDir dir("json_uncoverable");
  const Tokenizer tok = Tokenizer::from_vocab(vocab_from_tokenizer_json(dir.write_text(
      "tokenizer.json",
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel",
          "add_prefix_space": false, "trim_offsets": false, "use_regex": false}, "decoder": {"type": "ByteLevel"}})")));
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(tok.encode("axb", false), (std::vector<int32_t>{0, 1}));  // HF drops the x
  EXPECT_TRUE(tok.encode("", false).empty());
  EXPECT_TRUE(tok.encode("  ", false).empty());
  expect_error([&] { tok.encode("xyz", false); }, ErrorKind::Usage, {"no token for any character", "xyz"});
}

TEST(VocabFromTokenizerJson, NamesWhatIsUnsupportedOrBroken) {
  test::TempDir dir("json_bad");
  const auto load = [&](const std::string& text) {
    return vocab_from_tokenizer_json(dir.write_text("tokenizer.json", text));
  };
  expect_error([&] { load(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})"); }, ErrorKind::Unsupported,
               {"tokenizer.json", "Unigram"});
  expect_error([&] { load(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"); }, ErrorKind::Unsupported,
               {"WordPiece"});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                              "pre_tokenizer": {"type": "Whitespace"}})");
      },
      ErrorKind::Unsupported, {"neither byte-level"});
  expect_error([&] { load("{\"model\": "); }, ErrorKind::Format, {"tokenizer.json", "not valid JSON"});
  expect_error([&] { load(R"({"version": "1.0"})"); }, ErrorKind::Format, {"model"});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []},
                              "decoder": {"type": "ByteLevel"}})");
      },
      ErrorKind::Format, {"id 0"});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]},
                              "decoder": {"type": "ByteLevel"}})");
      },
      ErrorKind::Format, {"model.merges[0]"});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []},
                              "decoder": {"type": "ByteLevel"}})");
      },
      ErrorKind::Format, {"model.vocab"});
  // Issue 14, item 6: what Hugging Face refuses, or what would drop text silently.
  expect_error(
      [&] { load(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel"}})"); },
      ErrorKind::Format, {"model.vocab is empty"});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}, "merges": []},
                              "decoder": {"type": "ByteLevel"}})");
      },
      ErrorKind::Format, {"not dense", "no token has id 1"});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]},
                              "decoder": {"type": "ByteLevel"}})");
      },
      ErrorKind::Format, {"model.merges[0]", "\"ab\"", "model.vocab does not have"});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                              "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "Frobnicate"}]}})");
      },
      ErrorKind::Format, {"unknown decoder type \"Frobnicate\""});
  expect_error(
      [&] {
        load(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                              "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "CTC"}})");
      },
      ErrorKind::Unsupported, {"the decoder \"CTC\" is not supported"});
  // tokenizer_config.json naming a token the vocabulary does not have.
  dir.write_text("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  expect_error([&] { load(kByteLevelJson); }, ErrorKind::Format, {"<|nope|>"});
  expect_error([&] { vocab_from_tokenizer_json(dir.file("missing.json")); }, ErrorKind::Io, {"missing.json"});
}
