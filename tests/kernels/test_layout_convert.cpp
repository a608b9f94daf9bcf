// concat / slice / copy (byte moves, any dtype) and to_f32 / from_f32 (GGUF's reference rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

}  // namespace

TEST(Convert, QuantizersMatchGgufReferenceBitForBit) {
  ThreadPool pool(2);
  auto xv = random_floats(32 * 64, 81, -3.0f, 3.0f);
  // Edge blocks: all zero; the largest magnitude negative; values on rounding boundaries; one
  // huge value among tiny ones.
  for (int j = 0; j < 32; ++j) xv[static_cast<size_t>(j)] = 0.0f;
  xv[32] = -5.0f;
  for (int j = 0; j < 32; ++j) xv[64 + static_cast<size_t>(j)] = static_cast<float>(j - 16) * 0.5f;
  for (int j = 0; j < 32; ++j) xv[96 + static_cast<size_t>(j)] = 1e-6f * static_cast<float>(j);
  xv[97] = 1000.0f;
  Tensor x = f32_tensor(Shape{64, 32}, xv, "x");
  for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
    Tensor q = Tensor::host(dtype, Shape{64, 32}, "q");
    kernels::from_f32(x, q, pool);
    EXPECT_EQ(bytes_of(q), ref_quantize(dtype, xv)) << dtype_name(dtype);
  }
  // Also across rows of 4096 (many blocks per row).
  const auto wide = random_floats(4096 * 3, 82);
  for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
    Tensor q = Tensor::host(dtype, Shape{3, 4096}, "q");
    kernels::from_f32(f32_tensor(Shape{3, 4096}, wide, "wide"), q, pool);
    EXPECT_EQ(bytes_of(q), ref_quantize(dtype, wide)) << dtype_name(dtype);
  }
}

TEST(Convert, RoundTripsAtEveryLevel) {
  SimdLevelGuard guard;
  ThreadPool pool(2);
  const int64_t rows = 5, cols = 4096;
  const auto xv = random_floats(static_cast<size_t>(rows * cols), 83, -4.0f, 4.0f);
  Tensor x = f32_tensor(Shape{rows, cols}, xv, "x");
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
      Tensor narrow = Tensor::host(dtype, Shape{rows, cols}, "narrow");
      kernels::from_f32(x, narrow, pool);
      Tensor back = Tensor::host(DType::F32, Shape{rows, cols}, "back");
      kernels::to_f32(narrow, back, pool);
      const auto bv = values_of(back);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* row = static_cast<const uint8_t*>(narrow.row(r));
        for (int64_t i = 0; i < cols; ++i) {
          const size_t at = static_cast<size_t>(r * cols + i);
          // Widening is exact: to_f32 must give the stored value itself.
          ASSERT_EQ(bv[at], ref_element(dtype, row, i)) << dtype_name(dtype) << " " << level;
          // Narrowing rounds to nearest: within half a step of the format.
          const float x0 = xv[at];
          double bound = 0.0;
          if (dtype == DType::F16) bound = std::ldexp(std::fabs(x0), -11);
          if (dtype == DType::BF16) bound = std::ldexp(std::fabs(x0), -8);
          if (dtype_traits(dtype).is_quantized) {
            // Half a quantization step d, plus the fp16 rounding of d times the largest |q|.
            uint16_t dh;
            std::memcpy(&dh, row + (i / 32) * (dtype == DType::Q8_0 ? 34 : 18), 2);
            const double d = std::fabs(f16_to_f32(dh));
            bound = dtype == DType::Q8_0 ? 0.5 * d + 127 * d * std::ldexp(1.0, -11)
                                         : 1.0 * d + 8 * d * std::ldexp(1.0, -11);
          }
          ASSERT_LE(std::fabs(bv[at] - x0), bound * 1.0001 + 1e-30) << dtype_name(dtype) << " x = " << x0;
        }
      }
    }
  }
  // f16/bf16 narrowing is exactly the core's round-to-nearest-even.
  Tensor h = Tensor::host(DType::F16, Shape{rows, cols}, "h");
  Tensor b = Tensor::host(DType::BF16, Shape{rows, cols}, "b");
  kernels::from_f32(x, h, pool);
  kernels::from_f32(x, b, pool);
  for (size_t i = 0; i < xv.size(); ++i) {
    uint16_t hv, bfv;
    std::memcpy(&hv, static_cast<uint8_t*>(h.data()) + 2 * i, 2);
    std::memcpy(&bfv, static_cast<uint8_t*>(b.data()) + 2 * i, 2);
    ASSERT_EQ(hv, f32_to_f16(xv[i]));
    ASSERT_EQ(bfv, f32_to_bf16(xv[i]));
  }
}

TEST(Convert, RejectsMismatchedShapes) {
  ThreadPool pool(1);
  Tensor x = Tensor::host(DType::F32, Shape{2, 32}, "x");
  Tensor q = Tensor::host(DType::Q8_0, Shape{2, 64}, "q_wide");
  expect_error(ErrorKind::Shape, [&] { kernels::from_f32(x, q, pool); }, {"q_wide"});
  Tensor ids = Tensor::host(DType::I32, Shape{2, 32}, "ids");
  expect_error(ErrorKind::Unsupported, [&] { kernels::from_f32(x, ids, pool); });
  Tensor out = Tensor::host(DType::F32, Shape{2, 16}, "out");
  expect_error(ErrorKind::Shape, [&] { kernels::to_f32(x, out, pool); }, {"out"});
}

TEST(Layout, ConcatAndSliceOnBothAxesAndDtypes) {
  ThreadPool pool(2);
  for (DType dtype : {DType::F32, DType::BF16, DType::Q8_0}) {
    const int64_t cols_a = 64, cols_b = 32, rows_a = 3, rows_b = 5;
    // Axis 0: rows of a then rows of b.
    Tensor a = random_weight(dtype, rows_a, cols_a, 91);
    Tensor b = random_weight(dtype, rows_b, cols_a, 92);
    Tensor ab = Tensor::host(dtype, Shape{rows_a + rows_b, cols_a}, "ab");
    kernels::concat({&a, &b}, 0, ab, pool);
    for (int64_t r = 0; r < rows_a + rows_b; ++r) {
      const Tensor& src = r < rows_a ? a : b;
      const int64_t sr = r < rows_a ? r : r - rows_a;
      ASSERT_EQ(std::memcmp(ab.row(r), src.row(sr), ab.row_bytes()), 0) << dtype_name(dtype) << " row " << r;
    }
    // Axis 1: each row is a's row then c's row.
    Tensor c = random_weight(dtype, rows_a, cols_b, 93);
    Tensor ac = Tensor::host(dtype, Shape{rows_a, cols_a + cols_b}, "ac");
    kernels::concat({&a, &c}, 1, ac, pool);
    for (int64_t r = 0; r < rows_a; ++r) {
      const auto* row = static_cast<const uint8_t*>(ac.row(r));
      for (int64_t i = 0; i < cols_a + cols_b; ++i) {
        const double want = i < cols_a ? ref_element(dtype, static_cast<const uint8_t*>(a.row(r)), i)
                                       : ref_element(dtype, static_cast<const uint8_t*>(c.row(r)), i - cols_a);
        ASSERT_EQ(ref_element(dtype, row, i), want) << dtype_name(dtype) << " (" << r << ", " << i << ")";
      }
    }
    // Slices undo the concatenations.
    Tensor back_c = Tensor::host(dtype, Shape{rows_a, cols_b}, "back_c");
    kernels::slice(ac, 1, cols_a, cols_b, back_c, pool);
    EXPECT_EQ(bytes_of(back_c), bytes_of(c)) << dtype_name(dtype);
    Tensor back_b = Tensor::host(dtype, Shape{rows_b, cols_a}, "back_b");
    kernels::slice(ab, 0, rows_a, rows_b, back_b, pool);
    EXPECT_EQ(bytes_of(back_b), bytes_of(b)) << dtype_name(dtype);
    Tensor copy = Tensor::host(dtype, Shape{rows_a, cols_a}, "copy");
    kernels::copy(a, copy, pool);
    EXPECT_EQ(bytes_of(copy), bytes_of(a));
  }
  // A 3-d f32 concat in the middle axis and an odd slice.
  const auto xv = random_floats(2 * 3 * 5, 94);
  const auto yv = random_floats(2 * 4 * 5, 95);
  Tensor x = f32_tensor(Shape{2, 3, 5}, xv, "x");
  Tensor y = f32_tensor(Shape{2, 4, 5}, yv, "y");
  Tensor xy = Tensor::host(DType::F32, Shape{2, 7, 5}, "xy");
  kernels::concat({&x, &y}, 1, xy, pool);
  const auto got = values_of(xy);
  for (int o = 0; o < 2; ++o) {
    for (int m = 0; m < 7; ++m) {
      for (int i = 0; i < 5; ++i) {
        const float want =
            m < 3 ? xv[static_cast<size_t>((o * 3 + m) * 5 + i)] : yv[static_cast<size_t>((o * 4 + m - 3) * 5 + i)];
        ASSERT_EQ(got[static_cast<size_t>((o * 7 + m) * 5 + i)], want);
      }
    }
  }
  Tensor s = Tensor::host(DType::F32, Shape{2, 7, 3}, "s");
  kernels::slice(xy, 2, 1, 3, s, pool);
  const auto sv = values_of(s);
  for (int r = 0; r < 14; ++r) {
    for (int i = 0; i < 3; ++i) ASSERT_EQ(sv[static_cast<size_t>(r * 3 + i)], got[static_cast<size_t>(r * 5 + i + 1)]);
  }
}

TEST(Layout, RejectsMismatches) {
  ThreadPool pool(1);
  Tensor a = Tensor::host(DType::F32, Shape{2, 4}, "a");
  Tensor b = Tensor::host(DType::F32, Shape{3, 5}, "b_odd");
  Tensor out = Tensor::host(DType::F32, Shape{5, 4}, "out");
  expect_error(ErrorKind::Shape, [&] { kernels::concat({&a, &b}, 0, out, pool); }, {"b_odd"});
  Tensor out_short = Tensor::host(DType::F32, Shape{4, 4}, "out_short");
  expect_error(ErrorKind::Shape, [&] { kernels::concat({&a, &a, &a}, 0, out_short, pool); }, {"out_short"});
  expect_error(ErrorKind::Usage, [&] { kernels::concat({&a}, 2, out, pool); });
  Tensor s = Tensor::host(DType::F32, Shape{2, 3}, "s");
  expect_error(ErrorKind::Usage, [&] { kernels::slice(a, 1, 2, 3, s, pool); }, {"out of range"});
  Tensor q = Tensor::host(DType::Q8_0, Shape{2, 64}, "q");
  Tensor qs = Tensor::host(DType::Q8_0, Shape{2, 32}, "qs");
  expect_error(ErrorKind::Shape, [&] { kernels::slice(q, 1, 16, 32, qs, pool); }, {"q8_0", "32"});
  Tensor bf = Tensor::host(DType::BF16, Shape{2, 4}, "bf");
  expect_error(ErrorKind::Shape, [&] { kernels::copy(a, bf, pool); }, {"bf"});
}
