#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/simd.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

struct Case {
  DType dtype;
  int64_t M, K, N;
};

// Runs matmul at the given SIMD level and threads and checks every output against a double
// reference. Tolerance: f32 accumulation of K products has a relative error of about
// sqrt(K / lanes) * 6e-8 of sum |x_k w_k| (~1e-6 for K = 4097); 1e-5 leaves a 10x margin, while a
// single wrong or missing product moves the result by ~1/K of that sum (>= 2.4e-4 here).
void check_matmul(const Case& c, const std::string& level, int threads, bool with_bias) {
  kernels::set_simd_level(level);
  ThreadPool pool(threads);
  const auto xv = random_floats(static_cast<size_t>(c.M * c.K), 1);
  Tensor x = f32_tensor(Shape{c.M, c.K}, xv, "x");
  Tensor w = random_weight(c.dtype, c.N, c.K, 2);
  const auto bv = random_floats(static_cast<size_t>(c.N), 3);
  Tensor bias = f32_tensor(Shape{c.N}, bv, "bias");
  Tensor y = Tensor::host(DType::F32, Shape{c.M, c.N}, "y");
  kernels::matmul(x, w, with_bias ? &bias : nullptr, y, pool);
  const auto yv = values_of(y);
  const auto* wp = static_cast<const uint8_t*>(w.data());
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < c.N; ++n) {
      double ref = with_bias ? bv[static_cast<size_t>(n)] : 0.0;
      double magnitude = std::fabs(ref);
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = xv[static_cast<size_t>(m * c.K + k)] * ref_element(c.dtype, wp + n * w.row_bytes(), k);
        ref += p;
        magnitude += std::fabs(p);
      }
      const double got = yv[static_cast<size_t>(m * c.N + n)];
      ASSERT_NEAR(got, ref, 1e-5 * magnitude + 1e-30)
          << dtype_name(c.dtype) << " level " << level << " threads " << threads << " M " << c.M << " K " << c.K
          << " N " << c.N << " at (" << m << ", " << n << ")";
    }
  }
}

}  // namespace

TEST(Matmul, EveryDtypeLevelAndOddSizeMatchesReference) {
  for (const std::string& level : kernels::available_simd_levels()) {
    for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
      const bool quantized = dtype_traits(dtype).is_quantized;
      const std::vector<int64_t> ks =
          quantized ? std::vector<int64_t>{32, 64, 96, 4096} : std::vector<int64_t>{1, 31, 33, 100, 4097};
      for (int64_t K : ks) {
        for (int64_t M : {1, 3, 17}) {
          for (int64_t N : {1, 7, 65}) {
            if (K > 1000 && M * N > 65) continue;  // keep the suite fast; large K runs with few outputs
            check_matmul({dtype, M, K, N}, level, 2, (M + N) % 2 == 0);
          }
        }
      }
    }
  }
}
