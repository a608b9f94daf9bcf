// attention against a naive double reference: full score rows, exact softmax, causal by slot.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

struct Case {
  int n_head, n_kv_head, head_dim;
  int64_t T, kv_offset, S;
  float scale;
  float amplitude;  // of q and k: larger values make the softmax peaky
};

void check_attention(const Case& c, int threads) {
  ThreadPool pool(threads);
  const int64_t qw = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kvw = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  const auto qv = random_floats(static_cast<size_t>(c.T * qw), 21, -c.amplitude, c.amplitude);
  const auto kv = random_floats(static_cast<size_t>(c.T * kvw), 22, -c.amplitude, c.amplitude);
  const auto vv = random_floats(static_cast<size_t>(c.T * kvw), 23);
  // Rows before kv_offset hold an earlier step's keys; rows after the new ones are NaN, so
  // reading past the causal limit poisons the output.
  auto kc = random_floats(static_cast<size_t>(c.S * kvw), 24, -c.amplitude, c.amplitude);
  auto vc = random_floats(static_cast<size_t>(c.S * kvw), 25);
  for (int64_t i = (c.kv_offset + c.T) * kvw; i < c.S * kvw; ++i) {
    kc[static_cast<size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
    vc[static_cast<size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
  }
  for (int64_t i = 0; i < c.T * kvw; ++i) {  // where the new rows go: the kernel must write them
    kc[static_cast<size_t>(c.kv_offset * kvw + i)] = std::numeric_limits<float>::quiet_NaN();
    vc[static_cast<size_t>(c.kv_offset * kvw + i)] = std::numeric_limits<float>::quiet_NaN();
  }
  Tensor q = f32_tensor(Shape{c.T, qw}, qv, "q");
  Tensor k = f32_tensor(Shape{c.T, kvw}, kv, "k");
  Tensor v = f32_tensor(Shape{c.T, kvw}, vv, "v");
  Tensor k_cache = f32_tensor(Shape{c.S, kvw}, kc, "k_cache");
  Tensor v_cache = f32_tensor(Shape{c.S, kvw}, vc, "v_cache");
  Tensor out = Tensor::host(DType::F32, Shape{c.T, qw}, "out");
  AttentionParams p{c.n_head, c.n_kv_head, c.head_dim, c.scale, c.kv_offset};
  kernels::attention(q, k, v, k_cache, v_cache, p, out, pool);

  // The new rows landed in the caches; nothing else changed.
  const auto kc_after = values_of(k_cache);
  const auto vc_after = values_of(v_cache);
  for (int64_t i = 0; i < c.S * kvw; ++i) {
    const int64_t row = i / kvw;
    const bool is_new = row >= c.kv_offset && row < c.kv_offset + c.T;
    const float want_k = is_new ? kv[static_cast<size_t>(i - c.kv_offset * kvw)] : kc[static_cast<size_t>(i)];
    const float want_v = is_new ? vv[static_cast<size_t>(i - c.kv_offset * kvw)] : vc[static_cast<size_t>(i)];
    if (std::isnan(want_k)) {
      ASSERT_TRUE(std::isnan(kc_after[static_cast<size_t>(i)]));
    } else {
      ASSERT_EQ(kc_after[static_cast<size_t>(i)], want_k) << "key cache element " << i;
      ASSERT_EQ(vc_after[static_cast<size_t>(i)], want_v) << "value cache element " << i;
    }
  }

  const auto ov = values_of(out);
  const int group = c.n_head / c.n_kv_head;
  for (int64_t t = 0; t < c.T; ++t) {
    for (int h = 0; h < c.n_head; ++h) {
      const int64_t kv_col = static_cast<int64_t>(h / group) * c.head_dim;
      const int64_t n_keys = c.kv_offset + t + 1;
      std::vector<double> scores(static_cast<size_t>(n_keys));
      double max_score = -INFINITY;
      double max_abs_score_terms = 0.0;
      for (int64_t s = 0; s < n_keys; ++s) {
        double dot = 0.0;
        double terms = 0.0;
        for (int d = 0; d < c.head_dim; ++d) {
          const double prod = static_cast<double>(qv[static_cast<size_t>(t * qw + h * c.head_dim + d)]) *
                              kc_after[static_cast<size_t>(s * kvw + kv_col + d)];
          dot += prod;
          terms += std::fabs(prod);
        }
        scores[static_cast<size_t>(s)] = dot * c.scale;
        max_score = std::max(max_score, scores[static_cast<size_t>(s)]);
        max_abs_score_terms = std::max(max_abs_score_terms, terms * std::fabs(c.scale));
      }
      double denom = 0.0;
      for (double& s : scores) {
        s = std::exp(s - max_score);
        denom += s;
      }
      // f32 rounding perturbs each score by ~eps * sum|q_d k_d| * scale, which changes each
      // softmax weight by that much relative; the output (a convex mix of |v| <= 1) moves by at
      // most a few times that. 2e-6 (~30 eps) per unit of score magnitude, plus eps-level terms.
      const double tol = 2e-6 * (1.0 + max_abs_score_terms);
      for (int d = 0; d < c.head_dim; ++d) {
        double ref = 0.0;
        for (int64_t s = 0; s < n_keys; ++s) {
          ref += scores[static_cast<size_t>(s)] * vc_after[static_cast<size_t>(s * kvw + kv_col + d)];
        }
        ref /= denom;
        ASSERT_NEAR(ov[static_cast<size_t>(t * qw + h * c.head_dim + d)], ref, tol)
            << kernels::simd_level() << " heads " << c.n_head << "/" << c.n_kv_head << " hd " << c.head_dim << " T "
            << c.T << " offset " << c.kv_offset << " at t " << t << " h " << h << " d " << d;
      }
    }
  }
}

}  // namespace

TEST(Attention, MatchesNaiveReferenceAcrossShapesAndLevels) {
  SimdLevelGuard guard;
  const Case cases[] = {
      {4, 4, 16, 1, 0, 1, 0.25f, 1.0f},         // first token of a sequence
      {4, 4, 64, 5, 0, 9, 0.125f, 1.0f},        // prefill, MHA
      {8, 2, 64, 7, 13, 40, 0.125f, 1.0f},      // GQA, cache pre-filled
      {6, 1, 48, 3, 70, 80, 0.144f, 1.0f},      // MQA, odd head_dim, more keys than one tile
      {4, 2, 128, 1, 200, 260, 0.0884f, 1.0f},  // decode over several tiles
      {2, 2, 17, 9, 30, 45, 0.3f, 1.0f},        // head_dim not a multiple of any vector width
      {4, 2, 32, 4, 120, 130, 1.0f, 3.0f},      // peaky softmax: large scores
      {8, 1, 20, 2, 100, 110, 0.2f, 1.0f},      // MQA with 8 heads (two slices of 4), odd head_dim
  };
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (const Case& c : cases) check_attention(c, 2);
  }
  check_attention(cases[2], 1);
  check_attention(cases[3], 3);
}

TEST(Attention, ResultDoesNotDependOnThreads) {
  SimdLevelGuard guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    std::vector<std::vector<float>> outputs;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      const AttentionParams p{8, 2, 40, 0.15f, 70};
      const int64_t T = 5, S = 80;
      Tensor q = f32_tensor(Shape{T, 8 * 40}, random_floats(static_cast<size_t>(T * 8 * 40), 26), "q");
      Tensor k = f32_tensor(Shape{T, 2 * 40}, random_floats(static_cast<size_t>(T * 2 * 40), 27), "k");
      Tensor v = f32_tensor(Shape{T, 2 * 40}, random_floats(static_cast<size_t>(T * 2 * 40), 28), "v");
      Tensor kc = f32_tensor(Shape{S, 2 * 40}, random_floats(static_cast<size_t>(S * 2 * 40), 29), "kc");
      Tensor vc = f32_tensor(Shape{S, 2 * 40}, random_floats(static_cast<size_t>(S * 2 * 40), 30), "vc");
      Tensor out = Tensor::host(DType::F32, Shape{T, 8 * 40}, "out");
      kernels::attention(q, k, v, kc, vc, p, out, pool);
      outputs.push_back(values_of(out));
    }
    EXPECT_EQ(outputs[0], outputs[1]) << level;
    EXPECT_EQ(outputs[0], outputs[2]) << level;
  }
}

TEST(Attention, RejectsBadShapesAndCacheOverflow) {
  ThreadPool pool(1);
  Tensor q = Tensor::host(DType::F32, Shape{2, 64}, "q");
  Tensor k = Tensor::host(DType::F32, Shape{2, 32}, "k");
  Tensor v = Tensor::host(DType::F32, Shape{2, 32}, "v");
  Tensor kc = Tensor::host(DType::F32, Shape{4, 32}, "kc");
  Tensor vc = Tensor::host(DType::F32, Shape{4, 32}, "vc");
  Tensor out = Tensor::host(DType::F32, Shape{2, 64}, "out");
  AttentionParams p{4, 2, 16, 0.25f, 3};
  expect_error(ErrorKind::Usage, [&] { kernels::attention(q, k, v, kc, vc, p, out, pool); }, {"overflow", "kc"});
  p.kv_offset = 0;
  p.n_kv_head = 3;
  expect_error(ErrorKind::Usage, [&] { kernels::attention(q, k, v, kc, vc, p, out, pool); });
  p.n_kv_head = 2;
  Tensor k_bad = Tensor::host(DType::F32, Shape{2, 48}, "k_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::attention(q, k_bad, v, kc, vc, p, out, pool); }, {"k_bad"});
  Tensor vc_bad = Tensor::host(DType::F32, Shape{5, 32}, "vc_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::attention(q, k, v, kc, vc_bad, p, out, pool); }, {"vc_bad"});
}
