// The pieces of a tokenizer pipeline, each against expectations written from Hugging Face
// tokenizers' documented behaviour (its docs and unit tests give the split examples used here):
// regex iteration, normalizers, pre-tokenizer split behaviours, Metaspace, ByteLevel, added-token
// matching with its options, and the GGUF pre-tokenizer names.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/added_tokens.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/regex.h"
#include "text/tokenizer.h"

using namespace ferry;

namespace {

using Strings = std::vector<std::string>;
using Spans = std::vector<std::pair<size_t, size_t>>;

Spans matches(std::string_view pattern, std::string_view text) {
  Spans out;
  Regex(pattern, "test").for_each_match(text, [&](size_t s, size_t e) { out.emplace_back(s, e); });
  return out;
}

std::string normalize(std::vector<NormalizerStep> steps, std::string_view text) {
  return Normalizer(std::move(steps), "test").apply(text);
}

NormalizerStep step(NormalizerStep::Kind kind, std::string pattern = "", std::string content = "", bool regex = false) {
  NormalizerStep s;
  s.kind = kind;
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  s.regex = regex;
  return s;
}

Strings pre(std::vector<PreTokenizerStep> steps, std::string_view text, bool at_start = true) {
  const PreTokenizer p(std::move(steps), "test");
  const Words w = p.split(text, at_start);
  Strings out;
  for (size_t i = 0; i < w.size(); ++i) out.emplace_back(w[i]);
  return out;
}

PreTokenizerStep literal(std::string pattern, SplitBehavior behavior) {
  PreTokenizerStep s = PreTokenizerStep::split_regex(std::move(pattern), behavior);
  s.regex = false;
  return s;
}

PreTokenizerStep metaspace(PreTokenizerStep::Prepend prepend, bool split = true) {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::Kind::Metaspace;
  s.prepend = prepend;
  s.split = split;
  return s;
}

}  // namespace

TEST(Regex, IteratesLikeOnigurumaFindIter) {
  // An empty match right after the previous match is skipped (Rust regex and Oniguruma agree).
  EXPECT_EQ(matches("a*", "baac"), (Spans{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(matches(R"(\s+(?!\S)|\s+)", "a  b "), (Spans{{1, 2}, {2, 3}, {4, 5}}));
  EXPECT_EQ(matches(R"(\p{N}{1,3})", "12345"), (Spans{{0, 3}, {3, 5}}));
  // Lookbehind sees the text before the search position.
  EXPECT_EQ(matches(R"((?<=a)b)", "abab"), (Spans{{1, 2}, {3, 4}}));
  // Malformed UTF-8 never matches, and is no error.
  EXPECT_EQ(matches(R"(\S+)",
                    "a\xFF"
                    "b"),
            (Spans{{0, 1}, {2, 3}}));
  EXPECT_EQ(Regex(R"(\s+)", "test").replace_all("a \t b\n", "_"), "a_b_");
}

TEST(Regex, BadPatternsAreFormatErrorsNamingWhereTheyCameFrom) {
  try {
    Regex("(unclosed", "tokenizer.json pre-tokenizer 0");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("tokenizer.json pre-tokenizer 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
  }
}

TEST(Normalizer, UnicodeForms) {
  using K = NormalizerStep::Kind;
  EXPECT_EQ(normalize({step(K::Nfc)}, "e\u0301 \u1100\u1161\u11A8 \u212B"), "\u00E9 \uAC01 \u00C5");
  EXPECT_EQ(normalize({step(K::Nfd)}, "\u00E9"), "e\u0301");
  EXPECT_EQ(normalize({step(K::Nfkc)}, "\uFB01 \u2460 \uFF21"), "fi 1 A");
  EXPECT_EQ(normalize({step(K::Nfkd)}, "\u00BD"), "1\u20442");
  EXPECT_EQ(normalize({step(K::Lowercase)}, "\u00C0B\u0130 \u03A3"), "\u00E0bi\u0307 \u03C3");
  // Malformed bytes pass through untouched; the well-formed text around them is normalized.
  EXPECT_EQ(normalize({step(K::Nfc)},
                      "\xFF"
                      "e\u0301\xC3"),
            "\xFF\u00E9\xC3");
}

TEST(Normalizer, PrependReplaceStrip) {
  using K = NormalizerStep::Kind;
  const std::string meta = "\u2581";
  // Llama-2 / ChatGLM3 style: "▁" before the text and for every space.
  const std::vector<NormalizerStep> spm = {step(K::Prepend, "", meta), step(K::Replace, " ", meta)};
  EXPECT_EQ(normalize(spm, "a b  c"), meta + "a" + meta + "b" + meta + meta + "c");
  EXPECT_EQ(normalize(spm, ""), "");  // nothing is prepended to empty text
  EXPECT_EQ(normalize({step(K::Append, "", "!")}, "hi"), "hi!");
  EXPECT_EQ(normalize({step(K::Replace, R"(\s+)", " ", true)}, "a \t\n b"), "a b");
  NormalizerStep strip = step(K::Strip);
  strip.left = true;
  strip.right = true;
  EXPECT_EQ(normalize({strip}, "\u3000 a b\t\u00A0"), "a b");
  strip.left = false;
  EXPECT_EQ(normalize({strip}, " a "), " a");
}

TEST(PreTokenizer, SplitBehavioursAsTokenizersDocumentsThem) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(pre({literal("-", SplitBehavior::Removed)}, text), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(pre({literal("-", SplitBehavior::Isolated)}, text), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pre({literal("-", SplitBehavior::MergedWithPrevious)}, text),
            (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pre({literal("-", SplitBehavior::MergedWithNext)}, text), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pre({literal("-", SplitBehavior::Contiguous)}, text), (Strings{"the", "-", "final", "--", "countdown"}));
  // invert: the matches are what is kept.
  PreTokenizerStep words = PreTokenizerStep::split_regex(R"(\w+|[^\w\s]+)", SplitBehavior::Removed);
  words.invert = true;
  EXPECT_EQ(pre({words}, "Hey friend!  How are you?!?"), (Strings{"Hey", "friend", "!", "How", "are", "you", "?!?"}));
  // Each step splits the pieces of the one before: digits first, then GPT-2's pattern.
  EXPECT_EQ(
      pre({PreTokenizerStep::split_regex(R"(\p{N})"), PreTokenizerStep::split_regex(kGpt2SplitPattern)}, "ab 123"),
      (Strings{"ab", " ", "1", "2", "3"}));
}

TEST(PreTokenizer, MetaspaceAsTokenizersDoes) {
  const std::string m = "\u2581";
  using P = PreTokenizerStep::Prepend;
  EXPECT_EQ(pre({metaspace(P::Always)}, "Hey friend!"), (Strings{m + "Hey", m + "friend!"}));
  EXPECT_EQ(pre({metaspace(P::Always)}, "Hey   friend!"), (Strings{m + "Hey", m, m, m + "friend!"}));
  EXPECT_EQ(pre({metaspace(P::Always, false)}, "Hey friend"), (Strings{m + "Hey" + m + "friend"}));
  EXPECT_EQ(pre({metaspace(P::Never)}, "Hey friend"), (Strings{"Hey", m + "friend"}));
  // "first": only the text that begins the input gets the prefix, not a run after a special token.
  EXPECT_EQ(pre({metaspace(P::First)}, "Hey", true), (Strings{m + "Hey"}));
  EXPECT_EQ(pre({metaspace(P::First)}, "Hey", false), (Strings{"Hey"}));
}

TEST(PreTokenizer, ByteLevelPrefixRegexAndMapping) {
  // add_prefix_space, then GPT-2's pattern, then bytes -> characters (' ' -> Ġ, é -> Ã©).
  EXPECT_EQ(pre({PreTokenizerStep::byte_level(true, true)}, "hello  wé"),
            (Strings{"\u0120hello", "\u0120", "\u0120w\u00C3\u00A9"}));
  EXPECT_EQ(pre({PreTokenizerStep::byte_level(false, false)}, " a\n"), (Strings{"\u0120a\u010A"}));
  EXPECT_TRUE(PreTokenizer({PreTokenizerStep::byte_level(false, false)}, "t").maps_bytes());
}

TEST(PreTokenizer, GgufNamesMapToTheirPatterns) {
  const GgufPreTokenizer llama3 = pre_tokenizer_for_gguf("llama-bpe", "x.gguf");
  EXPECT_TRUE(llama3.ignore_merges);
  EXPECT_TRUE(llama3.add_bos);
  ASSERT_EQ(llama3.steps.size(), 2u);
  EXPECT_NE(llama3.steps[0].pattern.find(R"(\p{N}{1,3})"), std::string::npos);
  EXPECT_EQ(llama3.steps[1].kind, PreTokenizerStep::Kind::ByteLevel);
  EXPECT_EQ(pre_tokenizer_for_gguf("deepseek-llm", "x.gguf").steps.size(), 7u);
  EXPECT_EQ(pre_tokenizer_for_gguf("", "x.gguf").steps[0].pattern, kGpt2SplitPattern);
  // Every pattern in the table compiles.
  for (const char* name :
       {"default",  "qwen2",     "qwen35", "deepseek-coder", "deepseek-v3", "falcon",     "starcoder",  "command-r",
        "tekken",   "chameleon", "gpt-4o", "tiny_aya",       "superbpe",    "bailingmoe", "seed-coder", "exaone-moe",
        "minicpm5", "spark2_5",  "bloom",  "viking",         "jais-2",      "laguna"}) {
    EXPECT_NO_THROW(PreTokenizer(pre_tokenizer_for_gguf(name, "x.gguf").steps, name)) << name;
  }
  try {
    pre_tokenizer_for_gguf("brand-new", "x.gguf");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("\"brand-new\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos) << e.what();
  }
}

namespace {

using Parts = std::vector<std::tuple<std::string, int32_t>>;

Parts parts(const AddedTokenMatcher& m, std::string_view text, bool parse_special = true) {
  Parts out;
  for (const auto& p : m.split(text, parse_special)) {
    out.emplace_back(std::string(text.substr(p.start, p.end - p.start)), p.id);
  }
  return out;
}

}  // namespace

TEST(AddedTokens, LeftmostThenLongest) {
  AddedTokenMatcher m;
  m.add("ab", 1, 0, false);
  m.add("abc", 2, 0, false);
  m.add("bcd", 3, 0, false);
  // At position 0 both "ab" and "abc" match: the longest wins; "bcd" starts later and loses.
  EXPECT_EQ(parts(m, "xabcd"), (Parts{{"x", -1}, {"abc", 2}, {"d", -1}}));
  EXPECT_EQ(parts(m, "abd bcd"), (Parts{{"ab", 1}, {"d ", -1}, {"bcd", 3}}));
  EXPECT_EQ(parts(m, ""), (Parts{}));
}

TEST(AddedTokens, OptionsAsTokenizersTestsThem) {
  AddedTokenMatcher m;
  m.add("my", 0, kAddedLStrip | kAddedRStrip, false);
  m.add("name", 1, 0, false);
  m.add("ony", 2, kAddedSingleWord, false);
  m.add("[CLS]", 3, 0, true);
  m.add("[SEP]", 4, 0, true);
  // tokenizers' options_use_cases test (after lower-casing): lstrip/rstrip take the spaces, and
  // "ony" inside "anthony" is no single word.
  EXPECT_EQ(parts(m, "[CLS] my name is anthony [SEP]"),
            (Parts{{"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}}));
  // Special tokens are left as text when not parsed; the others are still matched.
  EXPECT_EQ(parts(m, "[CLS]name", false), (Parts{{"[CLS]", -1}, {"name", 1}}));

  AddedTokenMatcher mask;
  mask.add("<mask>", 0, kAddedSingleWord, false);
  EXPECT_EQ(parts(mask, "<mask> my name <mask> a<mask> <mask>ony <mask>"),
            (Parts{{"<mask>", 0}, {" my name ", -1}, {"<mask>", 0}, {" a<mask> <mask>ony ", -1}, {"<mask>", 0}}));
  AddedTokenMatcher strip;
  strip.add("<mask>", 0, kAddedLStrip | kAddedRStrip | kAddedSingleWord, false);
  EXPECT_EQ(parts(strip, "hi <mask> there\t<mask>\t<mask>\u2000"),
            (Parts{{"hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}}));
}

TEST(AddedTokens, NormalizedTokensMatchAfterTheNormalizer) {
  // A token marked "normalized" is looked for in the NFC text; one that is not, in the raw text.
  Vocab v;
  v.kind = Vocab::Kind::Bpe;
  v.add_space_prefix = false;
  v.source = "test";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_level::byte_to_char(static_cast<uint8_t>(b)));
  v.tokens.push_back("caf\u00E9");  // 256, normalized
  v.tokens.push_back("e\u0301!");   // 257, raw
  v.types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  v.types[256] = v.types[257] = static_cast<int32_t>(TokenType::UserDefined);
  v.token_flags.assign(v.tokens.size(), 0);
  v.token_flags[256] = kAddedNormalized;
  v.normalizers.push_back(step(NormalizerStep::Kind::Nfc));
  const Tokenizer tok = Tokenizer::from_vocab(v);
  EXPECT_EQ(tok.encode("cafe\u0301", false), (std::vector<int32_t>{256}));
  EXPECT_EQ(tok.encode("e\u0301!", false), (std::vector<int32_t>{257}));
}
