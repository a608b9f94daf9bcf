// The sampler chain: each stage against hand-computed sets, determinism, and the empirical
// distribution of the draw against the softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "core/error.h"
#include "text/sampling.h"

using namespace ferry;

namespace {

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

// Plain temperature sampling: no filters.
SamplingParams pure_params(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

// The ids left after applying one stage to logits, sorted.
std::vector<int32_t> kept(SamplerStage& stage, const std::vector<float>& logits) {
  Candidates c;
  c.assign(logits.data(), static_cast<int>(logits.size()));
  stage.apply(c);
  std::vector<int32_t> ids;
  for (const TokenCandidate& t : c.items) ids.push_back(t.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

using Ids = std::vector<int32_t>;

// Logits whose softmax is exactly (0.5, 0.25, 0.125, 0.125) in order 2, 0, 3, 1 (ids shuffled so
// that sorting matters).
const std::vector<float> kQuarterLogits = {std::log(0.25f), std::log(0.125f), std::log(0.5f), std::log(0.125f)};

}  // namespace

TEST(Sampling, GreedyPicksTheArgmaxAndTheLowestIdOnTies) {
  Sampler s(greedy_params());
  const std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.4f};
  EXPECT_EQ(s.sample(logits.data(), 4), 1);
  const std::vector<float> tie = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(tie.data(), 4), 1);
  EXPECT_EQ(s.describe(), "greedy");
}

TEST(Sampling, TopKOfOneIsGreedy) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  SamplingParams p = pure_params(1.0f, 77);
  p.top_k = 1;
  Sampler top1(p);
  Sampler greedy(greedy_params());
  for (int i = 0; i < 200; ++i) {
    std::vector<float> logits(50);
    for (float& l : logits) l = normal(rng);
    EXPECT_EQ(top1.sample(logits.data(), 50), greedy.sample(logits.data(), 50));
  }
}

TEST(Sampling, TopKKeepsTheKHighest) {
  TopK top2(2);
  EXPECT_EQ(kept(top2, {0.5f, 3.0f, 1.0f, 2.0f}), (Ids{1, 3}));
  TopK off(0);
  EXPECT_EQ(kept(off, {0.5f, 3.0f, 1.0f}), (Ids{0, 1, 2}));
  TopK tie(1);
  EXPECT_EQ(kept(tie, {2.0f, 2.0f}), (Ids{0}));  // lower id wins the tie
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities sorted: 0.5 (id 2), 0.25 (id 0), 0.125 (ids 1 and 3, lower id first).
  TopP p40(0.4f);  // 0.5 >= 0.4
  EXPECT_EQ(kept(p40, kQuarterLogits), (Ids{2}));
  TopP p70(0.7f);  // 0.5 < 0.7 <= 0.75
  EXPECT_EQ(kept(p70, kQuarterLogits), (Ids{0, 2}));
  TopP p80(0.8f);  // 0.75 < 0.8 <= 0.875: the tie is broken toward the lower id
  EXPECT_EQ(kept(p80, kQuarterLogits), (Ids{0, 1, 2}));
  TopP p95(0.95f);
  EXPECT_EQ(kept(p95, kQuarterLogits), (Ids{0, 1, 2, 3}));
  TopP off(1.0f);
  EXPECT_EQ(kept(off, kQuarterLogits), (Ids{0, 1, 2, 3}));
}

TEST(Sampling, MinPKeepsTokensAboveAFractionOfTheBest) {
  // p_max = 0.5: min_p 0.3 -> keep p >= 0.15; 0.2 -> p >= 0.1; 0.6 -> p >= 0.3.
  MinP m30(0.3f);
  EXPECT_EQ(kept(m30, kQuarterLogits), (Ids{0, 2}));
  MinP m20(0.2f);
  EXPECT_EQ(kept(m20, kQuarterLogits), (Ids{0, 1, 2, 3}));
  MinP m60(0.6f);
  EXPECT_EQ(kept(m60, kQuarterLogits), (Ids{2}));
}

TEST(Sampling, SameSeedSameSequenceDifferentSeedDifferent) {
  std::vector<float> logits(32);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  const auto run = [&](uint64_t seed) {
    Sampler s(pure_params(1.0f, seed));
    std::vector<int32_t> ids;
    for (int i = 0; i < 300; ++i) ids.push_back(s.sample(logits.data(), 32));
    return ids;
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);

  // reset() restarts the random sequence.
  Sampler s(pure_params(1.0f, 1));
  for (int i = 0; i < 10; ++i) s.sample(logits.data(), 32);
  s.reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 300; ++i) again.push_back(s.sample(logits.data(), 32));
  EXPECT_EQ(again, a);
}

namespace {

// Draws n samples and checks every token's count against n * p with a binomial tolerance (4.5
// standard deviations) and the Pearson chi-square statistic against the 0.999 quantile.
void expect_matches_softmax(Sampler& s, const std::vector<float>& logits, float temperature) {
  const int n = 20000;
  const int k = static_cast<int>(logits.size());
  std::vector<double> p(k);
  double sum = 0.0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]) / temperature);
  for (double& x : p) x /= sum;

  std::vector<int> counts(k, 0);
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits.data(), k)];
  double chi2 = 0.0;
  for (int i = 0; i < k; ++i) {
    const double expected = n * p[i];
    const double sd = std::sqrt(n * p[i] * (1.0 - p[i]));
    EXPECT_NEAR(counts[i], expected, 4.5 * sd) << "token " << i;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  // chi-square with k - 1 = 5 degrees of freedom: P(X > 20.52) = 0.001.
  ASSERT_EQ(k, 6);
  EXPECT_LT(chi2, 20.52);
}

}  // namespace

TEST(Sampling, DrawsFollowTheSoftmax) {
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, 1.5f, -1.0f, 2.0f};
  Sampler t1(pure_params(1.0f, 2024));
  expect_matches_softmax(t1, logits, 1.0f);
  Sampler t07(pure_params(0.7f, 7));
  expect_matches_softmax(t07, logits, 0.7f);
}

TEST(Sampling, FiltersThenDrawsOnlyFromTheKeptSet) {
  SamplingParams p = pure_params(1.0f, 3);
  p.top_k = 2;
  Sampler s(p);
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, 1.5f, -1.0f, 2.0f};
  std::map<int32_t, int> counts;
  for (int i = 0; i < 2000; ++i) ++counts[s.sample(logits.data(), 6)];
  EXPECT_EQ(counts.size(), 2u);
  // p(5) / (p(5) + p(3)) = 1 / (1 + e^-0.5) = 0.6225; 2000 draws: sd 21.7.
  EXPECT_NEAR(counts[5], 2000 * 0.6225, 5 * 21.7);
  EXPECT_EQ(s.describe(), "top-k -> temperature -> draw");
}

TEST(Sampling, RepetitionPenaltyChangesTheArgmax) {
  SamplingParams p = greedy_params();
  p.repeat_penalty = 1.5f;
  p.repeat_last_n = 2;
  Sampler s(p);
  EXPECT_EQ(s.describe(), "repetition-penalty -> greedy");
  // Positive logits are divided: 2.0 / 1.5 = 1.33 < 1.9.
  const std::vector<float> positive = {2.0f, 1.9f, 0.0f};
  EXPECT_EQ(s.sample(positive.data(), 3), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(positive.data(), 3), 1);
  // Negative logits are multiplied: -0.5 * 1.5 = -0.75 < -0.6.
  s.reset();
  const std::vector<float> negative = {-0.5f, -0.6f, -3.0f};
  s.accept(0);
  EXPECT_EQ(s.sample(negative.data(), 3), 1);
  // Once 0 falls out of the last 2 ids it is no longer penalised.
  s.accept(2);
  s.accept(2);
  EXPECT_EQ(s.sample(negative.data(), 3), 0);
  // Repeats count once: 2.0 / 1.5 (not / 1.5^2) = 1.33 > 1.3.
  s.reset();
  s.accept(0);
  s.accept(0);
  const std::vector<float> close = {2.0f, 1.3f};
  EXPECT_EQ(s.sample(close.data(), 2), 0);
}

TEST(Sampling, RejectsBadParametersAndBadLogits) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplingParams{};
  p.min_p = -0.1f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplingParams{};
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplingParams{};
  p.repeat_last_n = -2;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplingParams{};
  p.temperature = NAN;
  EXPECT_THROW(Sampler{p}, Error);

  Sampler s{SamplingParams{}};
  const std::vector<float> nan_logits = {0.0f, NAN};
  EXPECT_THROW(s.sample(nan_logits.data(), 2), Error);
  const std::vector<float> all_masked = {-INFINITY, -INFINITY};
  EXPECT_THROW(s.sample(all_masked.data(), 2), Error);
  EXPECT_THROW(s.sample(nan_logits.data(), 0), Error);
  // Masked tokens are never drawn.
  const std::vector<float> masked = {-INFINITY, 0.0f, -INFINITY};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(masked.data(), 3), 1);
}
