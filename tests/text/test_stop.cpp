// Stop rules: end-of-generation ids, stop strings (never shown), the token budget, and how much
// of the tail a streamer must hold back.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/stop.h"

using namespace ferry;
using Verdict = StopRules::Verdict;

TEST(StopRules, EogIdsStopUnlessIgnored) {
  StopRules rules({2, 7}, {}, 0, false);
  EXPECT_EQ(rules.on_token(5, "a"), Verdict::Continue);
  EXPECT_EQ(rules.on_token(7, "a"), Verdict::StopEog);

  StopRules bench({2, 7}, {}, 3, true);  // fixed-length benchmark
  EXPECT_EQ(bench.on_token(7, "a"), Verdict::Continue);
  EXPECT_EQ(bench.on_token(2, "a"), Verdict::Continue);
  EXPECT_EQ(bench.on_token(2, "a"), Verdict::StopMaxTokens);
}

TEST(StopRules, MaxTokens) {
  StopRules rules({}, {}, 3, false);
  EXPECT_EQ(rules.on_token(1, "x"), Verdict::Continue);
  EXPECT_EQ(rules.on_token(1, "xx"), Verdict::Continue);
  EXPECT_EQ(rules.on_token(1, "xxx"), Verdict::StopMaxTokens);
  EXPECT_EQ(rules.tokens_generated(), 3);
  rules.reset();
  EXPECT_EQ(rules.on_token(1, "x"), Verdict::Continue);

  StopRules unlimited({}, {}, 0, false);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(unlimited.on_token(1, ""), Verdict::Continue);
}

TEST(StopRules, StopStringAcrossTokensIsCutFromTheOutput) {
  StopRules rules({2}, {"User:", "\n\n\n"}, 100, false);
  std::string generated;
  const std::vector<std::string> pieces = {"Hello", " there", "\nUs", "er", ": more"};
  Verdict v = Verdict::Continue;
  for (const std::string& piece : pieces) {
    generated += piece;
    v = rules.on_token(9, generated);
    if (v != Verdict::Continue) break;
  }
  EXPECT_EQ(v, Verdict::StopString);
  EXPECT_EQ(rules.matched_stop_string(), "User:");
  EXPECT_EQ(generated.substr(0, rules.stop_offset()), "Hello there\n");
}

TEST(StopRules, EarliestStopStringWinsAndEogComesFirst) {
  StopRules rules({2}, {"cd", "bcde"}, 100, false);
  EXPECT_EQ(rules.on_token(9, "abcdef"), Verdict::StopString);
  EXPECT_EQ(rules.stop_offset(), 1u);  // "bcde" starts before "cd"
  EXPECT_EQ(rules.matched_stop_string(), "bcde");

  StopRules both({2}, {"x"}, 1, false);
  EXPECT_EQ(both.on_token(2, "x"), Verdict::StopEog);
  StopRules string_before_budget({}, {"x"}, 1, false);
  EXPECT_EQ(string_before_budget.on_token(3, "x"), Verdict::StopString);
}

TEST(StopRules, HoldBackIsTheLongestTailThatStartsAStopString) {
  StopRules rules({}, {"</answer>", "##"}, 0, false);
  EXPECT_EQ(rules.hold_back("abc"), 0u);
  EXPECT_EQ(rules.hold_back("abc<"), 1u);
  EXPECT_EQ(rules.hold_back("abc</an"), 4u);
  EXPECT_EQ(rules.hold_back("abc#"), 1u);
  EXPECT_EQ(rules.hold_back("</answe"), 7u);
  EXPECT_EQ(rules.hold_back("<"), 1u);
  EXPECT_EQ(rules.hold_back(""), 0u);
  EXPECT_EQ(rules.hold_back("a</b"), 0u);  // "</b" starts no stop string

  StopRules none({}, {}, 0, false);
  EXPECT_EQ(none.hold_back("abc<"), 0u);
}

TEST(StopRules, AStreamerNeverPrintsAnyPartOfTheStopString) {
  // Simulates the streaming loop: after each token print what is safe, at the end print up to the
  // stop offset. The printed text must be exactly the text before the stop string.
  const std::vector<std::string> pieces = {"The", " answer", " is 4", "2<", "/", "ans", "wer> and", " more"};
  StopRules rules({}, {"</answer>"}, 0, false);
  std::string generated, printed;
  for (const std::string& piece : pieces) {
    generated += piece;
    const Verdict v = rules.on_token(1, generated);
    if (v == Verdict::StopString) {
      printed += generated.substr(printed.size(), rules.stop_offset() - printed.size());
      break;
    }
    const size_t safe = generated.size() - rules.hold_back(generated);
    ASSERT_GE(safe, printed.size());
    printed += generated.substr(printed.size(), safe - printed.size());
    ASSERT_EQ(printed.find('<'), std::string::npos);
  }
  EXPECT_EQ(printed, "The answer is 42");
}

TEST(StopRules, RejectsEmptyStopStrings) {
  EXPECT_THROW(StopRules({}, {"ok", ""}, 0, false), Error);
}
