// The GGUF block types past q8_0 / q4_0 (q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k,
// iq4_xs): their layouts (hand-built blocks of known values), the activation rounding llama.cpp
// applies for each (q8_0, q8_1, q8_K), and matmul and embedding against the double references of
// reference.h at every SIMD level this machine has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "common/q8_activations_guard.h"
#include "core/error.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

constexpr DType kBlockTypes[] = {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q2_K,
                                 DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,   DType::IQ4_XS};
constexpr int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

int64_t block_of(DType t) {
  return dtype_traits(t).block_size;
}

void put_half(std::vector<uint8_t>& b, size_t at, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(b.data() + at, &h, 2);
}

// A hand-built block: every stored integer chosen (a pattern over the whole range of each field),
// packed by the layout of ggml-common.h, with the value each element must decode to.
struct KnownBlock {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

KnownBlock known_block(DType t) {
  KnownBlock k;
  k.bytes.assign(dtype_traits(t).block_bytes, 0);
  const int n = static_cast<int>(block_of(t));
  k.values.resize(static_cast<size_t>(n));
  auto& b = k.bytes;
  const float d = 0.5f, dmin = 0.25f, m = -1.5f;
  // Stored quant of element e for a field of `bits` bits: every value occurs.
  auto q_of = [](int e, int bits) { return (e * 7 + 3) % (1 << bits); };
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q5_0:
    case DType::IQ4_NL: {
      const bool five = t == DType::Q5_0 || t == DType::Q5_1;
      const bool has_min = t == DType::Q4_1 || t == DType::Q5_1;
      put_half(b, 0, d);
      if (has_min) put_half(b, 2, m);
      const size_t qh = t == DType::Q5_0 ? 2 : 4;
      const size_t qs = t == DType::Q4_1 ? 4 : t == DType::Q5_0 ? 6 : t == DType::Q5_1 ? 8 : 2;
      for (int e = 0; e < 32; ++e) {
        const int q = q_of(e, five ? 5 : 4);
        b[qs + static_cast<size_t>(e % 16)] |= static_cast<uint8_t>((q & 15) << (e < 16 ? 0 : 4));
        if (five && (q & 16)) b[qh + static_cast<size_t>(e / 8)] |= static_cast<uint8_t>(1 << (e % 8));
        const float v = t == DType::IQ4_NL ? d * static_cast<float>(kIq4[q])
                        : t == DType::Q5_0 ? d * static_cast<float>(q - 16)
                                           : d * static_cast<float>(q) + m;
        k.values[static_cast<size_t>(e)] = v;
      }
      return k;
    }
    case DType::Q2_K: {
      for (int s = 0; s < 16; ++s) b[static_cast<size_t>(s)] = static_cast<uint8_t>((s * 5 + 1) % 16 | (s % 16) << 4);
      put_half(b, 80, d);
      put_half(b, 82, dmin);
      for (int e = 0; e < 256; ++e) {
        const int q = q_of(e, 2), h = e / 128, c = e % 128 / 32, l = e % 32;
        b[16 + static_cast<size_t>(32 * h + l)] |= static_cast<uint8_t>(q << (2 * c));
        const int s = e / 16;
        k.values[static_cast<size_t>(e)] = d * static_cast<float>((s * 5 + 1) % 16 * q) - dmin * static_cast<float>(s);
      }
      return k;
    }
    case DType::Q3_K: {
      // Scales (6 bits, stored + 32): low 4 bits in the nibbles of bytes 0..7, top 2 in bytes 8..11.
      for (int s = 0; s < 16; ++s) {
        const int sc = (s * 11 + 5) % 64;
        b[96 + static_cast<size_t>(s % 8)] |= static_cast<uint8_t>((sc & 15) << (s < 8 ? 0 : 4));
        b[96 + 8 + static_cast<size_t>(s % 4)] |= static_cast<uint8_t>((sc >> 4) << (2 * (s / 4)));
      }
      put_half(b, 108, d);
      for (int e = 0; e < 256; ++e) {
        const int q = q_of(e, 3), h = e / 128, c = e % 128 / 32, l = e % 32;
        b[32 + static_cast<size_t>(32 * h + l)] |= static_cast<uint8_t>((q & 3) << (2 * c));
        if (q & 4) b[static_cast<size_t>(l)] |= static_cast<uint8_t>(1 << (4 * h + c));
        const int s = e / 16;
        k.values[static_cast<size_t>(e)] = d * static_cast<float>(((s * 11 + 5) % 64 - 32) * (q - 4));
      }
      return k;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      put_half(b, 0, d);
      put_half(b, 2, dmin);
      // 6-bit scales and mins: j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 their low 4 bits
      // in the nibbles of byte j + 4, their top 2 in the top bits of bytes j - 4 and j.
      for (int j = 0; j < 8; ++j) {
        const int sc = (j * 9 + 60) % 64, mn = (j * 13 + 2) % 64;
        if (j < 4) {
          b[4 + static_cast<size_t>(j)] |= static_cast<uint8_t>(sc);
          b[4 + static_cast<size_t>(j) + 4] |= static_cast<uint8_t>(mn);
        } else {
          b[4 + static_cast<size_t>(j) + 4] |= static_cast<uint8_t>((sc & 15) | (mn & 15) << 4);
          b[4 + static_cast<size_t>(j) - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
          b[4 + static_cast<size_t>(j)] |= static_cast<uint8_t>((mn >> 4) << 6);
        }
      }
      const size_t qs = five ? 48 : 16;
      for (int e = 0; e < 256; ++e) {
        const int q = q_of(e, five ? 5 : 4), j = e / 32, l = e % 32;
        b[qs + static_cast<size_t>(32 * (j / 2) + l)] |= static_cast<uint8_t>((q & 15) << (j % 2 == 0 ? 0 : 4));
        if (five && (q & 16)) b[16 + static_cast<size_t>(l)] |= static_cast<uint8_t>(1 << j);
        k.values[static_cast<size_t>(e)] =
            d * static_cast<float>((j * 9 + 60) % 64 * q) - dmin * static_cast<float>((j * 13 + 2) % 64);
      }
      return k;
    }
    case DType::Q6_K: {
      for (int s = 0; s < 16; ++s)
        b[192 + static_cast<size_t>(s)] = static_cast<uint8_t>(static_cast<int8_t>(s * 17 - 128));
      put_half(b, 208, d);
      for (int e = 0; e < 256; ++e) {
        const int q = q_of(e, 6), h = e / 128, c = e % 128 / 32, l = e % 32;
        b[static_cast<size_t>(64 * h + 32 * (c % 2) + l)] |= static_cast<uint8_t>((q & 15) << (c < 2 ? 0 : 4));
        b[128 + static_cast<size_t>(32 * h + l)] |= static_cast<uint8_t>((q >> 4) << (2 * c));
        k.values[static_cast<size_t>(e)] = d * static_cast<float>((e / 16 * 17 - 128) * (q - 32));
      }
      return k;
    }
    case DType::IQ4_XS: {
      put_half(b, 0, d);
      uint16_t scales_h = 0;
      for (int j = 0; j < 8; ++j) {
        const int ls = (j * 23 + 7) % 64;
        b[4 + static_cast<size_t>(j / 2)] |= static_cast<uint8_t>((ls & 15) << (4 * (j % 2)));
        scales_h = static_cast<uint16_t>(scales_h | (ls >> 4) << (2 * j));
      }
      std::memcpy(b.data() + 2, &scales_h, 2);
      for (int e = 0; e < 256; ++e) {
        const int q = q_of(e, 4), j = e / 32, l = e % 32;
        b[8 + static_cast<size_t>(16 * j + l % 16)] |= static_cast<uint8_t>(q << (l < 16 ? 0 : 4));
        k.values[static_cast<size_t>(e)] = d * static_cast<float>(((j * 23 + 7) % 64 - 32) * kIq4[q]);
      }
      return k;
    }
    default:
      ADD_FAILURE() << "no known block for " << dtype_name(t);
      return k;
  }
}

struct Case {
  DType dtype;
  int64_t M, K, N;
  bool bias;
};

const char* mode_name(kernels::Q8Activations mode) {
  return mode == kernels::Q8Activations::F32 ? "f32 activations" : "rounded activations";
}

// Runs matmul and checks every output against the double reference: x as it is (f32 mode), or
// rounded as llama.cpp rounds it for the type (reference.h ref_round_activations). The products of
// each block are exact integers in both, so the tolerance is that of f32 accumulation, as in
// test_matmul.cpp.
void check_matmul_with(const Case& c, const Tensor& w, int threads) {
  ThreadPool pool(threads);
  const auto xv = random_floats(static_cast<size_t>(c.M * c.K), 21, -2.0f, 2.0f);
  Tensor x = f32_tensor(Shape{c.M, c.K}, xv, "x");
  const auto bv = random_floats(static_cast<size_t>(c.N), 23);
  Tensor bias = f32_tensor(Shape{c.N}, bv, "bias");
  Tensor y = Tensor::host(DType::F32, Shape{c.M, c.N}, "y");
  kernels::matmul(x, w, c.bias ? &bias : nullptr, y, pool);
  const auto yv = values_of(y);
  const bool rounded = kernels::q8_0_activations() == kernels::Q8Activations::Q8_0;
  for (int64_t m = 0; m < c.M; ++m) {
    const std::vector<float> row(xv.begin() + m * c.K, xv.begin() + (m + 1) * c.K);
    const RefRounded r = rounded ? ref_round_activations(c.dtype, row) : RefRounded{{row.begin(), row.end()}, {}};
    for (int64_t n = 0; n < c.N; ++n) {
      double magnitude = 0.0;
      const auto* wrow = static_cast<const uint8_t*>(w.data()) + n * static_cast<int64_t>(w.row_bytes());
      double ref = ref_dot_rounded(c.dtype, wrow, r, &magnitude);
      if (c.bias) {
        ref += bv[static_cast<size_t>(n)];
        magnitude += std::fabs(bv[static_cast<size_t>(n)]);
      }
      ASSERT_NEAR(yv[static_cast<size_t>(m * c.N + n)], ref, 1e-5 * magnitude + 1e-30)
          << dtype_name(c.dtype) << " level " << kernels::simd_level() << " " << mode_name(kernels::q8_0_activations())
          << " threads " << threads << " M " << c.M << " K " << c.K << " N " << c.N << " at (" << m << ", " << n << ")";
    }
  }
}

void check_matmul(const Case& c, int threads) {
  check_matmul_with(c, random_weight(c.dtype, c.N, c.K, 22), threads);
}

// Super-blocks at the ends of the range of each element's scale * quant, which the amx level
// multiplies inside its tiles for q2_k, q3_k and q6_k (amx.cpp, planes): pattern 0 and 1 the two
// extremes, 2 a mix; every row a different order of them.
std::vector<uint8_t> extreme_super_block(DType t, int pattern) {
  const size_t bytes = dtype_traits(t).block_bytes;
  std::vector<uint8_t> b(bytes, pattern == 0 ? 0x00 : 0xFF);
  if (pattern == 2) {
    for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(i * 37 + 11);
  }
  switch (t) {
    case DType::Q2_K:  // 0: sc = m = 0; 1: sc 15 * q 3 = 45, m 15
      put_half(b, 80, 0.01f);
      put_half(b, 82, 0.02f);
      break;
    case DType::Q3_K:  // 0: (sc - 32) -32 * (q - 4) -4 = 128; 1: 31 * 3
      put_half(b, 108, 0.01f);
      break;
    case DType::Q6_K:  // 0: sc -128 * (q - 32) -32 = 4096; 1: sc -1 * 31
      if (pattern == 0) {
        for (size_t s = 0; s < 16; ++s) b[192 + s] = 0x80;
      }
      if (pattern == 1) {
        for (size_t s = 0; s < 8; ++s) b[192 + s] = 0x7F;  // 127 * 31 in the first half
      }
      put_half(b, 208, 0.001f);
      break;
    default:
      ADD_FAILURE() << dtype_name(t);
  }
  return b;
}

std::vector<float> run_matmul(const Tensor& x, const Tensor& w, int threads) {
  ThreadPool pool(threads);
  Tensor y = Tensor::host(DType::F32, Shape{x.dim(0), w.dim(0)}, "y");
  kernels::matmul(x, w, nullptr, y, pool);
  return values_of(y);
}

}  // namespace

TEST(BlockTypes, TableAndNames) {
  const struct {
    DType t;
    const char* name;
    int block;
    size_t bytes;
  } expected[] = {{DType::Q4_1, "q4_1", 32, 20},      {DType::Q5_0, "q5_0", 32, 22},   {DType::Q5_1, "q5_1", 32, 24},
                  {DType::IQ4_NL, "iq4_nl", 32, 18},  {DType::Q2_K, "q2_k", 256, 84},  {DType::Q3_K, "q3_k", 256, 110},
                  {DType::Q4_K, "q4_k", 256, 144},    {DType::Q5_K, "q5_k", 256, 176}, {DType::Q6_K, "q6_k", 256, 210},
                  {DType::IQ4_XS, "iq4_xs", 256, 136}};
  for (const auto& e : expected) {
    EXPECT_EQ(dtype_name(e.t), e.name);
    EXPECT_EQ(dtype_traits(e.t).block_size, e.block) << e.name;
    EXPECT_EQ(dtype_traits(e.t).block_bytes, e.bytes) << e.name;
    EXPECT_TRUE(dtype_traits(e.t).is_quantized) << e.name;
    EXPECT_EQ(dtype_from_name(e.name), e.t);
    EXPECT_EQ(dtype_bytes(e.t, static_cast<uint64_t>(e.block) * 3), e.bytes * 3) << e.name;
    EXPECT_EQ(dtype_bytes(e.t, static_cast<uint64_t>(e.block) + 1), std::nullopt) << e.name;
  }
  EXPECT_EQ(dtype_from_name("Q4_K"), DType::Q4_K);
}

TEST(BlockTypes, HandBuiltBlocksDecodeToTheirValuesAtEveryLevel) {
  // A known block followed by a zero block, through to_f32 at every level: exact.
  SimdLevelGuard guard;
  ThreadPool pool(2);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType t : kBlockTypes) {
      const KnownBlock k = known_block(t);
      const int64_t n = block_of(t);
      Tensor row = Tensor::host(t, Shape{1, 2 * n}, "row");
      std::memcpy(row.data(), k.bytes.data(), k.bytes.size());
      std::memset(static_cast<uint8_t*>(row.data()) + k.bytes.size(), 0, k.bytes.size());
      Tensor out = Tensor::host(DType::F32, Shape{1, 2 * n}, "out");
      kernels::to_f32(row, out, pool);
      const auto got = values_of(out);
      for (int64_t e = 0; e < n; ++e) {
        ASSERT_EQ(got[static_cast<size_t>(e)], k.values[static_cast<size_t>(e)])
            << dtype_name(t) << " " << level << " element " << e;
        // The reference decoder of reference.h reads the same layout.
        ASSERT_EQ(static_cast<float>(ref_element(t, k.bytes.data(), e)), k.values[static_cast<size_t>(e)])
            << dtype_name(t) << " element " << e;
      }
      for (int64_t e = n; e < 2 * n; ++e) EXPECT_EQ(got[static_cast<size_t>(e)], 0.0f) << dtype_name(t);
    }
  }
}

TEST(BlockTypes, ActivationRoundingIsLlamaCpps) {
  // q8_K: the largest magnitude maps to -127 (sign kept), ties round half to even, bsums; q8_1's s.
  std::vector<float> x = random_floats(256 * 3, 31, -3.0f, 3.0f);
  // Block 0: -127 at x = 127 (max positive) so the step is exactly -1: x = k + 0.5 are ties.
  for (int j = 0; j < 256; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j % 60) - 29.5f;
  x[5] = 127.0f;
  for (int j = 256; j < 512; ++j) x[static_cast<size_t>(j)] = 0.0f;  // block 1: all zero
  std::vector<int8_t> q(x.size());
  std::vector<float> scale(3);
  std::vector<int16_t> bsum(x.size() / 16);
  kernels::cpu::quantize_row_q8_K_split(x.data(), static_cast<int64_t>(x.size()), q.data(), scale.data(), bsum.data());
  for (size_t b = 0; b < 3; ++b) {
    int8_t want[256];
    float d = 0.0f;
    ref_round_q8_K(x.data() + b * 256, want, &d);
    EXPECT_EQ(scale[b], d) << "block " << b;
    for (size_t j = 0; j < 256; ++j) ASSERT_EQ(q[b * 256 + j], want[j]) << "block " << b << " x " << x[b * 256 + j];
    for (size_t g = 0; g < 16; ++g) {
      int sum = 0;
      for (size_t j = 0; j < 16; ++j) sum += want[g * 16 + j];
      EXPECT_EQ(bsum[b * 16 + g], sum);
    }
  }
  EXPECT_EQ(scale[0], -1.0f);
  EXPECT_EQ(q[0], 30);  // -29.5 * -1 = 29.5 -> 30 (even)
  EXPECT_EQ(q[1], 28);  // 28.5 -> 28
  EXPECT_EQ(q[2], 28);  // 27.5 -> 28
  EXPECT_EQ(scale[1], 0.0f);

  // q8_1: the quants and scale of q8_0 at every level, s from the unrounded step.
  SimdLevelGuard guard;
  const std::vector<float> y = random_floats(32 * 4, 32);
  const RefRounded want = ref_round_activations(DType::Q4_1, y);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    std::vector<int8_t> yq(y.size());
    std::vector<float> ys(4), s(4);
    kernels::cpu::active_isa().quantize_row_q8_0(y.data(), 128, yq.data(), ys.data());
    kernels::cpu::q8_1_sums(y.data(), yq.data(), 128, s.data());
    for (size_t b = 0; b < 4; ++b) {
      EXPECT_EQ(s[b], want.s[b]) << level << " block " << b;
      for (size_t j = 0; j < 32; ++j) EXPECT_EQ(static_cast<double>(ys[b]) * yq[b * 32 + j], want.x[b * 32 + j]);
    }
  }
}

TEST(BlockTypes, Q8KRoundingIsTheSameAtEveryLevel) {
  // Each level's q8_K rounding against the reference on finite blocks: ties at a step of exactly
  // -1, an all-zero block, the greatest magnitude twice with both signs (the first sets the sign),
  // random blocks. Blocks the reference leaves undefined must give the scalar level's bytes, scales
  // and sums bit for bit: NaN and infinities, and subnormals only (the step overflows to infinity).
  SimdLevelGuard guard;
  constexpr size_t kBlocks = 8;
  std::vector<float> x = random_floats(256 * kBlocks, 33, -3.0f, 3.0f);
  for (int j = 0; j < 256; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j % 60) - 29.5f;
  x[5] = 127.0f;
  for (size_t j = 256; j < 512; ++j) x[j] = 0.0f;
  x[512 + 40] = 5.0f;  // block 2: +5 first, -5 later in the same 8 lanes: the step is -127 / 5
  x[512 + 44] = -5.0f;
  x[768 + 16] = -9.0f;  // block 3: the greatest magnitude negative, at the start of a chunk of 16
  const size_t finite_blocks = 4;
  for (size_t j = 1024; j < 1280; ++j) x[j] = static_cast<float>(static_cast<int>(j % 7) - 3) * 1.0e-40f;
  x[1280 + 3] = NAN;  // block 5: NaN and -infinity with finite values
  x[1280 + 100] = -INFINITY;
  x[1280 + 101] = INFINITY;
  for (size_t j = 1536; j < 1792; ++j) x[j] = (j % 3 == 0) ? NAN : 0.0f;  // block 6: NaN and zeros only
  // Block 7: NaNs with payloads against a finite step: the scalar's float trick keeps the payload
  // (a signalling NaN quieted first), so these round to nonzero bytes.
  for (const auto& [at, bits] :
       {std::pair<size_t, uint32_t>{1792 + 2, 0x7fc00005u}, {1792 + 9, 0x7f800003u}, {1792 + 30, 0xffc0007fu}}) {
    std::memcpy(&x[at], &bits, 4);
  }

  const auto round_at = [&](const std::string& level, std::vector<int8_t>& q, std::vector<float>& scale,
                            std::vector<int16_t>& bsum) {
    kernels::set_simd_level(level);
    q.assign(x.size(), 0);
    scale.assign(kBlocks, 0.0f);
    bsum.assign(x.size() / 16, 0);
    kernels::cpu::active_isa().quantize_row_q8_K(x.data(), static_cast<int64_t>(x.size()), q.data(), scale.data(),
                                                 bsum.data());
  };
  std::vector<int8_t> scalar_q;
  std::vector<float> scalar_scale;
  std::vector<int16_t> scalar_bsum;
  round_at("scalar", scalar_q, scalar_scale, scalar_bsum);
  for (const std::string& level : kernels::available_simd_levels()) {
    std::vector<int8_t> q;
    std::vector<float> scale;
    std::vector<int16_t> bsum;
    round_at(level, q, scale, bsum);
    for (size_t b = 0; b < finite_blocks; ++b) {
      int8_t want[256];
      float d = 0.0f;
      ref_round_q8_K(x.data() + b * 256, want, &d);
      EXPECT_EQ(scale[b], d) << level << " block " << b;
      for (size_t j = 0; j < 256; ++j) {
        ASSERT_EQ(q[b * 256 + j], want[j]) << level << " block " << b << " x " << x[b * 256 + j];
      }
      for (size_t g = 0; g < 16; ++g) {
        int sum = 0;
        for (size_t j = 0; j < 16; ++j) sum += want[g * 16 + j];
        EXPECT_EQ(bsum[b * 16 + g], sum) << level << " block " << b << " group " << g;
      }
    }
    EXPECT_EQ(q, scalar_q) << level;
    EXPECT_EQ(bsum, scalar_bsum) << level;
    for (size_t b = 0; b < kBlocks; ++b) {
      EXPECT_EQ(std::memcmp(&scale[b], &scalar_scale[b], 4), 0) << level << " block " << b << " " << scale[b];
    }
  }
  EXPECT_LT(scalar_scale[2], 0.0f);  // -127 / +5 < 0
  EXPECT_GT(scalar_scale[3], 0.0f);  // -127 / -9 > 0
  EXPECT_EQ(scalar_q[1792 + 2], 5);
  EXPECT_EQ(scalar_q[1792 + 9], 3);
  EXPECT_EQ(scalar_q[1792 + 30], 127);
}

TEST(BlockTypes, MatmulEveryTypeLevelModeAndAwkwardShape) {
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType t : kBlockTypes) {
      for (kernels::Q8Activations mode : {kernels::Q8Activations::F32, kernels::Q8Activations::Q8_0}) {
        kernels::set_q8_0_activations(mode);
        for (int64_t blocks : {1, 2, 3}) {
          for (int64_t M : {1, 3, 6}) {  // 6: tiles of 4 rows and of 2
            for (int64_t N : {1, 5, 67}) check_matmul({t, M, blocks * block_of(t), N, (blocks + N + M) % 2 == 0}, 2);
          }
        }
        // Longer rows, prefill tiles past the register tile, decode with streams and a remainder.
        check_matmul({t, 1, 4096, 37, true}, 2);
        check_matmul({t, 17, 16 * block_of(t), 45, false}, 3);
        check_matmul({t, 1, 2 * block_of(t), 301, true}, 1);
      }
    }
  }
}

TEST(BlockTypes, ExtremeScaledQuantsMatchTheReference) {
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard(kernels::Q8Activations::Q8_0);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q6_K}) {
      constexpr int64_t N = 19, supers = 3;
      Tensor w = Tensor::host(t, Shape{N, supers * 256}, "w");
      auto* bytes = static_cast<uint8_t*>(w.data());
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t g = 0; g < supers; ++g) {
          const auto block = extreme_super_block(t, static_cast<int>((n + g) % 3));
          std::memcpy(bytes + n * static_cast<int64_t>(w.row_bytes()) + g * static_cast<int64_t>(block.size()),
                      block.data(), block.size());
        }
      }
      for (int64_t M : {1, 6, 17}) check_matmul_with({t, M, supers * 256, N, M != 6}, w, 2);
    }
  }
}

TEST(BlockTypes, ResultDoesNotDependOnThreadsOrBatchRowsOrPrefetch) {
  // Bit-identical for 1, 2, 3 threads; a row of a batch equals the same row alone (prefill and
  // decode); software prefetch in decode never changes a result. A level whose batches of more
  // than Isa::small_batch_rows rows take other loops (amx: tiles for every block type) keeps a row
  // alone within the reference tolerance of the batch's instead (1e-5 of sum |x_k w_k|).
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard(kernels::Q8Activations::Q8_0);
  const kernels::GemvPrefetch saved = kernels::gemv_prefetch();
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    const int64_t small = kernels::cpu::active_isa().small_batch_rows;
    for (DType t : kBlockTypes) {
      const int64_t M = 9, K = 4 * block_of(t), N = 8 * 7 + 3;
      const auto xv = random_floats(static_cast<size_t>(M * K), 41);
      Tensor x = f32_tensor(Shape{M, K}, xv, "x");
      Tensor w = random_weight(t, N, K, 42);
      const auto one = run_matmul(x, w, 1);
      EXPECT_EQ(one, run_matmul(x, w, 2)) << dtype_name(t) << " " << level;
      EXPECT_EQ(one, run_matmul(x, w, 3)) << dtype_name(t) << " " << level;
      for (int64_t m : {0, 4, 8}) {
        const std::vector<float> row(xv.begin() + m * K, xv.begin() + (m + 1) * K);
        const Tensor x1 = f32_tensor(Shape{1, K}, row, "x1");
        const std::vector<float> in_batch(one.begin() + m * N, one.begin() + (m + 1) * N);
        const RefRounded r = ref_round_activations(t, row);
        for (kernels::GemvPrefetch p : {kernels::GemvPrefetch::On, kernels::GemvPrefetch::Off}) {
          kernels::set_gemv_prefetch(p);
          const auto alone = run_matmul(x1, w, 2);
          if (small == 0 || M <= small) {
            EXPECT_EQ(alone, in_batch) << dtype_name(t) << " " << level << " row " << m;
            continue;
          }
          for (int64_t n = 0; n < N; ++n) {
            double magnitude = 0.0;
            const auto* wrow = static_cast<const uint8_t*>(w.data()) + n * static_cast<int64_t>(w.row_bytes());
            ref_dot_rounded(t, wrow, r, &magnitude);
            EXPECT_NEAR(alone[static_cast<size_t>(n)], in_batch[static_cast<size_t>(n)], 1e-5 * magnitude + 1e-30)
                << dtype_name(t) << " " << level << " row " << m << " output " << n;
          }
        }
      }
    }
  }
  kernels::set_gemv_prefetch(saved);
}

TEST(BlockTypes, RoundingModeChangesTheResult) {
  // With rounded activations (the default) the result differs from the f32 one by about the
  // rounding of x: the mode is applied to every block type.
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType t : kBlockTypes) {
      const int64_t M = 3, K = 2 * block_of(t), N = 19;
      Tensor x = f32_tensor(Shape{M, K}, random_floats(static_cast<size_t>(M * K), 43), "x");
      Tensor w = random_weight(t, N, K, 44);
      kernels::set_q8_0_activations(kernels::Q8Activations::F32);
      const auto f32 = run_matmul(x, w, 2);
      kernels::set_q8_0_activations(kernels::Q8Activations::Q8_0);
      EXPECT_NE(f32, run_matmul(x, w, 2)) << dtype_name(t) << " " << level;
    }
  }
}

TEST(BlockTypes, LongRowsRoundedInSlabs) {
  // Rows rounded in slabs of kRoundedRowsSlabBytes of quants (32 rows at this K): 37 rows take two.
  constexpr int64_t K = kernels::kRoundedRowsSlabBytes / 32;
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard(kernels::Q8Activations::Q8_0);
  kernels::set_simd_level(kernels::available_simd_levels().front());
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q6_K}) check_matmul({t, 37, K, 2, true}, 2);
}

TEST(BlockTypes, EmbeddingRowsDecodeExactly) {
  // token_embd is q4_k or q6_k in the usual mixes: the looked-up rows are the dequantized rows,
  // bit for bit (ggml's order of f32 operations: every product here is exact, then one rounding).
  SimdLevelGuard guard;
  ThreadPool pool(2);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (DType t : kBlockTypes) {
      const int64_t V = 11, H = 3 * block_of(t);
      Tensor table = random_weight(t, V, H, 45);
      const std::vector<int32_t> ids{3, 0, 10, 3, 7};
      Tensor out = Tensor::host(DType::F32, Shape{5, H}, "out");
      kernels::embedding(table, i32_tensor(ids), out, pool);
      const auto ov = values_of(out);
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto* row = static_cast<const uint8_t*>(table.row(ids[i]));
        for (int64_t h = 0; h < H; ++h) {
          ASSERT_EQ(ov[i * static_cast<size_t>(H) + static_cast<size_t>(h)], static_cast<float>(ref_element(t, row, h)))
              << dtype_name(t) << " " << level << " token " << i << " dim " << h;
        }
      }
    }
  }
}

// from_f32 writes every block type (tests/kernels/test_quantize.cpp checks the quantizers): what
// it writes reads back through to_f32 within the type's resolution.
TEST(BlockTypes, FromF32WritesEveryType) {
  ThreadPool pool(1);
  const std::vector<float> values = random_floats(512, 46);
  Tensor x = f32_tensor(Shape{2, 256}, values, "x");
  for (DType t : kBlockTypes) {
    Tensor packed = Tensor::host(t, Shape{2, 256}, "packed");
    kernels::from_f32(x, packed, pool);
    Tensor back = Tensor::host(DType::F32, Shape{2, 256}, "back");
    kernels::to_f32(packed, back, pool);
    float amax = 0.0f, worst = 0.0f;
    for (size_t i = 0; i < values.size(); ++i) {
      amax = std::max(amax, std::fabs(values[i]));
      worst = std::max(worst, std::fabs(back.data_as<float>()[i] - values[i]));
    }
    EXPECT_GT(worst, 0.0f) << dtype_name(t) << ": a 2-to-6-bit type cannot be exact on random values";
    EXPECT_LT(worst, 0.6f * amax) << dtype_name(t);
  }
}

TEST(BlockTypes, CpuBackendSupportsThemForMatmulAndEmbedding) {
  for (DType t : kBlockTypes) {
    EXPECT_TRUE(kernels::supports(Op::MatMul, {DType::F32, t})) << dtype_name(t);
    EXPECT_TRUE(kernels::supports(Op::Embedding, {t, DType::I32})) << dtype_name(t);
    EXPECT_FALSE(kernels::supports(Op::Add, {t, DType::F32})) << dtype_name(t);
  }
}
