// The sentencepiece-style tokenizer: hand-computed encodings on a tiny vocabulary, the golden
// llama GGUF's vocabulary, round trips and the streaming decoder.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "formats/gguf.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text_test_util.h"

using namespace ferry;

namespace {

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

// A tiny sentencepiece vocabulary. Scores decide the merge order (highest first).
//   0 <unk>  1 <s>  2 </s>  3 <0x0A>  4 <0xC3>  5 <0xA9>
//   6 ▁ (-1)  7 a (-2)  8 b (-3)  9 c (-4)  10 ab (-6)  11 bc (-5)  12 ▁a (-7)  13 abc (-8)
//   14 aa (-1)  15 <tool> (user-defined)
Vocab tiny_spm_vocab() {
  Vocab v;
  v.kind = Vocab::Kind::Spm;
  v.source = "tiny-spm";
  const std::vector<std::tuple<std::string, float, int32_t>> entries = {
      {"<unk>", 0, kUnknown}, {"<s>", 0, kControl}, {"</s>", 0, kControl}, {"<0x0A>", 0, kByte},
      {"<0xC3>", 0, kByte},   {"<0xA9>", 0, kByte}, {"▁", -1, kNormal},    {"a", -2, kNormal},
      {"b", -3, kNormal},     {"c", -4, kNormal},   {"ab", -6, kNormal},   {"bc", -5, kNormal},
      {"▁a", -7, kNormal},    {"abc", -8, kNormal}, {"aa", -1, kNormal},   {"<tool>", 0, kUserDefined},
  };
  for (const auto& [text, score, type] : entries) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(type);
  }
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  finalize_special_tokens(v);
  return v;
}

using Ids = std::vector<int32_t>;

Tokenizer golden_llama_tokenizer() {
  return Tokenizer::from_vocab(vocab_from_gguf(GgufFile::open(test::golden_dir() + "/text/llama/model.gguf")));
}

}  // namespace

TEST(SpmTokenizer, MergesHighestScoreFirst) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_spm_vocab());
  // "abc" -> "▁abc": symbols ▁ a b c; pairs ▁a (-7), ab (-6), bc (-5). bc merges first, which makes
  // ab stale; then ▁a; then "a"+"bc" is stale (a was merged into ▁a) and ▁abc is no token.
  EXPECT_EQ(tok.encode("abc", false), (Ids{12, 11}));
  // add_special prepends <s> (add_bos).
  EXPECT_EQ(tok.encode("abc", true), (Ids{1, 12, 11}));
}

TEST(SpmTokenizer, WithoutSpacePrefixTheWholeWordMerges) {
  Vocab v = tiny_spm_vocab();
  v.add_space_prefix = false;
  const Tokenizer tok = Tokenizer::from_vocab(v);
  // a b c: bc (-5) before ab (-6); then a+bc = abc (-8).
  EXPECT_EQ(tok.encode("abc", false), (Ids{13}));
  // a a a: both pairs are "aa" (-1); the leftmost merges first, leaving "aa" "a".
  EXPECT_EQ(tok.encode("aaa", false), (Ids{14, 7}));
}

TEST(SpmTokenizer, SpacesBecomeMetaspaceAndUnknownCharactersFallBackToBytes) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_spm_vocab());
  // "▁aaa": aa (-1) at the left wins over ▁a (-7); ▁a is then stale.
  EXPECT_EQ(tok.encode("aaa", false), (Ids{6, 14, 7}));
  // "▁a▁b": ▁a merges; "▁b" is no token.
  EXPECT_EQ(tok.encode("a b", false), (Ids{12, 6, 8}));
  // é = C3 A9: no piece, both byte tokens exist.
  EXPECT_EQ(tok.encode("é", false), (Ids{6, 4, 5}));
  EXPECT_EQ(tok.encode("\n", false), (Ids{6, 3}));
  // ü = C3 BC: <0xBC> is missing, so the whole character is <unk>.
  EXPECT_EQ(tok.encode("ü", false), (Ids{6, 0}));
  EXPECT_EQ(tok.encode("", false), (Ids{}));
  EXPECT_EQ(tok.encode("", true), (Ids{1}));
}

TEST(SpmTokenizer, SpecialTokensInTheText) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_spm_vocab());
  // <s> is matched whole; the text after a special token gets the dummy prefix again.
  EXPECT_EQ(tok.encode("<s>a", false), (Ids{1, 12}));
  EXPECT_EQ(tok.encode("a</s>", false), (Ids{12, 2}));
  // Without parse_special control tokens are plain text: '<', 's', '>' have no pieces or bytes.
  EXPECT_EQ(tok.encode("<s>a", false, false), (Ids{6, 0, 0, 0, 7}));
  // User-defined tokens are matched either way.
  EXPECT_EQ(tok.encode("a<tool>", false, false), (Ids{12, 15}));
}

TEST(SpmTokenizer, DecodeUndoesTheEscapesAndTheDummyPrefix) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_spm_vocab());
  EXPECT_EQ(tok.decode({12, 11}), "abc");
  EXPECT_EQ(tok.decode({1, 12, 11}), "abc");  // control tokens hidden, prefix space still dropped
  EXPECT_EQ(tok.decode({1, 12, 11}, true), "<s>abc");
  EXPECT_EQ(tok.decode({6, 4, 5}), "é");
  EXPECT_EQ(tok.decode({12, 6, 8}), "a b");
  EXPECT_EQ(tok.decode({12, 15}), "a<tool>");
  EXPECT_EQ(tok.decode_token(12), " a");  // running text keeps its space
  EXPECT_EQ(tok.decode_token(4), "\xC3");
  EXPECT_EQ(tok.token_piece(12), "▁a");
  EXPECT_EQ(tok.find_token("bc"), 11);
  EXPECT_EQ(tok.find_token("zz"), -1);
  EXPECT_THROW(tok.decode({16}), Error);
  EXPECT_THROW(tok.decode({-1}), Error);
  EXPECT_THROW(tok.token_piece(99), Error);
}

TEST(SpmTokenizer, RejectsABrokenVocabulary) {
  Vocab v = tiny_spm_vocab();
  v.scores.pop_back();
  EXPECT_THROW(Tokenizer::from_vocab(v), Error);
  v = tiny_spm_vocab();
  v.bos = 99;
  EXPECT_THROW(Tokenizer::from_vocab(v), Error);
  v = tiny_spm_vocab();
  v.types[3] = 9;
  EXPECT_THROW(Tokenizer::from_vocab(v), Error);
  v = tiny_spm_vocab();
  v.unk = -1;
  v.types[0] = kNormal;
  // Without <unk> or byte tokens a character cannot be encoded: a clear error, not a crash.
  EXPECT_THROW(Tokenizer::from_vocab(v).encode("ü", false), Error);
}

TEST(SpmTokenizer, RankMergesWhenTheVocabularyHasMerges) {
  // The tokenizer.json flavour of sentencepiece: merges by rank, not score.
  Vocab v = tiny_spm_vocab();
  std::fill(v.scores.begin(), v.scores.end(), 0.0f);
  v.merges = {{"a", "b"}, {"▁", "a"}, {"b", "c"}};
  const Tokenizer tok = Tokenizer::from_vocab(v);
  // "▁abc": ranks ab 0, ▁a 1, bc 2 -> ab first; then ▁a is stale, "▁"+"ab" and "ab"+"c" are no
  // merges: ▁ ab c.
  EXPECT_EQ(tok.encode("abc", false), (Ids{6, 10, 9}));
}

TEST(SpmGolden, ReadsTheLlamaGgufVocabulary) {
  const Tokenizer tok = golden_llama_tokenizer();
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.kind, Vocab::Kind::Spm);
  ASSERT_EQ(v.size(), 320);
  EXPECT_EQ(tok.token_piece(0), "<unk>");
  EXPECT_EQ(tok.token_piece(1), "<s>");
  EXPECT_EQ(tok.token_piece(2), "</s>");
  EXPECT_EQ(tok.token_piece(3), "<0x00>");
  EXPECT_EQ(tok.token_piece(258), "<0xFF>");
  EXPECT_EQ(tok.token_piece(259), "▁");
  EXPECT_EQ(tok.token_piece(289), "▁the");
  EXPECT_EQ(tok.token_piece(315), "▁token");
  EXPECT_EQ(v.type(0), TokenType::Unknown);
  EXPECT_EQ(v.type(1), TokenType::Control);
  EXPECT_EQ(v.type(3), TokenType::Byte);
  EXPECT_EQ(v.type(260), TokenType::Normal);
  EXPECT_FLOAT_EQ(v.scores[260], -1.0f);
  EXPECT_FLOAT_EQ(v.scores[319], -60.0f);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  EXPECT_FALSE(v.add_bos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.eog_ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(tok.decode_token(3 + 'A'), "A");  // <0x41>
}

TEST(SpmGolden, HandComputedEncodings) {
  const Tokenizer tok = golden_llama_tokenizer();
  // "▁the": pairs ▁t (-27), he (-28) [th is no token]; ▁t merges, then he, then ▁t+he = ▁the (-30).
  // "▁token": ▁t (-27), en (-35), ok (-40) in that order, then ok+en = oken (-55), then ▁t+oken =
  // ▁token (-56).
  EXPECT_EQ(tok.encode("the token", false), (Ids{289, 315}));
  // "▁and": ▁a (-29) before nd (-36) before an (-57; stale by then); then ▁a+nd = ▁and (-50).
  EXPECT_EQ(tok.encode("and", false), (Ids{309}));
  // "!" has no piece: byte token <0x21> = id 3 + 0x21.
  EXPECT_EQ(tok.encode("the!", false), (Ids{289, 3 + 0x21}));
  // "é" = C3 A9 -> <0xC3> <0xA9>.
  EXPECT_EQ(tok.encode("é", false), (Ids{259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.encode("</s>", false), (Ids{2}));
}

TEST(SpmGolden, RoundTripsRandomText) {
  const Tokenizer tok = golden_llama_tokenizer();
  std::mt19937 rng(1234);
  for (int i = 0; i < 400; ++i) {
    const std::string text = test::random_text(rng, 80, i % 2 == 1);
    const std::vector<int32_t> ids = tok.encode(text, false, false);
    ASSERT_EQ(tok.decode(ids), text) << "case " << i;
    for (int32_t id : ids) ASSERT_NE(id, tok.vocab().unk);  // byte fallback covers everything
  }
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const Tokenizer tok = golden_llama_tokenizer();
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(259), " ");
  EXPECT_EQ(stream.push(3 + 0xC3), "");  // first byte of é
  EXPECT_EQ(stream.pending(), 1u);
  EXPECT_EQ(stream.push(3 + 0xA9), "é");
  // 😀 = F0 9F 98 80, one byte per token
  EXPECT_EQ(stream.push(3 + 0xF0), "");
  EXPECT_EQ(stream.push(3 + 0x9F), "");
  EXPECT_EQ(stream.push(3 + 0x98), "");
  EXPECT_EQ(stream.push(3 + 0x80), "😀");
  EXPECT_EQ(stream.push(289), " the");
  EXPECT_EQ(stream.push(2), "");  // </s> is hidden
  // A byte that can never start a character comes out at once, as U+FFFD.
  EXPECT_EQ(stream.push(3 + 0xFF), "\xEF\xBF\xBD");
  // A truncated character at the end comes out of flush() as U+FFFD.
  EXPECT_EQ(stream.push(3 + 0xE2), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamDecoder, EmitsValidUtf8ThatAddsUpToTheDecodedText) {
  const Tokenizer tok = golden_llama_tokenizer();
  std::mt19937 rng(99);
  std::uniform_int_distribution<int32_t> any_id(0, tok.n_vocab() - 1);
  for (int trial = 0; trial < 200; ++trial) {
    // Half the trials stream the tokens of real text, half random ids (often malformed bytes).
    std::vector<int32_t> ids;
    if (trial % 2 == 0) {
      ids = tok.encode(test::random_text(rng, 40, true), false, false);
    } else {
      for (int i = 0; i < 30; ++i) ids.push_back(any_id(rng));
    }
    StreamDecoder stream(tok);
    std::string streamed, raw;
    for (int32_t id : ids) {
      const std::string out = stream.push(id);
      ASSERT_TRUE(utf8::is_valid(out));
      streamed += out;
      raw += tok.decode_token(id);
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, utf8::sanitize(raw));
  }
}
