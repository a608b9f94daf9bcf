// tiktoken rank files (GLM-4's tokenizer.model): a tiny file written here, checked against a naive
// tiktoken byte-pair merge written from the algorithm, plus the special tokens, the [gMASK] <sop>
// prefix and the errors for broken files.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.h"
#include "text/regex.h"
#include "text/tokenizer.h"
#include "text/tokenizer_loader.h"
#include "text/vocab.h"
#include "text_test_util.h"

using namespace ferry;

namespace {

using Ids = std::vector<int32_t>;

std::string base64(std::string_view bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += alphabet[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// The ranks: all 256 bytes in a shuffled order (as real files do not rank them by value), then
// multi-byte tokens.
std::map<std::string, int32_t> tiny_ranks() {
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[b] = b;
  std::shuffle(bytes.begin(), bytes.end(), std::mt19937(3));
  std::map<std::string, int32_t> ranks;
  int32_t rank = 0;
  for (int b : bytes) ranks[std::string(1, static_cast<char>(b))] = rank++;
  for (const char* t : {"th", "he", " t",  "the", " the", "in", "ng", "ing", " th",      "  ",          "    ",
                        "er", "re", "ere", "12",  "123",  "ab", "bc", "abc", "\xE4\xB8", "\xE4\xB8\xAD"}) {
    ranks[t] = rank++;
  }
  return ranks;
}

std::string tiny_file(const std::map<std::string, int32_t>& ranks) {
  std::vector<std::pair<int32_t, std::string>> lines;
  for (const auto& [bytes, rank] : ranks) lines.emplace_back(rank, base64(bytes) + " " + std::to_string(rank));
  std::sort(lines.begin(), lines.end());
  std::string text;
  for (const auto& line : lines) text += line.second + "\n";
  return text;
}

// tiktoken's encode_ordinary, written from the algorithm: split with the pattern; a piece that is
// a token is taken whole; otherwise merge the adjacent pair whose concatenation has the lowest
// rank (the leftmost on ties) until none is a token.
Ids naive_tiktoken(const std::string& text, const std::map<std::string, int32_t>& ranks, const Regex& pattern) {
  Ids ids;
  std::vector<std::string> pieces;
  size_t previous = 0;
  pattern.for_each_match(text, [&](size_t start, size_t end) {
    if (start > previous) pieces.push_back(text.substr(previous, start - previous));
    pieces.push_back(text.substr(start, end - start));
    previous = end;
  });
  if (previous < text.size()) pieces.push_back(text.substr(previous));
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    if (const auto it = ranks.find(piece); it != ranks.end()) {
      ids.push_back(it->second);
      continue;
    }
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    while (parts.size() > 1) {
      size_t best = parts.size();
      int32_t best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const auto it = ranks.find(parts[i] + parts[i + 1]);
        if (it != ranks.end() && it->second < best_rank) best = i, best_rank = it->second;
      }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<long>(best) + 1);
    }
    for (const std::string& p : parts) ids.push_back(ranks.at(p));
  }
  return ids;
}

const char* kGlm4Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

TEST(Tiktoken, EncodesLikeTiktokensBytePairMerge) {
  test::TempDir dir("tiktoken");
  const auto ranks = tiny_ranks();
  const std::string path = dir.write_text("tokenizer.model", tiny_file(ranks));
  const Tokenizer tok = Tokenizer::from_vocab(vocab_from_tiktoken(path));
  const Regex pattern(kGlm4Pattern, "test");

  // Texts around the merges (whole-word tokens, competing pairs, multi-byte characters), then
  // random ones.
  for (const std::string text : {"the", " the", "there", "thing", "  in  ing", "abc", "bcabc", "1234567", "中中文",
                                 "It's THE end\r\n\r\n  ok", ""}) {
    EXPECT_EQ(tok.encode(text, false), naive_tiktoken(text, ranks, pattern)) << text;
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    const std::string text = test::random_text(rng, 40, true);
    const Ids ids = tok.encode(text, false);
    ASSERT_EQ(ids, naive_tiktoken(text, ranks, pattern)) << text;
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(Tiktoken, Glm4SpecialTokensFollowTheRanks) {
  test::TempDir dir("tiktoken_special");
  const auto ranks = tiny_ranks();
  const auto n = static_cast<int32_t>(ranks.size());
  const std::string path = dir.write_text("tokenizer.model", tiny_file(ranks));
  const Vocab v = vocab_from_tiktoken(path);
  ASSERT_EQ(v.size(), n + 14);
  EXPECT_EQ(v.tokens[n], "<|endoftext|>");
  EXPECT_EQ(v.tokens[n + 2], "[gMASK]");
  EXPECT_EQ(v.tokens[n + 4], "<sop>");
  EXPECT_EQ(v.tokens[n + 7], "<|user|>");
  EXPECT_EQ(v.eos, n);
  EXPECT_TRUE(v.is_eog(n + 7));  // <|user|>
  EXPECT_TRUE(v.is_eog(n + 9));  // <|observation|>
  const Tokenizer tok = Tokenizer::from_vocab(v);
  const Ids the = {ranks.at("the")};
  EXPECT_EQ(tok.encode("the", true), (Ids{n + 2, n + 4, the[0]}));  // [gMASK] <sop> the
  EXPECT_EQ(tok.encode("<|user|>\nthe", false), (Ids{n + 7, ranks.at("\n"), the[0]}));
  EXPECT_EQ(tok.decode({n + 7, the[0]}, true), "<|user|>the");
  EXPECT_EQ(tok.decode({n + 7, the[0]}), "the");

  // load_tokenizer tells a tiktoken tokenizer.model by its content, and takes the special tokens
  // from tokenizer_config.json when it lists them.
  dir.write_text("tokenizer_config.json", R"({"added_tokens_decoder": {")" + std::to_string(n) +
                                              R"(": {"content": "<|endoftext|>"}, ")" + std::to_string(n + 1) +
                                              R"(": {"content": "<|user|>", "special": true}}})");
  const Tokenizer from_dir = load_tokenizer(dir.str());
  EXPECT_EQ(from_dir.n_vocab(), n + 2);
  EXPECT_EQ(from_dir.encode("<|user|>the", true), (Ids{n + 1, the[0]}));  // no [gMASK]: not in this vocabulary
}

TEST(Tiktoken, BrokenFilesGetClearErrors) {
  test::TempDir dir("tiktoken_bad");
  const auto expect_format_error = [&](const std::string& text, const std::string& part) {
    const std::string path = dir.write_text("bad.model", text);
    try {
      vocab_from_tiktoken(path);
      ADD_FAILURE() << "no error for " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto ranks = tiny_ranks();
  std::string good = tiny_file(ranks);
  expect_format_error(good + "not-base64! 9\n", ":278:");
  expect_format_error(good + "YQ== x\n", ":278:");
  expect_format_error(good + "YQ== 3\n", "rank 3 appears twice");
  ranks.erase(std::string(1, 'q'));
  expect_format_error(tiny_file(ranks), "byte 0x71 has no rank");
  expect_format_error("", "no ranks");
  EXPECT_FALSE(looks_like_tiktoken(dir.write_text("x.json", "{\"model\": {}}")));
  EXPECT_TRUE(looks_like_tiktoken(dir.write_text("ok.model", good)));
}
