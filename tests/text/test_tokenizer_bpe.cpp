// The byte-level BPE tokenizer on a vocabulary built here: all 256 byte characters, five merges,
// one special token.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/tokenizer.h"
#include "text_test_util.h"

using namespace ferry;

namespace {

using Ids = std::vector<int32_t>;

// ids 0..255: the byte-level character of byte b (so 't' = 116, 'a' = 97, ' ' = "Ġ" = 32);
// merges by rank: 0 "Ġ t", 1 "h e", 2 "Ġt he", 3 "e r", 4 "t h", making
// 256 "Ġt", 257 "he", 258 "Ġthe", 259 "er", 260 "th"; 261 "<|endoftext|>" (control),
// 262 "<|im_end|>" (control), 263 "<tool_call>" (user-defined).
Vocab tiny_bpe_vocab() {
  Vocab v;
  v.kind = Vocab::Kind::Bpe;
  v.source = "tiny-bpe";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_level::byte_to_char(static_cast<uint8_t>(b)));
  const std::string G = "\xC4\xA0";  // 'Ġ', the byte-level space
  v.merges = {{G, "t"}, {"h", "e"}, {G + "t", "he"}, {"e", "r"}, {"t", "h"}};
  for (const auto& [l, r] : v.merges) v.tokens.push_back(l + r);
  v.types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(static_cast<int32_t>(TokenType::Control));
  v.tokens.push_back("<|im_end|>");
  v.types.push_back(static_cast<int32_t>(TokenType::Control));
  v.tokens.push_back("<tool_call>");
  v.types.push_back(static_cast<int32_t>(TokenType::UserDefined));
  v.scores.assign(v.tokens.size(), 0.0f);
  v.eos = 261;
  v.add_space_prefix = false;
  finalize_special_tokens(v);
  return v;
}

}  // namespace

TEST(BpeTokenizer, MergesLowestRankFirst) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_bpe_vocab());
  // Words: "the", " theater".
  // "the": pairs th (4), he (1) -> he first -> t he; "t"+"he" is no merge.
  // "Ġtheater": Ġt (0) -> Ġt h e a t e r; he (1) -> Ġt he a t e r; Ġt+he (2) -> Ġthe a t e r;
  // er (3) -> Ġthe a t er; the old "t h" pair is stale.
  EXPECT_EQ(tok.encode("the theater", false), (Ids{116, 257, 258, 97, 116, 259}));
  EXPECT_EQ(tok.encode("", false), (Ids{}));
  EXPECT_EQ(tok.decode({258}), " the");
  EXPECT_EQ(tok.token_piece(258), "\xC4\xA0the");
}

TEST(BpeTokenizer, IgnoreMergesTakesWholeWordTokens) {
  Vocab v = tiny_bpe_vocab();
  v.tokens.push_back("the");  // 264: reachable only as a whole word
  v.types.push_back(static_cast<int32_t>(TokenType::Normal));
  v.scores.push_back(0.0f);
  EXPECT_EQ(Tokenizer::from_vocab(v).encode("the", false), (Ids{116, 257}));
  v.ignore_merges = true;
  EXPECT_EQ(Tokenizer::from_vocab(v).encode("the", false), (Ids{264}));
}

TEST(BpeTokenizer, SpecialAndAddedTokens) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_bpe_vocab());
  EXPECT_EQ(tok.encode("the<|endoftext|>", false), (Ids{116, 257, 261}));
  EXPECT_EQ(tok.encode("<|im_end|>the", false), (Ids{262, 116, 257}));
  // Not parsed: the characters of "<|im_end|>" as text, one byte token each (no merges apply).
  const Ids plain = tok.encode("<|im_end|>", false, false);
  ASSERT_EQ(plain.size(), 10u);
  EXPECT_EQ(plain[0], '<');
  EXPECT_EQ(tok.encode("a<tool_call>b", false, false), (Ids{'a', 263, 'b'}));
  // Control tokens are hidden on decode unless asked for; user-defined ones are text.
  EXPECT_EQ(tok.decode({116, 257, 261}), "the");
  EXPECT_EQ(tok.decode({116, 257, 261}, true), "the<|endoftext|>");
  EXPECT_EQ(tok.decode({263}), "<tool_call>");
  // <|endoftext|> and <|im_end|> end generation (eos and by their text).
  EXPECT_EQ(tok.vocab().eog_ids, (std::vector<int32_t>{261, 262}));
}

TEST(BpeTokenizer, AddPrefixSpaceLikeByteLevelAddPrefixSpace) {
  Vocab v = tiny_bpe_vocab();
  v.add_space_prefix = true;
  const Tokenizer tok = Tokenizer::from_vocab(v);
  EXPECT_EQ(tok.encode("the", false), (Ids{258}));   // " the"
  EXPECT_EQ(tok.encode(" the", false), (Ids{258}));  // already starts with a space
}

TEST(BpeTokenizer, RoundTripsAnyBytes) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_bpe_vocab());
  std::mt19937 rng(42);
  for (int i = 0; i < 300; ++i) {
    const std::string text = test::random_text(rng, 80, i % 2 == 1);
    ASSERT_EQ(tok.decode(tok.encode(text, false, false)), text) << "case " << i;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 100; ++i) {  // arbitrary bytes, malformed UTF-8 included
    std::string bytes;
    for (int j = 0; j < 50; ++j) bytes += static_cast<char>(byte(rng));
    ASSERT_EQ(tok.decode(tok.encode(bytes, false, false)), bytes) << "case " << i;
  }
}

TEST(BpeTokenizer, StreamsCharactersSplitAcrossByteTokens) {
  const Tokenizer tok = Tokenizer::from_vocab(tiny_bpe_vocab());
  const Ids ids = tok.encode("中", false);  // E4 B8 AD: three byte tokens
  ASSERT_EQ(ids, (Ids{0xE4, 0xB8, 0xAD}));
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "中");
  EXPECT_EQ(stream.flush(), "");
}

TEST(BpeTokenizer, HandBuiltVocabularyGetsDefaults) {
  Vocab v = tiny_bpe_vocab();
  v.scores.clear();
  v.types.clear();  // every token normal: <|endoftext|> is then plain text, found as a piece
  v.eog_ids = {261, 261, 5};
  const Tokenizer tok = Tokenizer::from_vocab(v);
  EXPECT_EQ(tok.vocab().eog_ids, (Ids{5, 261}));
  EXPECT_EQ(tok.encode("the theater", false), (Ids{116, 257, 258, 97, 116, 259}));
  EXPECT_EQ(tok.decode({261}), "<|endoftext|>");
}
