// The generation loop on a generated model: greedy is deterministic, seeds reproduce, every
// declared EOS id stops, --ignore-eos runs to the limit, stop strings cut the text, a full context
// and the interrupt flag end it, and a truncated session continues from its prefix.
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "engine_fixture.h"
#include "text/utf8.h"

namespace ferry {
namespace {

using testing::SingleDevice;
using testing::TempDir;

class Generation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("generation");
    testing::make_model(dir_->str(), tiny::Arch::Llama, "hf", 5);
    model_ = new SingleDevice(dir_->str());
    tokenizer_ = new Tokenizer(*load_checkpoint_tokenizer(model_->ckpt));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    delete dir_;
  }
  GenerateResult run(const GenerateOptions& o, const std::vector<int32_t>& eog, const TextSink& sink = {}) {
    Session s(model_->ckpt.spec, model_->placement, model_->weights, 128);
    const auto prompt = tokenizer_->encode("The ferry crossed the river", false);
    return generate(s, tokenizer_, prompt, eog, o, sink);
  }
  static TempDir* dir_;
  static SingleDevice* model_;
  static Tokenizer* tokenizer_;
};
TempDir* Generation::dir_ = nullptr;
SingleDevice* Generation::model_ = nullptr;
Tokenizer* Generation::tokenizer_ = nullptr;

GenerateOptions greedy(int max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = 0;
  return o;
}

TEST_F(Generation, CheckpointDeclaresEveryEosId) {
  // generation_config.json lists several ids (GLM style); all of them must be honoured.
  const auto eog = end_of_generation_ids(model_->ckpt, tokenizer_);
  EXPECT_GE(model_->ckpt.config().eos_ids.size(), 2u);
  for (int32_t id : model_->ckpt.config().eos_ids) EXPECT_NE(std::find(eog.begin(), eog.end(), id), eog.end());
}

TEST_F(Generation, GreedyIsDeterministicAndStopsAtMaxTokens) {
  const auto a = run(greedy(12), {});
  const auto b = run(greedy(12), {});
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.ids.size(), 12u);
  EXPECT_EQ(a.stop, StopRules::Verdict::StopMaxTokens);
  // Streamed text is valid UTF-8: bytes that form no character become U+FFFD.
  EXPECT_EQ(a.text, utf8::sanitize(tokenizer_->decode(a.ids)));
}

TEST_F(Generation, SeedsReproduce) {
  GenerateOptions o;
  o.max_tokens = 16;
  o.sampling.temperature = 1.5f;
  o.sampling.top_k = 0;
  o.sampling.top_p = 1.0f;
  o.sampling.min_p = 0.0f;
  o.sampling.seed = 42;
  const auto a = run(o, {});
  const auto b = run(o, {});
  EXPECT_EQ(a.ids, b.ids);
  o.sampling.seed = 43;
  const auto c = run(o, {});
  EXPECT_NE(a.ids, c.ids);
}

TEST_F(Generation, AnyEosIdStopsUnlessIgnored) {
  const auto free_run = run(greedy(10), {});
  ASSERT_EQ(free_run.ids.size(), 10u);
  // Declare the 4th greedy token an end-of-generation id (alongside another id): generation stops
  // before it, and it is not part of the output.
  const int32_t eos = free_run.ids[3];
  const size_t first =
      static_cast<size_t>(std::find(free_run.ids.begin(), free_run.ids.end(), eos) - free_run.ids.begin());
  const auto stopped = run(greedy(10), {1, eos});
  EXPECT_EQ(stopped.stop, StopRules::Verdict::StopEog);
  EXPECT_EQ(stopped.ids, std::vector<int32_t>(free_run.ids.begin(), free_run.ids.begin() + first));
  GenerateOptions ignore = greedy(10);
  ignore.ignore_eos = true;
  const auto fixed = run(ignore, {1, eos});
  EXPECT_EQ(fixed.ids, free_run.ids);
  EXPECT_EQ(fixed.stop, StopRules::Verdict::StopMaxTokens);
}

TEST_F(Generation, StopStringCutsTheTextAndStreamingNeverShowsIt) {
  const auto free_run = run(greedy(16), {});
  ASSERT_GE(free_run.text.size(), 6u);
  const std::string stop = free_run.text.substr(free_run.text.size() / 2, 3);
  const size_t at = free_run.text.find(stop);
  GenerateOptions o = greedy(16);
  o.stop_strings = {stop};
  std::string streamed;
  const auto r = run(o, {}, [&](std::string_view t) { streamed += t; });
  EXPECT_EQ(r.stop, StopRules::Verdict::StopString);
  EXPECT_EQ(r.text, free_run.text.substr(0, at));
  EXPECT_EQ(streamed, r.text);
}

TEST_F(Generation, StreamedTextEqualsTheFinalText) {
  std::string streamed;
  const auto r = run(greedy(20), {}, [&](std::string_view t) { streamed += t; });
  EXPECT_EQ(streamed, r.text);
}

// Issue 14: --max-tokens beyond what the context has left generates until every row is used
// (stop: context), as llama.cpp does; only a prompt that does not fit is an error.
TEST_F(Generation, MaxTokensBeyondTheContextStopsWhenItIsFull) {
  Session s(model_->ckpt.spec, model_->placement, model_->weights, 8);
  GenerateOptions o = greedy(10);
  o.ignore_eos = true;
  const auto r = generate(s, tokenizer_, std::vector<int32_t>{1, 2, 3, 4, 5}, {}, o);
  EXPECT_TRUE(r.context_full);
  EXPECT_EQ(r.stop, StopRules::Verdict::Continue);
  EXPECT_STREQ(stop_name(r), "context");
  EXPECT_EQ(r.ids.size(), 4u);  // rows 5..7 for the first three; the last needs none
  EXPECT_EQ(s.n_past(), 8);
  // The same ids as a run with room to spare.
  Session roomy(model_->ckpt.spec, model_->placement, model_->weights, 64);
  o.max_tokens = 4;
  const auto within = generate(roomy, tokenizer_, std::vector<int32_t>{1, 2, 3, 4, 5}, {}, o);
  EXPECT_EQ(within.ids, r.ids);
  EXPECT_STREQ(stop_name(within), "max_tokens");
}

TEST_F(Generation, APromptLongerThanTheContextIsAUsageError) {
  Session s(model_->ckpt.spec, model_->placement, model_->weights, 4);
  try {
    generate(s, tokenizer_, std::vector<int32_t>{1, 2, 3, 4, 5}, {}, greedy(10));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--ctx"), std::string::npos) << e.what();
  }
}

TEST_F(Generation, TheInterruptFlagEndsTheReplyAtTheNextToken) {
  std::atomic<bool> interrupt{false};
  GenerateOptions o = greedy(50);
  o.ignore_eos = true;
  o.interrupt = &interrupt;
  size_t pieces = 0;
  const auto r = run(o, {}, [&](std::string_view) {
    if (++pieces == 3) interrupt.store(true);
  });
  EXPECT_TRUE(r.interrupted);
  EXPECT_STREQ(stop_name(r), "interrupted");
  EXPECT_GE(r.ids.size(), 3u);
  EXPECT_LT(r.ids.size(), 50u);
}

// Session::truncate keeps a prefix of the cache: evaluating the rest again gives the same logits
// as evaluating everything from scratch.
TEST_F(Generation, ATruncatedSessionContinuesFromItsPrefix) {
  const std::vector<int32_t> ids{1, 2, 3, 4, 5, 6, 7};
  Session whole(model_->ckpt.spec, model_->placement, model_->weights, 16);
  const auto expected = whole.eval(ids);
  Session s(model_->ckpt.spec, model_->placement, model_->weights, 16);
  s.eval(std::vector<int32_t>{1, 2, 3, 9, 9, 9});
  s.truncate(3, 3);
  EXPECT_EQ(s.n_past(), 3);
  EXPECT_EQ(s.next_position(), 3);
  const auto again = s.eval(std::span<const int32_t>(ids).subspan(3));
  ASSERT_EQ(again.size(), expected.size());
  for (size_t i = 0; i < again.size(); ++i) EXPECT_NEAR(again[i], expected[i], 1e-4f) << i;
  EXPECT_THROW(s.truncate(8, 3), Error);  // beyond what it holds
}

}  // namespace
}  // namespace ferry
