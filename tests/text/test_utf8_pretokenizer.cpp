// UTF-8 helpers, GPT-2's byte <-> character table and GPT-2's split pattern run by PCRE2.
#include <gtest/gtest.h>

#include <random>

#include "text/byte_level.h"
#include "text/pretokenizer.h"
#include "text/utf8.h"
#include "text_test_util.h"

using namespace ferry;

TEST(Utf8, DecodesWellFormedSequences) {
  EXPECT_EQ(utf8::decode("A").codepoint, 0x41u);
  const utf8::Decoded e = utf8::decode("\xC3\xA9");
  EXPECT_EQ(e.status, utf8::Status::Ok);
  EXPECT_EQ(e.codepoint, 0xE9u);
  EXPECT_EQ(e.length, 2u);
  EXPECT_EQ(utf8::decode("\xE2\x82\xAC").codepoint, 0x20ACu);
  const utf8::Decoded emoji = utf8::decode("\xF0\x9F\x98\x80");
  EXPECT_EQ(emoji.codepoint, 0x1F600u);
  EXPECT_EQ(emoji.length, 4u);
  EXPECT_EQ(utf8::encode(0x1F600), "\xF0\x9F\x98\x80");
  EXPECT_EQ(utf8::encode(0x2581), "\xE2\x96\x81");
}

TEST(Utf8, RejectsMalformedAndSpotsTruncated) {
  EXPECT_EQ(utf8::decode("\x80").status, utf8::Status::Invalid);              // lone continuation byte
  EXPECT_EQ(utf8::decode("\xC0\x80").status, utf8::Status::Invalid);          // overlong NUL
  EXPECT_EQ(utf8::decode("\xE0\x80\x80").status, utf8::Status::Invalid);      // overlong
  EXPECT_EQ(utf8::decode("\xED\xA0\x80").status, utf8::Status::Invalid);      // surrogate U+D800
  EXPECT_EQ(utf8::decode("\xF4\x90\x80\x80").status, utf8::Status::Invalid);  // > U+10FFFF
  EXPECT_EQ(utf8::decode("\xFF").status, utf8::Status::Invalid);
  EXPECT_EQ(utf8::decode("\xE2\x82").status, utf8::Status::Incomplete);
  EXPECT_EQ(utf8::decode("\xF0\x9F").status, utf8::Status::Incomplete);
  EXPECT_EQ(utf8::decode("\xE2"
                         "A")
                .status,
            utf8::Status::Invalid);  // cut by an ASCII byte

  EXPECT_EQ(utf8::complete_prefix_length("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8::complete_prefix_length("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8::complete_prefix_length("ab\xFF"), 3u);  // never completable: not held back
  EXPECT_EQ(utf8::complete_prefix_length("\xF0\x9F\x98"), 0u);

  EXPECT_EQ(utf8::sanitize("a\xFF"
                           "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8::sanitize("a\xE2\x82"), "a\xEF\xBF\xBD");  // one U+FFFD for the truncated sequence
  EXPECT_TRUE(utf8::is_valid("héllo 中文 😀"));
  EXPECT_FALSE(utf8::is_valid("\xC3"));
}

TEST(ByteLevel, MatchesGpt2Table) {
  // Known entries of GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to
  // 256 + their position among the non-printable bytes.
  EXPECT_EQ(byte_level::byte_to_char('A'), "A");
  EXPECT_EQ(byte_level::byte_to_char(' '), "\xC4\xA0");   // U+0120 'Ġ' (32 is the 33rd unprintable byte)
  EXPECT_EQ(byte_level::byte_to_char('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_level::byte_to_char('\t'), "\xC4\x89");  // U+0109 'ĉ'
  EXPECT_EQ(byte_level::byte_to_char(0x00), "\xC4\x80");  // U+0100 'Ā'
  EXPECT_EQ(byte_level::byte_to_char(0x7F), "\xC4\xA1");  // U+0121 'ġ'
  EXPECT_EQ(byte_level::byte_to_char(0xA0), "\xC5\x82");  // U+0142 'ł'
  EXPECT_EQ(byte_level::byte_to_char(0xAD), "\xC5\x83");  // U+0143 'Ń'
  EXPECT_EQ(byte_level::byte_to_char(0xE9), "\xC3\xA9");  // 'é' is printable: itself
  EXPECT_EQ(byte_level::char_to_byte(0x120), ' ');
  EXPECT_EQ(byte_level::char_to_byte(0x2581), -1);

  // A bijection on all 256 bytes.
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level::decode(byte_level::encode(all)), all);
  EXPECT_EQ(byte_level::encode("héllo"), "h\xC3\x83\xC2\xA9llo");  // é = C3 A9 -> 'Ã' '©'
}

namespace {

const PreTokenizer& gpt2() {
  static const PreTokenizer pre({PreTokenizerStep::split_regex(kGpt2SplitPattern)}, "GPT-2 pattern");
  return pre;
}

std::vector<std::string> split(std::string_view text) {
  return gpt2().split_to_strings(text);
}

using Strings = std::vector<std::string>;

}  // namespace

// Expected splits worked out by hand from GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
TEST(Gpt2PreTokenizer, SplitsAsciiLikeTheRegex) {
  // "  foo": the 2-space run gives up its last space to the word; "\n\n" before a letter splits
  // into "\n" (by \s+(?!\S)) and "\n" (by \s+); trailing spaces stay one piece.
  EXPECT_EQ(split("Hello world's 123  foo!!\n\nbar  "),
            (Strings{"Hello", " world", "'s", " 123", " ", " foo", "!!", "\n", "\n", "bar", "  "}));
  EXPECT_EQ(split("I'm they're don't we've she'll he'd"),
            (Strings{"I", "'m", " they", "'re", " don", "'t", " we", "'ve", " she", "'ll", " he", "'d"}));
  EXPECT_EQ(split("A'LL"), (Strings{"A", "'", "LL"}));  // contractions are lower-case only
  EXPECT_EQ(split("x = a1+2;"), (Strings{"x", " =", " a", "1", "+", "2", ";"}));
  EXPECT_EQ(split(" 's"), (Strings{" '", "s"}));
  EXPECT_EQ(split("a \nb"), (Strings{"a", " ", "\n", "b"}));
  EXPECT_EQ(split("\t\tx"), (Strings{"\t", "\t", "x"}));
  EXPECT_EQ(split("   "), (Strings{"   "}));
  EXPECT_EQ(split(""), (Strings{}));
}

TEST(Gpt2PreTokenizer, UsesUnicodeClassesOutsideAscii) {
  EXPECT_EQ(split("héllo wörld"), (Strings{"héllo", " wörld"}));
  EXPECT_EQ(split("a\u00A0b"), (Strings{"a", "\u00A0", "b"}));  // NBSP is \s but not ' '
  EXPECT_EQ(split("中文 字"), (Strings{"中文", " 字"}));
  EXPECT_EQ(split("x٣٤ ¿Qué?"), (Strings{"x", "٣٤", " ¿", "Qué", "?"}));  // Arabic-Indic digits are \p{N}
  EXPECT_EQ(split("e\u0301"), (Strings{"e", "\u0301"}));                  // a combining mark is \p{M}, not \p{L}
  // Only ' ' joins the next word; other white space stands alone.
  EXPECT_EQ(split("a\u3000\u3000b"), (Strings{"a", "\u3000", "\u3000", "b"}));
}

TEST(Gpt2PreTokenizer, MalformedBytesNeverMatchAndStayPiecesOfTheirOwn) {
  EXPECT_EQ(split("ab\xFF"
                  "cd"),
            (Strings{"ab", "\xFF", "cd"}));
  EXPECT_EQ(split(" \xC3"), (Strings{" ", "\xC3"}));
}

TEST(Gpt2PreTokenizer, PiecesAlwaysConcatenateToTheInput) {
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string text = test::random_text(rng, 60, true);
    if (i % 5 == 0) text += "\xFF\xC3";  // malformed bytes too
    const Words words = gpt2().split(text);
    std::string joined;
    for (size_t w = 0; w < words.size(); ++w) {
      EXPECT_FALSE(words[w].empty());
      joined.append(words[w]);
    }
    EXPECT_EQ(joined, text);
  }
}
