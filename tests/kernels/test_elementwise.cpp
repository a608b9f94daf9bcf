// Norms, activations, softmax and the binary ops against double references.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

// Sizes below and above the parallel split, and not multiples of any vector width.
constexpr int64_t kRows[] = {1, 3, 17};
constexpr int64_t kWidths[] = {1, 7, 65, 4099};

void check_norm(bool layer, bool with_bias, int64_t rows, int64_t H) {
  ThreadPool pool(2);
  const auto xv = random_floats(static_cast<size_t>(rows * H), 41, -2.0f, 3.0f);  // non-zero mean
  const auto wv = random_floats(static_cast<size_t>(H), 42);
  const auto bv = random_floats(static_cast<size_t>(H), 43);
  Tensor x = f32_tensor(Shape{rows, H}, xv, "x");
  Tensor w = f32_tensor(Shape{H}, wv, "w");
  Tensor b = f32_tensor(Shape{H}, bv, "b");
  Tensor out = Tensor::host(DType::F32, Shape{rows, H}, "out");
  const float eps = 1e-5f;
  if (layer) {
    kernels::layer_norm(x, w, with_bias ? &b : nullptr, eps, out, pool);
  } else {
    kernels::rms_norm(x, w, eps, out, pool);
  }
  const auto got = values_of(out);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0;
    if (layer) {
      for (int64_t i = 0; i < H; ++i) mean += xv[static_cast<size_t>(r * H + i)];
      mean /= static_cast<double>(H);
    }
    double ss = 0.0;
    for (int64_t i = 0; i < H; ++i) ss += std::pow(xv[static_cast<size_t>(r * H + i)] - mean, 2);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(H) + eps);
    for (int64_t i = 0; i < H; ++i) {
      const double xi = xv[static_cast<size_t>(r * H + i)];
      const double wi = wv[static_cast<size_t>(i)];
      const double bi = with_bias ? bv[static_cast<size_t>(i)] : 0.0;
      const double ref = (xi - mean) * inv * wi + bi;
      // A handful of f32 roundings on terms of size (|x| + |mean|) * inv * |w| and |b|.
      const double tol = 1e-6 * ((std::fabs(xi) + std::fabs(mean)) * inv * std::fabs(wi) + std::fabs(bi)) + 1e-30;
      ASSERT_NEAR(got[static_cast<size_t>(r * H + i)], ref, tol)
          << (layer ? "layer_norm" : "rms_norm") << " bias " << with_bias << " rows " << rows << " H " << H;
    }
  }
}

// Runs a unary op over values from lo to hi (an evenly spaced sweep plus random values) and checks
// |got - ref| <= tol(x, ref) + 1e-30.
void check_unary(const char* what, const std::function<void(const Tensor&, Tensor&, ThreadPool&)>& op,
                 const std::function<double(double)>& ref, float lo, float hi,
                 const std::function<double(double, double)>& tol) {
  ThreadPool pool(2);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{65}, int64_t{40000}}) {
    auto xv = random_floats(static_cast<size_t>(n), 51, lo, hi);
    if (n == 40000) {
      for (int64_t i = 0; i < n / 2; ++i) {
        xv[static_cast<size_t>(i)] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n / 2);
      }
    }
    Tensor x = f32_tensor(Shape{n}, xv, "x");
    Tensor out = Tensor::host(DType::F32, Shape{n}, "out");
    op(x, out, pool);
    const auto got = values_of(out);
    for (size_t i = 0; i < got.size(); ++i) {
      const double r = ref(xv[i]);
      ASSERT_NEAR(got[i], r, tol(xv[i], r) + 1e-30)
          << what << " at x = " << xv[i] << " level " << kernels::simd_level();
    }
  }
}

}  // namespace

TEST(Norm, RmsAndLayerNormWithAndWithoutBiasMatchReference) {
  for (int64_t rows : kRows) {
    for (int64_t H : kWidths) {
      check_norm(false, false, rows, H);
      check_norm(true, false, rows, H);
      check_norm(true, true, rows, H);
    }
  }
}

TEST(Norm, Accepts16BitWeightsAndRejectsMismatches) {
  ThreadPool pool(1);
  const auto xv = random_floats(2 * 8, 44);
  Tensor x = f32_tensor(Shape{2, 8}, xv, "x");
  Tensor w16 = Tensor::host(DType::BF16, Shape{8}, "w16");
  for (int i = 0; i < 8; ++i) {
    const uint16_t h = f32_to_bf16(0.5f + 0.125f * static_cast<float>(i));
    std::memcpy(static_cast<uint8_t*>(w16.data()) + 2 * i, &h, 2);
  }
  Tensor out = Tensor::host(DType::F32, Shape{2, 8}, "out");
  kernels::rms_norm(x, w16, 1e-6f, out, pool);
  const auto got = values_of(out);
  double ss = 0.0;
  for (int i = 0; i < 8; ++i) ss += static_cast<double>(xv[static_cast<size_t>(i)]) * xv[static_cast<size_t>(i)];
  const double inv = 1.0 / std::sqrt(ss / 8 + 1e-6);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(got[static_cast<size_t>(i)], xv[static_cast<size_t>(i)] * inv * (0.5 + 0.125 * i), 1e-6);
  }
  Tensor w_bad = Tensor::host(DType::F32, Shape{7}, "w_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::rms_norm(x, w_bad, 1e-6f, out, pool); }, {"w_bad"});
  Tensor b_bad = Tensor::host(DType::F32, Shape{9}, "b_bad");
  Tensor w = f32_tensor(Shape{8}, random_floats(8, 45), "w");
  expect_error(ErrorKind::Shape, [&] { kernels::layer_norm(x, w, &b_bad, 1e-6f, out, pool); }, {"b_bad"});
  Tensor out_bad = Tensor::host(DType::F32, Shape{8, 2}, "out_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::rms_norm(x, w, 1e-6f, out_bad, pool); }, {"out_bad"});
}

TEST(Activation, SiluGeluAndGeluTanhMatchReference) {
  SimdLevelGuard guard;
  const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    // A few ulps of f32 exp/erfc, relative to the result (the kernels avoid the cancellation of
    // 1 + erf and 1 + tanh), plus the effect of rounding the f32 argument: erfc(-x/sqrt2) moves
    // by x^2 times a relative change of its argument, sigmoid(u) by |u| times it.
    const auto relative = [](double, double r) { return 1e-6 * std::fabs(r); };
    check_unary(
        "silu", kernels::silu, [](double x) { return x / (1.0 + std::exp(-x)); }, -90.0f, 90.0f, relative);
    check_unary(
        "gelu", kernels::gelu, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, -12.0f, 12.0f,
        [](double x, double r) { return 1e-6 * std::fabs(r) * (1.0 + x * x); });
    const auto gelu_tanh_arg = [&](double x) { return 2.0 * kSqrt2OverPi * (x + 0.044715 * x * x * x); };
    check_unary(
        "gelu_tanh", kernels::gelu_tanh,
        // 0.5 x (1 + tanh(u / 2)) written as x * sigmoid(u), which does not cancel in double either.
        [&](double x) { return x / (1.0 + std::exp(-gelu_tanh_arg(x))); }, -12.0f, 12.0f,
        [&](double x, double r) { return 1e-6 * std::fabs(r) * (1.0 + std::fabs(gelu_tanh_arg(x))); });
  }
}

TEST(Activation, GeluFormsDiffer) {
  // erf and tanh forms differ by up to ~5e-4 around |x| ~ 2: a kernel that used one for the
  // other would fail here even if a reference were wrong the same way.
  ThreadPool pool(1);
  Tensor x = f32_tensor(Shape{1}, {2.0f}, "x");
  Tensor a = Tensor::host(DType::F32, Shape{1}, "a");
  Tensor b = Tensor::host(DType::F32, Shape{1}, "b");
  kernels::gelu(x, a, pool);
  kernels::gelu_tanh(x, b, pool);
  EXPECT_NEAR(values_of(a)[0], 1.9544997, 1e-6);
  EXPECT_NEAR(values_of(b)[0], 1.9545977, 1e-6);
}

TEST(Elementwise, AddMulScaleSwigluMatchReference) {
  SimdLevelGuard guard;
  ThreadPool pool(2);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (int64_t rows : kRows) {
      for (int64_t F : kWidths) {
        const auto av = random_floats(static_cast<size_t>(rows * F), 61, -8.0f, 8.0f);
        const auto bv = random_floats(static_cast<size_t>(rows * F), 62, -8.0f, 8.0f);
        Tensor a = f32_tensor(Shape{rows, F}, av, "a");
        Tensor b = f32_tensor(Shape{rows, F}, bv, "b");
        Tensor sum = Tensor::host(DType::F32, Shape{rows, F}, "sum");
        Tensor prod = Tensor::host(DType::F32, Shape{rows, F}, "prod");
        Tensor scaled = Tensor::host(DType::F32, Shape{rows, F}, "scaled");
        Tensor glu = Tensor::host(DType::F32, Shape{rows, F}, "glu");
        kernels::add(a, b, sum, pool);
        kernels::mul(a, b, prod, pool);
        kernels::scale(a, -0.375f, scaled, pool);
        kernels::swiglu(a, b, glu, pool);
        // The fused form: per row, the gate's F values then the up's F values.
        std::vector<float> fused(static_cast<size_t>(rows * 2 * F));
        for (int64_t r = 0; r < rows; ++r) {
          std::copy_n(av.begin() + r * F, F, fused.begin() + r * 2 * F);
          std::copy_n(bv.begin() + r * F, F, fused.begin() + r * 2 * F + F);
        }
        Tensor glu_fused = Tensor::host(DType::F32, Shape{rows, F}, "glu_fused");
        kernels::swiglu_fused(f32_tensor(Shape{rows, 2 * F}, fused, "fused"), glu_fused, pool);
        const auto s = values_of(sum), p = values_of(prod), sc = values_of(scaled), g = values_of(glu),
                   gf = values_of(glu_fused);
        for (size_t i = 0; i < av.size(); ++i) {
          // add, mul and scale are single correctly rounded f32 operations: exact.
          ASSERT_EQ(s[i], av[i] + bv[i]);
          ASSERT_EQ(p[i], av[i] * bv[i]);
          ASSERT_EQ(sc[i], av[i] * -0.375f);
          const double ref = av[i] / (1.0 + std::exp(-static_cast<double>(av[i]))) * bv[i];
          ASSERT_NEAR(g[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << level;
          ASSERT_EQ(gf[i], g[i]) << "fused and separate swiglu must agree";
        }
      }
    }
  }
}

TEST(Elementwise, RejectsShapeMismatch) {
  ThreadPool pool(1);
  Tensor a = Tensor::host(DType::F32, Shape{2, 3}, "a");
  Tensor b = Tensor::host(DType::F32, Shape{3, 2}, "b_other");
  Tensor out = Tensor::host(DType::F32, Shape{2, 3}, "out");
  expect_error(ErrorKind::Shape, [&] { kernels::add(a, b, out, pool); }, {"b_other", "[3, 2]", "[2, 3]"});
  expect_error(ErrorKind::Shape, [&] { kernels::swiglu(a, b, out, pool); });
  Tensor odd = Tensor::host(DType::F32, Shape{2, 5}, "odd");
  expect_error(ErrorKind::Shape, [&] { kernels::swiglu_fused(odd, out, pool); }, {"odd"});
  Tensor half = Tensor::host(DType::F16, Shape{2, 3}, "half");
  expect_error(ErrorKind::Shape, [&] { kernels::silu(half, out, pool); }, {"half", "f16"});
}

TEST(Softmax, StableForLargeValuesAndMatchesReference) {
  SimdLevelGuard guard;
  ThreadPool pool(2);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (int64_t rows : kRows) {
      for (int64_t n : kWidths) {
        // Offsets of +1000 and -1000 overflow/underflow a naive exp in f32.
        for (float offset : {0.0f, 1000.0f, -1000.0f}) {
          const auto xv = random_floats(static_cast<size_t>(rows * n), 71, offset - 20.0f, offset + 20.0f);
          Tensor x = f32_tensor(Shape{rows, n}, xv, "x");
          Tensor out = Tensor::host(DType::F32, Shape{rows, n}, "out");
          kernels::softmax(x, out, pool);
          const auto got = values_of(out);
          for (int64_t r = 0; r < rows; ++r) {
            double max = -INFINITY;
            for (int64_t i = 0; i < n; ++i)
              max = std::max(max, static_cast<double>(xv[static_cast<size_t>(r * n + i)]));
            double denom = 0.0;
            for (int64_t i = 0; i < n; ++i) denom += std::exp(xv[static_cast<size_t>(r * n + i)] - max);
            double total = 0.0;
            for (int64_t i = 0; i < n; ++i) {
              const double ref = std::exp(xv[static_cast<size_t>(r * n + i)] - max) / denom;
              // f32 exp of an argument of size <= 40 (relative error ~ |arg| * eps) and one
              // division: 4e-6 relative covers |arg| * 6e-8 with margin.
              ASSERT_NEAR(got[static_cast<size_t>(r * n + i)], ref, 4e-6 * ref + 1e-30)
                  << level << " rows " << rows << " n " << n << " offset " << offset;
              total += got[static_cast<size_t>(r * n + i)];
            }
            ASSERT_NEAR(total, 1.0, 1e-5);
          }
        }
      }
    }
  }
}
