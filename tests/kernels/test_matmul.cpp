// matmul and embedding against double references, at every SIMD level this machine has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "common/q8_activations_guard.h"
#include "core/device.h"
#include "core/error.h"
#include "core/half.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

constexpr DType kWeightTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

struct Case {
  DType dtype;
  int64_t M, K, N;
  bool bias;
};

constexpr kernels::Q8Activations kQ8Modes[] = {kernels::Q8Activations::F32, kernels::Q8Activations::Q8_0};

const char* mode_name(kernels::Q8Activations mode) {
  return mode == kernels::Q8Activations::F32 ? "f32 activations" : "q8_0 activations";
}

// The x a matmul with weights of `dtype` multiplies: x itself, except in Q8Activations::Q8_0 mode,
// where q8_0 and q4_0 weights meet x rounded to q8_0 blocks (GGUF's reference quantizer) and bf16
// weights meet x rounded to bf16 (core/half.h).
std::vector<double> effective_x(DType dtype, const std::vector<float>& xv, int64_t M, int64_t K) {
  if (dtype == DType::BF16 && kernels::q8_0_activations() == kernels::Q8Activations::Q8_0) {
    std::vector<double> out;
    for (float v : xv) out.push_back(bf16_to_f32(f32_to_bf16(v)));
    return out;
  }
  const bool quantized = dtype == DType::Q8_0 || dtype == DType::Q4_0;
  if (!quantized || kernels::q8_0_activations() != kernels::Q8Activations::Q8_0) {
    return std::vector<double>(xv.begin(), xv.end());
  }
  std::vector<double> out;
  for (int64_t m = 0; m < M; ++m) {
    const std::vector<float> row(xv.begin() + m * K, xv.begin() + (m + 1) * K);
    const std::vector<uint8_t> q = ref_quantize(DType::Q8_0, row);
    for (int64_t k = 0; k < K; ++k) out.push_back(ref_element(DType::Q8_0, q.data(), k));
  }
  return out;
}

// Runs matmul and checks every output against a double reference. Tolerance: f32 accumulation of
// K products spread over SIMD lanes has a relative error of about sqrt(K) * 6e-8 of
// sum |x_k w_k| (~4e-6 for K = 4097 in the worst case of one lane); 1e-5 of that sum leaves
// margin, while one wrong or missing product moves the result by ~1/K of it (>= 2.4e-4 for the
// K <= 4097 cases). Quantized and 16-bit weights decode exactly to f32, q8_0 / q4_0 block
// products against x rounded to q8_0 are exact integers scaled twice and summed in f32 over K / 32
// blocks, and bf16 products against x rounded to bf16 are exact in f32, so the same bound holds
// for every dtype, level and mode.
void check_matmul(const Case& c, int threads) {
  ThreadPool pool(threads);
  const auto xv = random_floats(static_cast<size_t>(c.M * c.K), 1);
  Tensor x = f32_tensor(Shape{c.M, c.K}, xv, "x");
  Tensor w = random_weight(c.dtype, c.N, c.K, 2);
  const auto bv = random_floats(static_cast<size_t>(c.N), 3);
  Tensor bias = f32_tensor(Shape{c.N}, bv, "bias");
  Tensor y = Tensor::host(DType::F32, Shape{c.M, c.N}, "y");
  kernels::matmul(x, w, c.bias ? &bias : nullptr, y, pool);
  const auto yv = values_of(y);
  const auto* wp = static_cast<const uint8_t*>(w.data());
  const std::vector<double> xe = effective_x(c.dtype, xv, c.M, c.K);
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < c.N; ++n) {
      double ref = c.bias ? bv[static_cast<size_t>(n)] : 0.0;
      double magnitude = std::fabs(ref);
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = xe[static_cast<size_t>(m * c.K + k)] * ref_element(c.dtype, wp + n * w.row_bytes(), k);
        ref += p;
        magnitude += std::fabs(p);
      }
      const double got = yv[static_cast<size_t>(m * c.N + n)];
      ASSERT_NEAR(got, ref, 1e-5 * magnitude + 1e-30)
          << dtype_name(c.dtype) << " level " << kernels::simd_level() << " " << mode_name(kernels::q8_0_activations())
          << " threads " << threads << " M " << c.M << " K " << c.K << " N " << c.N << " at (" << m << ", " << n << ")";
    }
  }
}

std::vector<float> run_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, int threads) {
  ThreadPool pool(threads);
  Shape out = x.shape();
  out[out.rank - 1] = w.dim(0);
  Tensor y = Tensor::host(DType::F32, out, "y");
  kernels::matmul(x, w, bias, y, pool);
  return values_of(y);
}

}  // namespace

TEST(Matmul, EveryDtypeLevelAndOddSizeMatchesReference) {
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : kWeightTypes) {
      for (kernels::Q8Activations mode : kQ8Modes) {
        kernels::set_q8_0_activations(mode);
        const bool quantized = dtype_traits(dtype).is_quantized;
        const std::vector<int64_t> ks =
            quantized ? std::vector<int64_t>{32, 64, 96, 4096} : std::vector<int64_t>{1, 31, 33, 100, 4097};
        for (int64_t K : ks) {
          for (int64_t M : {1, 3, 17}) {
            for (int64_t N : {1, 7, 65}) {
              if (K > 1000 && M * N > 65) continue;  // large K with few outputs keeps the suite fast
              check_matmul({dtype, M, K, N, (M + N) % 2 == 0}, 2);
            }
          }
        }
      }
    }
  }
}

TEST(Matmul, LargerTilesAndOneThreadMatchReference) {
  // Sizes past any register tile in both directions, prefill-like M; decode (M = 1) over enough
  // rows that every thread's share splits into its 8 streams, with a remainder.
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : kWeightTypes) {
      for (kernels::Q8Activations mode : kQ8Modes) {
        kernels::set_q8_0_activations(mode);
        check_matmul({dtype, 37, 160, 45, true}, 1);
        check_matmul({dtype, 9, 512, 130, false}, 3);
        check_matmul({dtype, 1, 256, 301, true}, 1);
        check_matmul({dtype, 1, 96, 1037, false}, 2);
      }
    }
  }
}

TEST(Matmul, LongRowsRoundedInSlabsMatchReference) {
  // Rows rounded to q8_0 go in slabs of kRoundedRowsSlabBytes of quants: 32 rows at this K, so 37
  // rows take two (a misplaced slab moves whole rows; this K is too long to see one product).
  constexpr int64_t K = kernels::kRoundedRowsSlabBytes / 32;
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard(kernels::Q8Activations::Q8_0);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : {DType::Q8_0, DType::Q4_0}) check_matmul({dtype, 37, K, 2, true}, 2);
  }
}

TEST(Matmul, ResultDoesNotDependOnThreadsOrBatchRows) {
  // Each output is accumulated in one fixed order: bit-identical for 1, 2, 3 threads, and the
  // rows of an M=17 batch equal the same rows computed alone (decode vs prefill), also where the
  // batch's rows are rounded to q8_0 in slabs (of 16 rows at K = kRoundedRowsSlabBytes / 16). A
  // level whose small batches take other loops (Isa::small_batch_rows: amx) keeps that within each
  // side of its bound; across it, rows agree to the reference tolerance (check_matmul's bound).
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    const int64_t small = kernels::cpu::active_isa().small_batch_rows;
    // Rows from row `first` of batches of m_a and m_b rows: equal bit for bit on the same side of
    // `small`; across it, within check_matmul's bound, 1e-5 of sum |x_k w_k| (`magnitude`, per
    // row and output).
    std::vector<double> magnitude;
    int64_t outputs = 0;
    const auto expect_same = [&](const std::vector<float>& a, int64_t m_a, const std::vector<float>& b, int64_t m_b,
                                 int64_t first, const std::string& what) {
      if ((m_a <= small) == (m_b <= small)) {
        EXPECT_EQ(a, b) << what;
        return;
      }
      ASSERT_EQ(a.size(), b.size()) << what;
      for (size_t i = 0; i < a.size(); ++i) {
        const double bound = 1e-5 * magnitude[static_cast<size_t>(first * outputs) + i];
        EXPECT_NEAR(a[i], b[i], bound) << what << " element " << i;
      }
    };
    for (DType dtype : kWeightTypes) {
      for (kernels::Q8Activations mode : kQ8Modes) {
        for (auto [K, N] : {std::pair<int64_t, int64_t>{256, 67}, {kernels::kRoundedRowsSlabBytes / 16, 2}}) {
          const bool slabs = dtype_traits(dtype).is_quantized && mode == kernels::Q8Activations::Q8_0;
          if (K > 256 && !slabs) continue;
          kernels::set_q8_0_activations(mode);
          const int64_t M = 17;
          const auto xv = random_floats(static_cast<size_t>(M * K), 5);
          Tensor x = f32_tensor(Shape{M, K}, xv, "x");
          Tensor w = random_weight(dtype, N, K, 6);
          if (small > 0) {
            const std::vector<double> xe = effective_x(dtype, xv, M, K);
            const auto* wp = static_cast<const uint8_t*>(w.data());
            outputs = N;
            magnitude.assign(static_cast<size_t>(M * N), 0.0);
            for (int64_t m = 0; m < M; ++m) {
              for (int64_t n = 0; n < N; ++n) {
                for (int64_t k = 0; k < K; ++k) {
                  magnitude[static_cast<size_t>(m * N + n)] +=
                      std::fabs(xe[static_cast<size_t>(m * K + k)] * ref_element(dtype, wp + n * w.row_bytes(), k));
                }
              }
            }
          }
          const auto one = run_matmul(x, w, nullptr, 1);
          EXPECT_EQ(one, run_matmul(x, w, nullptr, 2)) << dtype_name(dtype) << " " << level;
          EXPECT_EQ(one, run_matmul(x, w, nullptr, 3)) << dtype_name(dtype) << " " << level;
          const std::string where =
              std::string(dtype_name(dtype)) + " " + level + " " + mode_name(mode) + " K " + std::to_string(K);
          // The batch with rows appended: its first rows are the same bits, also where the extra
          // rows change how the rows fall into slabs (at K = kRoundedRowsSlabBytes / 16, the last
          // slab of 1 row becomes one of 5).
          {
            std::vector<float> longer = xv;
            const auto extra = random_floats(static_cast<size_t>(4 * K), 55);
            longer.insert(longer.end(), extra.begin(), extra.end());
            const auto more = run_matmul(f32_tensor(Shape{M + 4, K}, longer, "x21"), w, nullptr, 2);
            EXPECT_EQ(std::vector<float>(more.begin(), more.begin() + M * N), one) << where << " rows of " << M + 4;
          }
          std::vector<float> row0_alone;
          for (int64_t m : {0, 5, 16}) {
            const std::vector<float> row(xv.begin() + m * K, xv.begin() + (m + 1) * K);
            const auto alone = run_matmul(f32_tensor(Shape{1, K}, row, "x1"), w, nullptr, 2);
            if (m == 0) row0_alone = alone;
            const std::vector<float> in_batch(one.begin() + m * N, one.begin() + (m + 1) * N);
            expect_same(alone, 1, in_batch, M, m, where + " row " + std::to_string(m));
          }
          // Small batches: rows 0..rows-1 against the M=17 batch, and row 0 against row 0 alone.
          for (int64_t rows : {2, 4, 5}) {
            const std::vector<float> first(xv.begin(), xv.begin() + rows * K);
            const auto batch = run_matmul(f32_tensor(Shape{rows, K}, first, "xr"), w, nullptr, 1);
            const std::string what = where + " first " + std::to_string(rows) + " rows";
            expect_same(batch, rows, std::vector<float>(one.begin(), one.begin() + rows * N), M, 0, what);
            expect_same(std::vector<float>(batch.begin(), batch.begin() + N), rows, row0_alone, 1, 0, what + ", row 0");
          }
        }
      }
    }
  }
}

// Software prefetch in decode's gemv is a speed choice per CPU: it must never change a result.
TEST(Matmul, GemvPrefetchOnOrOffGivesIdenticalResults) {
  SimdLevelGuard guard;
  const kernels::GemvPrefetch saved = kernels::gemv_prefetch();
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : kWeightTypes) {
      // Long enough for prefetched rows: 8 streams of several rows each.
      const int64_t K = 96, N = 8 * 7 + 3;
      Tensor x = f32_tensor(Shape{1, K}, random_floats(static_cast<size_t>(K), 12), "x");
      Tensor w = random_weight(dtype, N, K, 13);
      kernels::set_gemv_prefetch(kernels::GemvPrefetch::On);
      const auto on = run_matmul(x, w, nullptr, 2);
      kernels::set_gemv_prefetch(kernels::GemvPrefetch::Off);
      const auto off = run_matmul(x, w, nullptr, 2);
      EXPECT_EQ(on, off) << dtype_name(dtype) << " " << level;
    }
  }
  kernels::set_gemv_prefetch(saved);
}

TEST(Matmul, Q8ActivationsChangeOnlyQuantizedAndBf16Weights) {
  // The mode rounds x only against q8_0, q4_0 and bf16 weights; there it changes the result by
  // about the rounding of x (so the mode is really applied), elsewhere not at all.
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : kWeightTypes) {
      const int64_t M = 3, K = 128, N = 19;
      Tensor x = f32_tensor(Shape{M, K}, random_floats(static_cast<size_t>(M * K), 8), "x");
      Tensor w = random_weight(dtype, N, K, 9);
      kernels::set_q8_0_activations(kernels::Q8Activations::F32);
      const auto f32 = run_matmul(x, w, nullptr, 2);
      kernels::set_q8_0_activations(kernels::Q8Activations::Q8_0);
      const auto q8 = run_matmul(x, w, nullptr, 2);
      if (dtype == DType::Q8_0 || dtype == DType::Q4_0 || dtype == DType::BF16) {
        EXPECT_NE(f32, q8) << dtype_name(dtype) << " " << level;
      } else {
        EXPECT_EQ(f32, q8) << dtype_name(dtype) << " " << level;
      }
    }
  }
}

TEST(Matmul, AcceptsLeadingDimsAndA16BitBias) {
  ThreadPool pool(2);
  const int64_t K = 64, N = 5;
  const auto xv = random_floats(2 * 3 * K, 7);
  Tensor x = f32_tensor(Shape{2, 3, K}, xv, "x");
  Tensor w = random_weight(DType::F32, N, K, 8);
  Tensor bias = Tensor::host(DType::BF16, Shape{N}, "bias");
  std::vector<float> bias_values(N);
  for (int64_t n = 0; n < N; ++n) {
    const uint16_t b = f32_to_bf16(0.25f * static_cast<float>(n) - 0.5f);
    std::memcpy(static_cast<uint8_t*>(bias.data()) + 2 * n, &b, 2);
    bias_values[static_cast<size_t>(n)] = bf16_to_f32(b);
  }
  Tensor y = Tensor::host(DType::F32, Shape{2, 3, N}, "y");
  kernels::matmul(x, w, &bias, y, pool);
  const auto yv = values_of(y);
  const auto* wp = w.data_as<const float>();
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      double ref = bias_values[static_cast<size_t>(n)];
      double magnitude = std::fabs(ref);
      for (int64_t k = 0; k < K; ++k) {
        ref += static_cast<double>(xv[static_cast<size_t>(r * K + k)]) * wp[n * K + k];
        magnitude += std::fabs(static_cast<double>(xv[static_cast<size_t>(r * K + k)]) * wp[n * K + k]);
      }
      EXPECT_NEAR(yv[static_cast<size_t>(r * N + n)], ref, 1e-5 * magnitude);
    }
  }
}

TEST(Matmul, RejectsMismatchedShapesAndTypes) {
  ThreadPool pool(1);
  Tensor x = Tensor::host(DType::F32, Shape{2, 64}, "x");
  Tensor w = Tensor::host(DType::F32, Shape{8, 32}, "w_small");
  Tensor y = Tensor::host(DType::F32, Shape{2, 8}, "y");
  expect_error(ErrorKind::Shape, [&] { kernels::matmul(x, w, nullptr, y, pool); }, {"x", "w_small", "32"});
  Tensor w_ok = Tensor::host(DType::F32, Shape{8, 64}, "w");
  Tensor y_bad = Tensor::host(DType::F32, Shape{2, 9}, "y_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::matmul(x, w_ok, nullptr, y_bad, pool); }, {"y_bad", "[2, 8]"});
  Tensor bias_bad = Tensor::host(DType::F32, Shape{7}, "bias_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::matmul(x, w_ok, &bias_bad, y, pool); }, {"bias_bad"});
  Tensor w_i32 = Tensor::host(DType::I32, Shape{8, 64}, "w_i32");
  expect_error(ErrorKind::Unsupported, [&] { kernels::matmul(x, w_i32, nullptr, y, pool); }, {"w_i32", "i32"});
  Tensor square = Tensor::host(DType::F32, Shape{64, 64}, "square");
  Tensor in_place = Tensor::host(DType::F32, Shape{2, 64}, "in_place");
  expect_error(ErrorKind::Usage, [&] { kernels::matmul(in_place, square, nullptr, in_place, pool); }, {"overlaps"});
  Tensor x_f16 = Tensor::host(DType::F16, Shape{2, 64}, "x_f16");
  expect_error(ErrorKind::Shape, [&] { kernels::matmul(x_f16, w_ok, nullptr, y, pool); }, {"x_f16", "f16"});
}

TEST(Matmul, RejectsTensorsOnTwoDevices) {
  cpu::CpuDevice dev0(DeviceId{DeviceType::Cpu, 0}, Allocator::kUnlimited, 1);
  cpu::CpuDevice dev1(DeviceId{DeviceType::Cpu, 1}, Allocator::kUnlimited, 1);
  Tensor x = Tensor::empty(dev0, DType::F32, Shape{1, 32}, "x");
  Tensor w = Tensor::empty(dev1, DType::F32, Shape{4, 32}, "w");
  Tensor y = Tensor::empty(dev0, DType::F32, Shape{1, 4}, "y");
  expect_error(ErrorKind::DeviceMismatch, [&] { kernels::matmul(x, w, nullptr, y, dev0.pool()); },
               {"cpu:0", "cpu:1", "'w'"});
}

TEST(Embedding, EveryDtypeAndLevelDecodesRowsExactly) {
  // Every supported dtype widens to f32 exactly (f16/bf16 are subsets of f32; d * q of an fp16
  // scale and a small integer has at most 19 significant bits), so the match must be exact.
  SimdLevelGuard guard;
  ThreadPool pool(2);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType dtype : kWeightTypes) {
      for (int64_t H : {32, 96, 4096}) {
        const int64_t V = 11;
        Tensor table = random_weight(dtype, V, H, 9);
        const std::vector<int32_t> ids{3, 0, 10, 3, 7};
        Tensor out = Tensor::host(DType::F32, Shape{5, H}, "out");
        kernels::embedding(table, i32_tensor(ids), out, pool);
        const auto ov = values_of(out);
        for (size_t t = 0; t < ids.size(); ++t) {
          const auto* row = static_cast<const uint8_t*>(table.row(ids[t]));
          for (int64_t h = 0; h < H; ++h) {
            ASSERT_EQ(ov[t * static_cast<size_t>(H) + static_cast<size_t>(h)], ref_element(dtype, row, h))
                << dtype_name(dtype) << " " << level << " token " << t << " dim " << h;
          }
        }
      }
    }
  }
  // Odd widths for the plain types.
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    Tensor table = random_weight(dtype, 4, 37, 10);
    Tensor out = Tensor::host(DType::F32, Shape{2, 37}, "out");
    kernels::embedding(table, i32_tensor({1, 2}), out, pool);
    const auto ov = values_of(out);
    for (int64_t h = 0; h < 37; ++h) {
      EXPECT_EQ(ov[static_cast<size_t>(37 + h)], ref_element(dtype, static_cast<const uint8_t*>(table.row(2)), h));
    }
  }
}

TEST(Embedding, IdOutOfRangeIsAUsageErrorNamingIdAndVocabulary) {
  ThreadPool pool(1);
  Tensor table = random_weight(DType::F32, 10, 8, 11);
  table.set_name("tok_embeddings");
  Tensor out = Tensor::host(DType::F32, Shape{2, 8}, "out");
  expect_error(ErrorKind::Usage,
               [&] {
                 kernels::embedding(table, i32_tensor({1, 10}), out, pool);
               },
               {"10", "[0, 10)", "tok_embeddings"});
  expect_error(ErrorKind::Usage, [&] { kernels::embedding(table, i32_tensor({-1, 0}), out, pool); }, {"-1"});
  Tensor out_bad = Tensor::host(DType::F32, Shape{2, 9}, "out_bad");
  expect_error(ErrorKind::Shape, [&] { kernels::embedding(table, i32_tensor({1, 2}), out_bad, pool); }, {"out_bad"});
}

TEST(Matmul, Q8ActivationRoundingIsGgufsAtEveryLevel) {
  // The rounding of x for q8_0 weights, per level, against GGUF's reference quantizer: blocks with
  // exact ties (step 1: x = k + 0.5 must round away from zero, where a vector round goes to even),
  // an all-zero block, a block of one huge value, random blocks. Non-finite blocks (the reference
  // leaves them undefined) must match the scalar level.
  SimdLevelGuard guard;
  std::vector<float> x = random_floats(32 * 6, 91, -2.0f, 2.0f);
  for (int j = 0; j < 32; ++j) {
    x[static_cast<size_t>(j)] = static_cast<float>(j % 2 == 0 ? j : -j) + (j < 31 ? 0.5f : 0.0f);
  }
  x[31] = 127.0f;  // sets the step to exactly 1
  for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;
  x[64] = -3.0e4f;
  const std::vector<uint8_t> want = ref_quantize(DType::Q8_0, x);
  std::vector<float> odd = random_floats(32 * 3, 92);
  odd[3] = NAN;
  odd[40] = INFINITY;
  odd[70] = -INFINITY;
  odd[71] = NAN;
  std::vector<int8_t> odd_scalar(odd.size()), q(x.size()), odd_q(odd.size());
  std::vector<float> odd_scalar_scale(3), scale(x.size() / 32), odd_scale(3);
  kernels::set_simd_level("scalar");
  kernels::cpu::active_isa().quantize_row_q8_0(odd.data(), 96, odd_scalar.data(), odd_scalar_scale.data());
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    const kernels::cpu::Isa& isa = kernels::cpu::active_isa();
    isa.quantize_row_q8_0(x.data(), static_cast<int64_t>(x.size()), q.data(), scale.data());
    for (size_t b = 0; b < x.size() / 32; ++b) {
      uint16_t d;
      std::memcpy(&d, want.data() + b * 34, 2);
      EXPECT_EQ(scale[b], f16_to_f32(d)) << level << " block " << b;
      for (size_t j = 0; j < 32; ++j) {
        ASSERT_EQ(q[b * 32 + j], static_cast<int8_t>(want[b * 34 + 2 + j]))
            << level << " block " << b << " x " << x[b * 32 + j];
      }
    }
    isa.quantize_row_q8_0(odd.data(), 96, odd_q.data(), odd_scale.data());
    EXPECT_EQ(odd_q, odd_scalar) << level;
    for (size_t b = 0; b < 3; ++b) {
      EXPECT_TRUE(odd_scale[b] == odd_scalar_scale[b] || (std::isnan(odd_scale[b]) && std::isnan(odd_scalar_scale[b])))
          << level << " block " << b;
    }
  }
}

TEST(Matmul, Bf16ActivationRoundingIsHalfHsAtEveryLevelThatRounds) {
  // A level with BF16 dot products rounds x to bf16 in its own loop (the others in matmul.cpp with
  // core/half.h itself): bit for bit core/half.h f32_to_bf16
  // (llama.cpp's rounding): ties to even both ways, values that round up into the next binade or
  // to infinity, NaNs (kept NaN, made quiet), infinities, subnormals, signed zeros; every length
  // up to two vectors and a tail.
  SimdLevelGuard guard;
  const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f80ffffu, 0x3fffffffu, 0x7f7fffffu,
                               0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa00000u,
                               0x00000001u, 0x00008000u, 0x00018000u, 0x807fffffu, 0x00000000u, 0x80000000u};
  std::vector<float> x = random_floats(40, 93, -3.0f, 3.0f);
  for (size_t i = 0; i < std::size(patterns); ++i) std::memcpy(&x[i * 2 + 1], &patterns[i], 4);
  int rounding_levels = 0;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    const kernels::cpu::Isa& isa = kernels::cpu::active_isa();
    if (isa.round_row_bf16 == nullptr) continue;
    ++rounding_levels;
    for (size_t n = 1; n <= x.size(); ++n) {
      std::vector<uint16_t> got(n + 1, 0xABCD);
      isa.round_row_bf16(x.data(), static_cast<int64_t>(n), got.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f32_to_bf16(x[i])) << level << " n " << n << " element " << i;
      EXPECT_EQ(got[n], 0xABCD) << level << " wrote past " << n << " elements";
    }
  }
  // Which levels round is the CPU's: say so, so a run on a machine without them is not read as a pass of this path.
  if (rounding_levels == 0) GTEST_SKIP() << "no level with BF16 dot products on this CPU";
}
