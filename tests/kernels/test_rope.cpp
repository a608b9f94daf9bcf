// RoPE against a direct evaluation of its definition in double.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/kernels/kernels.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

// Rotates the pairs of each head as the definition says; untouched dims stay as they are.
std::vector<double> ref_rope(const std::vector<float>& x, int64_t T, int64_t width, const std::vector<int32_t>& pos,
                             const RopeParams& p) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t head = 0; head < width / p.head_dim; ++head) {
      const int64_t base = t * width + head * p.head_dim;
      for (int i = 0; i < p.n_rot / 2; ++i) {
        const double angle = static_cast<double>(pos[static_cast<size_t>(t)]) * p.freq_scale *
                             std::pow(static_cast<double>(p.theta), -2.0 * i / p.n_rot);
        const int64_t a = p.style == RopeStyle::Adjacent ? base + 2 * i : base + i;
        const int64_t b = p.style == RopeStyle::Adjacent ? base + 2 * i + 1 : base + i + p.n_rot / 2;
        const double x0 = x[static_cast<size_t>(a)];
        const double x1 = x[static_cast<size_t>(b)];
        y[static_cast<size_t>(a)] = x0 * std::cos(angle) - x1 * std::sin(angle);
        y[static_cast<size_t>(b)] = x0 * std::sin(angle) + x1 * std::cos(angle);
      }
    }
  }
  return y;
}

void check_rope(const RopeParams& p, int64_t n_heads, const std::vector<int32_t>& pos, bool in_place) {
  ThreadPool pool(2);
  const auto T = static_cast<int64_t>(pos.size());
  const int64_t width = n_heads * p.head_dim;
  const auto xv = random_floats(static_cast<size_t>(T * width), 31);
  Tensor x = f32_tensor(Shape{T, width}, xv, "x");
  Tensor out = in_place ? x : Tensor::host(DType::F32, Shape{T, width}, "out");
  kernels::rope(x, i32_tensor(pos, "pos"), p, out, pool);
  const auto got = values_of(out);
  const auto want = ref_rope(xv, T, width, pos, p);
  for (size_t i = 0; i < got.size(); ++i) {
    // cos/sin rounded to f32 and two f32 products and a sum: a few ulps of |x0| + |x1| <= 2.
    ASSERT_NEAR(got[i], want[i], 1e-6) << "element " << i << " style " << static_cast<int>(p.style) << " n_rot "
                                       << p.n_rot << " in_place " << in_place;
    const int64_t d = static_cast<int64_t>(i) % p.head_dim;
    if (d >= p.n_rot) {
      ASSERT_EQ(got[i], xv[i]) << "dim " << d << " past n_rot must be untouched";
    }
  }
}

}  // namespace

TEST(Rope, BothStylesFullAndPartialRotary) {
  const std::vector<int32_t> positions{0, 1, 2, 7, 7, 100, 4095, 3};  // not 0..n-1, with a repeat
  for (RopeStyle style : {RopeStyle::Adjacent, RopeStyle::HalfSplit}) {
    for (bool in_place : {false, true}) {
      check_rope({64, 64, style, 10000.0f, 1.0f}, 3, positions, in_place);   // full rotary
      check_rope({128, 64, style, 10000.0f, 1.0f}, 2, positions, in_place);  // half rotary (GLM)
      check_rope({96, 32, style, 1e6f, 1.0f}, 2, positions, in_place);       // Qwen2 base
      check_rope({64, 64, style, 5e6f, 0.25f}, 2, positions, in_place);      // linear scaling
      check_rope({10, 6, style, 500.0f, 1.0f}, 5, positions, in_place);      // tiny odd sizes
      check_rope({16, 0, style, 10000.0f, 1.0f}, 1, positions, in_place);    // no rotation at all
    }
  }
}

TEST(Rope, StylesDifferAndPositionZeroIsIdentity) {
  // Guards against a reference that is wrong in the same way as the kernel: a pair layout that
  // ignored the style would make both outputs equal.
  ThreadPool pool(1);
  const auto xv = random_floats(2 * 8, 32);
  Tensor x = f32_tensor(Shape{2, 8}, xv, "x");
  Tensor a = Tensor::host(DType::F32, Shape{2, 8}, "a");
  Tensor b = Tensor::host(DType::F32, Shape{2, 8}, "b");
  kernels::rope(x, i32_tensor({0, 5}), {8, 8, RopeStyle::Adjacent, 10000.0f, 1.0f}, a, pool);
  kernels::rope(x, i32_tensor({0, 5}), {8, 8, RopeStyle::HalfSplit, 10000.0f, 1.0f}, b, pool);
  const auto av = values_of(a);
  const auto bv = values_of(b);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(av[static_cast<size_t>(i)], xv[static_cast<size_t>(i)]);
    EXPECT_EQ(bv[static_cast<size_t>(i)], xv[static_cast<size_t>(i)]);
  }
  EXPECT_NE(std::vector<float>(av.begin() + 8, av.end()), std::vector<float>(bv.begin() + 8, bv.end()));
  // Pair (0, 1) at position 5 with frequency 1 rotates by 5 radians.
  EXPECT_NEAR(av[8], xv[8] * std::cos(5.0) - xv[9] * std::sin(5.0), 1e-6);
  EXPECT_NEAR(bv[8], xv[8] * std::cos(5.0) - xv[12] * std::sin(5.0), 1e-6);
}

TEST(Rope, RejectsBadParameters) {
  ThreadPool pool(1);
  Tensor x = Tensor::host(DType::F32, Shape{2, 64}, "x");
  Tensor out = Tensor::host(DType::F32, Shape{2, 64}, "out");
  expect_error(ErrorKind::Usage, [&] { kernels::rope(x, i32_tensor({0, 1}), {32, 33, {}, 1e4f, 1.0f}, out, pool); });
  expect_error(ErrorKind::Usage, [&] { kernels::rope(x, i32_tensor({0, 1}), {32, 64, {}, 1e4f, 1.0f}, out, pool); });
  expect_error(ErrorKind::Shape, [&] { kernels::rope(x, i32_tensor({0, 1}), {48, 16, {}, 1e4f, 1.0f}, out, pool); });
  expect_error(ErrorKind::Shape,
               [&] {
                 kernels::rope(x, i32_tensor({0, 1, 2}, "pos3"), {32, 32, {}, 1e4f, 1.0f}, out, pool);
               },
               {"pos3"});
}

TEST(Rope, EachCallUsesItsOwnPositionsAndParameters) {
  // A decode step ropes q and k of every layer at the same positions, so the kernel keeps the
  // cos/sin of its last call; a call with other positions (same count), another theta, n_rot or
  // scaling must not see them.
  const RopeParams base{64, 64, RopeStyle::HalfSplit, 10000.0f, 1.0f};
  RopeParams other_theta = base;
  other_theta.theta = 500000.0f;
  RopeParams other_scale = base;
  other_scale.freq_scale = 0.5f;
  RopeParams partial = base;
  partial.n_rot = 32;
  for (int step = 0; step < 3; ++step) {
    for (const std::vector<int32_t>& pos : {std::vector<int32_t>{5}, std::vector<int32_t>{6}, std::vector<int32_t>{6},
                                            std::vector<int32_t>{5, 6}, std::vector<int32_t>{6, 5}}) {
      for (const RopeParams& p : {base, other_theta, base, other_scale, partial, base}) check_rope(p, 2, pos, false);
    }
  }
}
