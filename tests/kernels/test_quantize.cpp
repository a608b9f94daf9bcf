// from_f32 into every GGUF block type: properties that follow from each format, on random rows and
// edge rows. (Byte equality with llama.cpp's own quantizer is tests/golden/test_quantized_layouts.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu/quantize_blocks.h"
#include "backends/cpu/kernels/kernels.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

constexpr DType kQuantizedTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL,
                                     DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS};

// The largest error |x - decoded| a type allows, as a fraction of the largest |x| of the block (of
// the super-block for the 256-element types), from its grid:
// - q8_0, q4_0, q5_0: the largest magnitude maps to -127 / -8 / -16 steps d exactly; rounding to
//   nearest costs half a step, except that q4_0 / q5_0 have no +8 / +16 and clamp to 7 / 15 (one
//   step); decoding with the fp16 d adds |q| * |d - fp16(d)| <= amax * 2^-11 (2^-10 allowed).
// - q4_1, q5_1: 15 / 31 steps over [min, max], a span of at most 2 amax: half a step is
//   amax / 15 / amax / 31; fp16 d and m add (span + |min|) * 2^-11 <= 3 amax * 2^-11 (2^-9 allowed).
// - The fitted types pick scales by a search, not from the extremes, so the bound is the format's
//   resolution plus what the search may give up at the ends:
//   iq4_nl: codebook steps of up to 24 units (half: 12) with amax placed at 120..134 units; at the
//     top 113 vs up to 134 units: 21 units of amax / 120 -> 0.2. iq4_xs: the same plus half a
//     6-bit sub-scale step (amax / 64) -> 0.22.
//   q3_k: quants -4..3 with amax on -4 units: one unit at +4 clamped to 3 plus half a unit, of
//     amax / 4 (0.375), plus half a 6-bit sub-scale step -> 0.4.
//   q6_k: quants -32..31, amax within 0.9 units of -32: up to 1.9 units clamped at the top plus
//     half a unit, of amax / 31 -> 0.08; 8-bit sub-scales add < 0.01 -> 0.09.
//   q2_k / q4_k / q5_k: 3 / 15 / 31 steps over a span of at most 2 amax, half a step, plus one step
//     the fit may leave uncovered at an end (its search starts below nmax), plus half a 4-bit
//     (q2_k: 1/30 of the largest) or 6-bit (1/126) step of each of scale and min:
//     q2_k 1/3 + 2/3 + 0.1 -> 1.1 (2 bits: a loose bound; the grid check below is the tight one),
//     q4_k 1/15 + 2/15 + 0.03 -> 0.24, q5_k 1/31 + 2/31 + 0.03 -> 0.13.
double error_bound(DType t) {
  switch (t) {
    case DType::Q8_0:
      return 1.0 / 254 + std::ldexp(1.0, -10);
    case DType::Q4_0:
      return 1.0 / 8 + std::ldexp(1.0, -10);
    case DType::Q5_0:
      return 1.0 / 16 + std::ldexp(1.0, -10);
    case DType::Q4_1:
      return 1.0 / 15 + std::ldexp(1.0, -9);
    case DType::Q5_1:
      return 1.0 / 31 + std::ldexp(1.0, -9);
    case DType::IQ4_NL:
      return 0.2;
    case DType::IQ4_XS:
      return 0.22;
    case DType::Q2_K:
      return 1.1;
    case DType::Q3_K:
      return 0.4;
    case DType::Q4_K:
      return 0.24;
    case DType::Q5_K:
      return 0.13;
    case DType::Q6_K:
      return 0.09;
    default:
      return 0.0;
  }
}

// An absolute allowance for fp16 scales that are subnormal or flush to zero (tiny rows): each fp16
// field is then off by up to 2^-25, times the largest code (and sub-scale) it multiplies.
double tiny_allowance(DType t) {
  const double units = [t] {
    switch (t) {
      case DType::Q8_0:
      case DType::IQ4_NL:
        return 128.0;
      case DType::Q4_0:
      case DType::Q4_1:
      case DType::Q5_0:
        return 17.0;
      case DType::Q5_1:
        return 33.0;
      case DType::Q2_K:
        return 15.0 * 3 + 15;
      case DType::Q3_K:
        return 32.0 * 4;
      case DType::Q4_K:
        return 63.0 * 15 + 63;
      case DType::Q5_K:
        return 63.0 * 31 + 63;
      case DType::Q6_K:
        return 128.0 * 32;
      case DType::IQ4_XS:
        return 32.0 * 128;
      default:
        return 0.0;
    }
  }();
  return 2 * units * std::ldexp(1.0, -25);
}

int block_of(DType t) {
  return dtype_traits(t).block_size;
}

// Number of codes an element can take, and writes code c for element e (within its block) into a
// copy of the block: the layouts of core/dtype.h, written independently of the quantizers.
int code_count(DType t) {
  switch (t) {
    case DType::Q8_0:
      return 256;
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q5_K:
      return 32;
    case DType::Q2_K:
      return 4;
    case DType::Q3_K:
      return 8;
    case DType::Q6_K:
      return 64;
    default:
      return 16;
  }
}

void set_code(DType t, uint8_t* b, int e, int c) {
  const auto set_nibble = [](uint8_t* qs, int j, int v) {  // element j of 32: low nibble j < 16
    uint8_t& byte = qs[j % 16];
    byte = static_cast<uint8_t>(j < 16 ? (byte & 0xf0) | v : (byte & 0x0f) | (v << 4));
  };
  const auto set_bit = [](uint8_t* bytes, int n, int v) {
    bytes[n / 8] = static_cast<uint8_t>((bytes[n / 8] & ~(1 << (n % 8))) | (v << (n % 8)));
  };
  const auto set_2bit = [](uint8_t* byte, int shift, int v) {
    *byte = static_cast<uint8_t>((*byte & ~(3 << shift)) | (v << shift));
  };
  const int half = e / 128, chunk = e % 128 / 32, l = e % 32;
  switch (t) {
    case DType::Q8_0:
      b[2 + e] = static_cast<uint8_t>(c);
      return;
    case DType::Q4_0:
    case DType::IQ4_NL:
      return set_nibble(b + 2, e, c);
    case DType::Q4_1:
      return set_nibble(b + 4, e, c);
    case DType::Q5_0:
      set_nibble(b + 6, e, c & 15);
      return set_bit(b + 2, e, c >> 4);
    case DType::Q5_1:
      set_nibble(b + 8, e, c & 15);
      return set_bit(b + 4, e, c >> 4);
    case DType::Q2_K:
      return set_2bit(b + 16 + 32 * half + l, 2 * chunk, c);
    case DType::Q3_K:
      set_2bit(b + 32 + 32 * half + l, 2 * chunk, c & 3);
      return set_bit(b + l, 4 * half + chunk, c >> 2);
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      const int s = e / 32;
      uint8_t& byte = b[(five ? 48 : 16) + 32 * (s / 2) + l];
      byte = static_cast<uint8_t>(s % 2 == 0 ? (byte & 0xf0) | (c & 15) : (byte & 0x0f) | ((c & 15) << 4));
      if (five) set_bit(b + 16 + l, s, c >> 4);
      return;
    }
    case DType::Q6_K: {
      uint8_t& low = b[64 * half + 32 * (chunk % 2) + l];
      low = static_cast<uint8_t>(chunk < 2 ? (low & 0xf0) | (c & 15) : (low & 0x0f) | ((c & 15) << 4));
      return set_2bit(b + 128 + 32 * half + l, 2 * chunk, c >> 4);
    }
    case DType::IQ4_XS:
      return set_nibble(b + 8 + 16 * (e / 32), e % 32, c);
    default:
      return;
  }
}

// Rows of 512 with the shapes quantizers get wrong: kind 0 uniform, 1 weight-like normal, 2
// negative only, 3 positive only with an offset, 4 one non-zero per 32, 5 sparse, 6 large dynamic
// range (1e-6 .. 1e4 within a row), 7 constant, 8 values on a half-integer grid (ties), 9 tiny
// (fp16 scales subnormal or zero), 10 all zero.
constexpr int kKinds = 11;
std::vector<float> make_row(int kind, uint32_t seed) {
  std::mt19937 rng(seed * 131 + static_cast<uint32_t>(kind));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(512, 0.0f);
  for (size_t i = 0; i < v.size(); ++i) {
    float& x = v[i];
    switch (kind) {
      case 0:
        x = uniform(rng);
        break;
      case 1:
        x = 0.02f * normal(rng);
        break;
      case 2:
        x = -3.0f * std::fabs(normal(rng));
        break;
      case 3:
        x = 5.0f + std::fabs(normal(rng));
        break;
      case 4:
        x = i % 32 == (seed % 32) ? 4.0f * normal(rng) : 0.0f;
        break;
      case 5:
        x = rng() % 8 == 0 ? normal(rng) : 0.0f;
        break;
      case 6:
        x = normal(rng) * std::pow(10.0f, static_cast<float>(static_cast<int>(rng() % 11) - 6));
        break;
      case 7:
        x = -0.37f;
        break;
      case 8:
        x = 0.5f * static_cast<float>(static_cast<int>(rng() % 33) - 16);
        break;
      case 9:
        x = 1e-7f * normal(rng);
        break;
      default:
        break;
    }
  }
  return v;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  ThreadPool pool(2);
  const auto n = static_cast<int64_t>(x.size());
  Tensor q = Tensor::host(t, Shape{1, n}, "q");
  kernels::from_f32(f32_tensor(Shape{1, n}, x, "x"), q, pool);
  const auto* p = static_cast<const uint8_t*>(q.data());
  return std::vector<uint8_t>(p, p + q.nbytes());
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  ThreadPool pool(1);
  Tensor q = Tensor::host(t, Shape{1, n}, "q");
  std::memcpy(q.data(), bytes.data(), bytes.size());
  Tensor out = Tensor::host(DType::F32, Shape{1, n}, "out");
  kernels::to_f32(q, out, pool);
  return values_of(out);
}

std::string what(DType t, int kind, uint32_t seed) {
  return std::string(dtype_name(t)) + " kind " + std::to_string(kind) + " seed " + std::to_string(seed);
}

}  // namespace

// Each element decodes to the value of its (sub-)block's grid nearest to it, the grid read back
// from the stored block by trying every code in the element's place. Slack: the 32-element types and
// iq4 pick codes with the unrounded scale but decode with its fp16 rounding (relative 2^-11 on each
// of up to three fields), plus float rounding.
TEST(Quantize, EveryElementTakesTheNearestValueOfItsBlock) {
  for (DType t : kQuantizedTypes) {
    const int bs = block_of(t);
    const size_t block_bytes = dtype_traits(t).block_bytes;
    for (int kind = 0; kind < kKinds; ++kind) {
      for (uint32_t seed = 0; seed < 3; ++seed) {
        const auto x = make_row(kind, seed);
        const auto q = quantize(t, x);
        const auto y = dequantize(t, q, static_cast<int64_t>(x.size()));
        for (size_t b = 0; b < x.size() / static_cast<size_t>(bs); ++b) {
          std::vector<uint8_t> block(q.begin() + static_cast<ptrdiff_t>(b * block_bytes),
                                     q.begin() + static_cast<ptrdiff_t>((b + 1) * block_bytes));
          for (int e = 0; e < bs; ++e) {
            const size_t at = b * static_cast<size_t>(bs) + static_cast<size_t>(e);
            std::vector<uint8_t> trial = block;
            double nearest = INFINITY, largest = 0.0;
            for (int c = 0; c < code_count(t); ++c) {
              set_code(t, trial.data(), e, c);
              const double v = ref_element(t, trial.data(), e);
              nearest = std::min(nearest, std::fabs(v - x[at]));
              largest = std::max(largest, std::fabs(v));
            }
            const double slack = std::ldexp(largest, -8) + std::ldexp(std::fabs(x[at]), -20) + tiny_allowance(t);
            ASSERT_LE(std::fabs(y[at] - x[at]), nearest + slack) << what(t, kind, seed) << " element " << at;
          }
        }
      }
    }
  }
}

TEST(Quantize, RoundTripErrorWithinTheFormatsBound) {
  for (DType t : kQuantizedTypes) {
    const int bs = block_of(t);
    double worst = 0.0;
    for (int kind = 0; kind < kKinds; ++kind) {
      for (uint32_t seed = 0; seed < 8; ++seed) {
        const auto x = make_row(kind, seed);
        const auto y = dequantize(t, quantize(t, x), static_cast<int64_t>(x.size()));
        for (size_t b = 0; b < x.size() / static_cast<size_t>(bs); ++b) {
          double amax = 0.0;
          for (int e = 0; e < bs; ++e) amax = std::max(amax, std::fabs(double{x[b * static_cast<size_t>(bs) + e]}));
          const double bound = error_bound(t) * amax + tiny_allowance(t);
          for (int e = 0; e < bs; ++e) {
            const size_t at = b * static_cast<size_t>(bs) + static_cast<size_t>(e);
            const double err = std::fabs(double{y[at]} - x[at]);
            ASSERT_LE(err, bound) << what(t, kind, seed) << " element " << at << " block amax " << amax;
            if (amax > 1e-3) worst = std::max(worst, err / amax);
          }
        }
      }
    }
    std::printf("[ quantize ] %-6s largest error / block amax %.4f (bound %.4f)\n", std::string(dtype_name(t)).c_str(),
                worst, error_bound(t));
  }
}

// q8_0, q4_0, q5_0 map the largest magnitude to a fixed code: decoded values quantize back to the
// same scale (127 d / 127, -8 d / -8, -16 d / -16 are exact) and the same codes. The fitted and
// min-based types give no such guarantee.
TEST(Quantize, RequantizingDecodedValuesIsIdempotentWhereTheFormatGuaranteesIt) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0}) {
    for (int kind = 0; kind < kKinds; ++kind) {
      if (kind == 9) continue;  // subnormal fp16 scales: 127 d is then not exact
      for (uint32_t seed = 0; seed < 4; ++seed) {
        const auto x = make_row(kind, seed);
        const auto q = quantize(t, x);
        const auto y = dequantize(t, q, static_cast<int64_t>(x.size()));
        EXPECT_EQ(quantize(t, y), q) << what(t, kind, seed);
      }
    }
  }
}

// An all-zero row decodes to zeros. The bytes are llama.cpp's: zero except where its reference
// writes something else for zero input: d = max / -8 (q4_0) or -16 (q5_0) is -0 (fp16 0x8000) and
// the codes sit at the zero point (nibble 8; q5_0's code 16 sets every high bit); iq4_nl / iq4_xs
// pick index 8 (value 1) with a zero scale, iq4_xs with d = -max_scale / 32 = -0 and sub-scales 32.
TEST(Quantize, ZeroRowsGiveZeroValuesAndLlamaCppsZeroBlocks) {
  for (DType t : kQuantizedTypes) {
    const std::vector<float> x(512, 0.0f);
    const auto q = quantize(t, x);
    for (float v : dequantize(t, q, 512)) ASSERT_EQ(v, 0.0f) << dtype_name(t);
    const size_t block_bytes = dtype_traits(t).block_bytes;
    std::vector<uint8_t> want(block_bytes, 0);
    switch (t) {
      case DType::Q4_0:
        want = {0x00, 0x80};
        want.resize(block_bytes, 0x88);
        break;
      case DType::Q5_0:
        want = {0x00, 0x80, 0xff, 0xff, 0xff, 0xff};
        want.resize(block_bytes, 0x00);
        break;
      case DType::IQ4_NL:
        want = {0x00, 0x00};
        want.resize(block_bytes, 0x88);
        break;
      case DType::IQ4_XS:
        want = {0x00, 0x80, 0xaa, 0xaa, 0x00, 0x00, 0x00, 0x00};
        want.resize(block_bytes, 0x88);
        break;
      default:
        break;
    }
    for (size_t b = 0; b < q.size() / block_bytes; ++b) {
      EXPECT_TRUE(std::equal(want.begin(), want.end(), q.begin() + static_cast<ptrdiff_t>(b * block_bytes)))
          << dtype_name(t) << " block " << b;
    }
  }
}

// One row through from_f32 (threads, many rows) equals the row quantized on its own.
TEST(Quantize, FromF32QuantizesEachRowOnItsOwn) {
  ThreadPool pool(3);
  for (DType t : kQuantizedTypes) {
    const int64_t rows = 7, cols = 1024;
    const auto xv = random_floats(static_cast<size_t>(rows * cols), 91, -2.0f, 2.0f);
    Tensor q = Tensor::host(t, Shape{rows, cols}, "q");
    kernels::from_f32(f32_tensor(Shape{rows, cols}, xv, "x"), q, pool);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(xv.begin() + r * cols, xv.begin() + (r + 1) * cols);
      const auto one = quantize(t, row);
      ASSERT_EQ(std::memcmp(q.row(r), one.data(), one.size()), 0) << dtype_name(t) << " row " << r;
    }
  }
}

TEST(Quantize, RowsOfPartialBlocksAreRefused) {
  for (DType t : kQuantizedTypes) {
    const int bs = block_of(t);
    // A tensor of the type cannot have them at all...
    expect_error(ErrorKind::Shape, [&] { (void)Tensor::host(t, Shape{2, bs + 16}, "w"); }, {"multiple of"});
    // ...and the row quantizer refuses them, naming the type and how to fix it.
    if (!kernels::cpu::is_block_type(t)) continue;
    const std::vector<float> x(static_cast<size_t>(bs + 16), 1.0f);
    std::vector<uint8_t> out(2 * dtype_traits(t).block_bytes);
    expect_error(ErrorKind::Shape, [&] { kernels::cpu::quantize_row_blocks(t, x.data(), out.data(), bs + 16); },
                 {std::string(dtype_name(t)).c_str(), "whole blocks", "pad"});
  }
  std::vector<uint8_t> out(64);
  const std::vector<float> x(32, 1.0f);
  expect_error(ErrorKind::Unsupported,
               [&] { kernels::cpu::quantize_row_blocks(DType::Q8_0, x.data(), out.data(), 32); }, {"q8_0"});
}
