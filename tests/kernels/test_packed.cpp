// Weights repacked at load (kernels::repack_weight, cpu/packed_weights.h): the layout against its
// specification, the matmul on it against a double reference at every level, its results bit
// for bit the same for any batch, split and level that has packed kernels, and the row readers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "common/q8_activations_guard.h"
#include "core/error.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

constexpr DType kPackable[] = {DType::Q8_0,   DType::Q4_0,   DType::Q4_1, DType::Q5_0, DType::Q5_1,
                               DType::IQ4_NL, DType::Q2_K,   DType::Q3_K, DType::Q4_K, DType::Q5_K,
                               DType::Q6_K,   DType::IQ4_XS, DType::BF16, DType::F16,  DType::F32};

bool is_super_block_type(DType dtype) {
  return dtype == DType::Q2_K || dtype == DType::Q3_K || dtype == DType::Q4_K || dtype == DType::Q5_K ||
         dtype == DType::Q6_K || dtype == DType::IQ4_XS;
}

bool is_float_type(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::F32;
}

// A K for each packable type: whole blocks of 32, or super-blocks of 256 for the k-quants; the
// float types take any even K, here two short of the blocks.
int64_t packable_k(DType dtype, int64_t blocks_of_32) {
  if (is_float_type(dtype)) return blocks_of_32 * 32 - 2;
  return is_super_block_type(dtype) ? (blocks_of_32 + 7) / 8 * 256 : blocks_of_32 * 32;
}

bool has_fifth_bits(DType dtype) {
  return dtype == DType::Q5_0 || dtype == DType::Q5_1;
}
bool has_block_mins(DType dtype) {
  return dtype == DType::Q4_1 || dtype == DType::Q5_1;
}

// The blocks of 32 as stored: d, q4_1 / q5_1's m, q5_0 / q5_1's 4 bytes of fifth bits, the quants.
int64_t block_bytes(DType dtype) {
  return 2 + (has_block_mins(dtype) ? 2 : 0) + (has_fifth_bits(dtype) ? 4 : 0) + (dtype == DType::Q8_0 ? 32 : 16);
}
// Where block b's quants start in a packed group of the blocks of 32 (q5: its unit of fifth bits).
size_t packed_block_quants(DType dtype, int64_t K, int64_t b) {
  const int64_t blocks = K / 32, units = dtype == DType::Q8_0 ? 8 : 4;
  return static_cast<size_t>(blocks * 16 * (has_block_mins(dtype) ? 4 : 2) +
                             b * 64 * (units + (has_fifth_bits(dtype) ? 1 : 0)));
}
constexpr size_t kMovedBitByBit = SIZE_MAX;

// Where byte i of row r's standard row sits in its packed 16-row group (packed_weights.h),
// written from the layout's description: the types whose bytes are only reordered, and q5_0 /
// q5_1's bytes but their fifth bits (kMovedBitByBit: expect_fifth_bits_in_their_unit checks those).
size_t packed_position(DType dtype, int64_t K, int64_t r, int64_t i) {
  if (dtype == DType::BF16) return static_cast<size_t>((i / 4 * 16 + r) * 4 + i % 4);  // element pairs
  if (dtype == DType::F16) return static_cast<size_t>((i / 2 * 16 + r) * 2 + i % 2);   // elements
  if (dtype == DType::F32) return static_cast<size_t>((i / 4 * 16 + r) * 4 + i % 4);
  if (dtype == DType::Q5_K) {  // d, dmin, scale planes as q4_k; qh units at 256, qs units at 768
    const int64_t section = i / 176, byte = i % 176;
    const size_t at = static_cast<size_t>(section) * 16 * 176;
    if (byte < 2) return at + static_cast<size_t>(2 * r + byte);
    if (byte < 4) return at + static_cast<size_t>(32 + 2 * r + byte - 2);
    if (byte < 16) return at + static_cast<size_t>(64 + 16 * (byte - 4) + r);
    if (byte < 48) {  // qh[q]: unit q / 4
      const int64_t q = byte - 16;
      return at + static_cast<size_t>(256 + ((q / 4) * 16 + r) * 4 + q % 4);
    }
    const int64_t q = byte - 48;  // qs[q]
    return at + static_cast<size_t>(768 + ((q / 4) * 16 + r) * 4 + q % 4);
  }
  if (dtype == DType::Q2_K) {  // scales[16], qs[64], d, dmin: d, dmin, scale planes at 64, qs units at 320
    const int64_t section = i / 84, byte = i % 84;
    const size_t at = static_cast<size_t>(section) * 16 * 84;
    if (byte < 16) return at + static_cast<size_t>(64 + 16 * byte + r);
    if (byte < 80) {
      const int64_t q = byte - 16;
      return at + static_cast<size_t>(320 + ((q / 4) * 16 + r) * 4 + q % 4);
    }
    if (byte < 82) return at + static_cast<size_t>(2 * r + byte - 80);
    return at + static_cast<size_t>(32 + 2 * r + byte - 82);
  }
  if (dtype == DType::Q3_K) {  // hmask[32], qs[64], scales[12], d: d, scale planes at 32, hmask units at 224, qs at 736
    const int64_t section = i / 110, byte = i % 110;
    const size_t at = static_cast<size_t>(section) * 16 * 110;
    if (byte < 32) return at + static_cast<size_t>(224 + ((byte / 4) * 16 + r) * 4 + byte % 4);
    if (byte < 96) {
      const int64_t q = byte - 32;
      return at + static_cast<size_t>(736 + ((q / 4) * 16 + r) * 4 + q % 4);
    }
    if (byte < 108) return at + static_cast<size_t>(32 + 16 * (byte - 96) + r);
    return at + static_cast<size_t>(2 * r + byte - 108);
  }
  if (dtype == DType::IQ4_XS) {  // d, scales_h's 2 planes, scales_l's 4, qs units at 128
    const int64_t section = i / 136, byte = i % 136;
    const size_t at = static_cast<size_t>(section) * 16 * 136;
    if (byte < 2) return at + static_cast<size_t>(2 * r + byte);
    if (byte < 8) return at + static_cast<size_t>(32 + 16 * (byte - 2) + r);  // scales_h then scales_l bytes
    const int64_t q = byte - 8;
    return at + static_cast<size_t>(128 + ((q / 4) * 16 + r) * 4 + q % 4);
  }
  if (dtype == DType::Q4_K) {
    const int64_t section = i / 144, byte = i % 144;
    size_t at = static_cast<size_t>(section) * 16 * 144;
    if (byte < 2) return at + static_cast<size_t>(2 * r + byte);               // d
    if (byte < 4) return at + static_cast<size_t>(32 + 2 * r + byte - 2);      // dmin
    if (byte < 16) return at + static_cast<size_t>(64 + 16 * (byte - 4) + r);  // scale planes
    const int64_t q = byte - 16;                                               // qs[q]: unit q / 4
    return at + static_cast<size_t>(256 + ((q / 4) * 16 + r) * 4 + q % 4);
  }
  // The blocks of 32: d [block][row], q4_1 / q5_1's m [block][row] after all d, then per block
  // (q5: after its unit of fifth bits) 4-byte units [unit][row] of the row's quant bytes in order.
  const int64_t blocks = K / 32;
  const int64_t b = i / block_bytes(dtype), in_block = i % block_bytes(dtype);
  if (in_block < 2) return static_cast<size_t>((b * 16 + r) * 2 + in_block);
  int64_t quants_from = 2;
  if (has_block_mins(dtype)) {
    if (in_block < 4) return static_cast<size_t>(blocks * 32 + (b * 16 + r) * 2 + in_block - 2);
    quants_from = 4;
  }
  if (has_fifth_bits(dtype)) {
    if (in_block < quants_from + 4) return kMovedBitByBit;
    quants_from += 4;
  }
  const int64_t q = in_block - quants_from;
  return packed_block_quants(dtype, K, b) + (has_fifth_bits(dtype) ? 64 : 0) +
         static_cast<size_t>((q / 4 * 16 + r) * 4 + q % 4);
}

// q5_0 / q5_1: row r's fifth bit of element j of block b (bit j of the stored 32) is bit 2c + h of
// byte i of row r's four in its block's first unit, j = 4c + i + 16h (the element in byte i of
// unit c, low or high nibble).
void expect_fifth_bits_in_their_unit(DType dtype, int64_t K, int64_t r, const uint8_t* row, const uint8_t* group) {
  const int64_t fifth_at = has_block_mins(dtype) ? 4 : 2;
  for (int64_t b = 0; b < K / 32; ++b) {
    const uint8_t* stored = row + b * block_bytes(dtype) + fifth_at;
    const uint8_t* unit = group + packed_block_quants(dtype, K, b);
    for (int64_t j = 0; j < 32; ++j) {
      const int64_t c = j % 16 / 4, i = j % 4, h = j / 16;
      ASSERT_EQ(stored[j / 8] >> (j % 8) & 1, unit[r * 4 + i] >> (2 * c + h) & 1)
          << dtype_name(dtype) << " row " << r << " block " << b << " element " << j;
    }
  }
}

// Row r's q6_k super-block (BlockQ6_K: ql[128] at 0, qh[64] at 128, scales[16] at 192, d at 208)
// written into its packed section as packed_weights.h describes it.
void write_q6_k_section(const uint8_t* block, int64_t r, uint8_t* section) {
  // The stored 6-bit values as ggml's dequantize_row_q6_K reads them: for each half n and l,
  // elements l, l + 32, l + 64, l + 96 from ql[l] low, ql[l + 32] low, ql[l] high, ql[l + 32] high
  // and qh[l]'s bit pairs 0, 1, 2, 3.
  uint8_t e[256];
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = block + 64 * n;
    const uint8_t* qh = block + 128 + 32 * n;
    for (int l = 0; l < 32; ++l) {
      e[128 * n + l] = static_cast<uint8_t>((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4);
      e[128 * n + l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4);
      e[128 * n + l + 64] = static_cast<uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
      e[128 * n + l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
    }
  }
  section[2 * r] = block[208];
  section[2 * r + 1] = block[209];
  for (int j = 0; j < 16; ++j) {  // scale j = 8n + 2t + h: quad 2n + h, plane t
    const int n = j / 8, t = (j % 8) / 2, h = j % 2;
    section[32 + 64 * (2 * n + h) + 16 * t + r] = block[192 + j];
  }
  for (int quad = 0; quad < 4; ++quad) {
    const int n = quad / 2, h = quad % 2;
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 4; ++k) {
        const int first = 128 * n + 4 * (4 * h + i) + k;  // e_t: element first + 32 t
        uint8_t* byte = section + 288 + 768 * quad + 192 * i + 4 * r + k;
        byte[0] = static_cast<uint8_t>(e[first] | (e[first + 96] & 3) << 6);
        byte[64] = static_cast<uint8_t>(e[first + 32] | ((e[first + 96] >> 2) & 3) << 6);
        byte[128] = static_cast<uint8_t>(e[first + 64] | (e[first + 96] >> 4) << 6);
      }
    }
  }
}

Tensor copy_of(const Tensor& w) {
  Tensor t = Tensor::host(w.dtype(), w.shape(), w.name());
  std::memcpy(t.data(), w.data(), w.nbytes());
  return t;
}

Tensor packed_copy(const Tensor& w) {
  ThreadPool pool(2);
  return kernels::repack_weight(copy_of(w), pool);
}

// y starts as NaN: a loop that read y before writing it (the packed bf16 loops keep partial sums
// there between slices of K) would show.
std::vector<float> run_matmul(const Tensor& x, const Tensor& w, int threads, const Tensor* bias = nullptr) {
  ThreadPool pool(threads);
  Tensor y = Tensor::host(DType::F32, Shape{x.dim(0), w.dim(0)}, "y");
  std::fill_n(y.data_as<float>(), y.numel(), std::nanf(""));
  kernels::matmul(x, w, bias, y, pool);
  return values_of(y);
}

// Whether the active level's packed kernels take this type (else matmul unpacks the rows).
bool level_has_packed_kernels(DType dtype) {
  const kernels::cpu::Isa& isa = kernels::cpu::active_isa();
  return isa.matmul_packed != nullptr && (isa.packed_types == nullptr || isa.packed_types(dtype));
}

// The levels that repack the float types (every vector level), q8_0 / q4_0 / q4_k / q5_k / q6_k (avx2's
// packed loops, which avxvnni and avx512 take too, the AVX-512 dot levels', amx's: q5_k and q6_k amx keeps as stored)
// and every other block type (the AVX-512 dot levels and amx, which keeps some as stored).
bool packs_floats(const std::string& level) {
  return level != "scalar";
}
bool packs_blocks(const std::string& level) {
  return level == "avx512vnni" || level == "avx512bf16" || level == "amx";
}
bool packs_256_bit_types(const std::string& level) {
  return packs_blocks(level) || level == "avx2" || level == "avxvnni" || level == "avx512";
}

// x as the matmul against `dtype` multiplies it in q8_0 mode: rounded to q8_0, q8_K or bf16, or
// (f16, f32) as it is.
RefRounded rounded_x(DType dtype, const std::vector<float>& row) {
  RefRounded r;
  if (dtype == DType::F16 || dtype == DType::F32) {
    r.x.assign(row.begin(), row.end());
    return r;
  }
  if (dtype != DType::BF16) return ref_round_activations(dtype, row);
  for (float v : row) r.x.push_back(bf16_to_f32(f32_to_bf16(v)));
  return r;
}

}  // namespace

TEST(PackedWeights, LayoutIsTheSpecifiedOneAndUnpacksToTheSameRows) {
  // packed_weights.h: q8_0 / q4_0 / iq4_nl per 16-row group scales [block][row] as f16, then 4-byte units
  // [unit][row] of the rows' quant bytes in order (q4_1, q5_1: their mins after the scales; q5_0, q5_1: each
  // block's fifth bits in a unit before its units); q4_k per super-block d, dmin, 12 scale planes
  // and qs units (q5_k: its qh units between; iq4_xs: d, 6 scale planes, qs units; q3_k: d, 12 scale planes, hmask
  // units, qs units; q2_k: d, dmin, 16 scale planes, qs units); q6_k per super-block d, 16 scale
  // planes and 4 quads of units of 6-bit values with a fourth's bits above them; bf16 units [pair][row] of two
  // elements; f16 and f32 [element][row].
  for (DType dtype : kPackable) {
    const int64_t N = 32, K = packable_k(dtype, is_super_block_type(dtype) ? 16 : 3);
    const Tensor w = random_weight(dtype, N, K, 21);
    const Tensor p = packed_copy(w);
    ASSERT_EQ(p.layout(), Layout::Packed);
    ASSERT_EQ(w.layout(), Layout::Rows);
    const size_t row_bytes = w.row_bytes();
    const auto* packed = static_cast<const uint8_t*>(p.data());
    if (dtype == DType::Q6_K) {
      std::vector<uint8_t> expected(static_cast<size_t>(N) * row_bytes);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t s = 0; s < K / 256; ++s) {
          write_q6_k_section(static_cast<const uint8_t*>(w.row(n)) + s * 210, n % 16,
                             expected.data() + static_cast<size_t>(n / 16) * 16 * row_bytes + s * 16 * 210);
        }
      }
      ASSERT_EQ(expected, std::vector<uint8_t>(packed, packed + expected.size()));
    }
    for (int64_t n = 0; n < N && dtype != DType::Q6_K; ++n) {
      const auto* row = static_cast<const uint8_t*>(w.row(n));
      const auto* group = packed + static_cast<size_t>(n / 16) * 16 * row_bytes;
      if (has_fifth_bits(dtype)) expect_fifth_bits_in_their_unit(dtype, K, n % 16, row, group);
      for (int64_t i = 0; i < static_cast<int64_t>(row_bytes); ++i) {
        const size_t at = packed_position(dtype, K, n % 16, i);
        if (at == kMovedBitByBit) continue;
        ASSERT_LT(at, 16 * row_bytes);
        ASSERT_EQ(group[at], row[i]) << dtype_name(dtype) << " row " << n << " byte " << i;
      }
    }
    // Embedding and to_f32 read the packed rows as the original ones, at every level.
    SimdLevelGuard guard;
    ThreadPool pool(2);
    for (const std::string& level : kernels::available_simd_levels()) {
      kernels::set_simd_level(level);
      Tensor from_rows = Tensor::host(DType::F32, Shape{N, K}, "a");
      Tensor from_packed = Tensor::host(DType::F32, Shape{N, K}, "b");
      kernels::to_f32(w, from_rows, pool);
      kernels::to_f32(p, from_packed, pool);
      EXPECT_EQ(values_of(from_rows), values_of(from_packed)) << dtype_name(dtype) << " " << level;
      const std::vector<int32_t> ids{31, 0, 17, 16, 15};
      Tensor e_rows = Tensor::host(DType::F32, Shape{5, K}, "e");
      Tensor e_packed = Tensor::host(DType::F32, Shape{5, K}, "f");
      kernels::embedding(w, i32_tensor(ids), e_rows, pool);
      kernels::embedding(p, i32_tensor(ids), e_packed, pool);
      EXPECT_EQ(values_of(e_rows), values_of(e_packed)) << dtype_name(dtype) << " " << level;
    }
  }
}

TEST(PackedWeights, MatmulMatchesReferenceAtEveryLevel) {
  // The bound of test_matmul.cpp's check_matmul: 1e-5 of sum |x_k w_k| per output. Levels
  // without packed kernels, and x kept f32, read the rows unpacked.
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (kernels::Q8Activations mode : {kernels::Q8Activations::Q8_0, kernels::Q8Activations::F32}) {
      kernels::set_q8_0_activations(mode);
      for (DType dtype : kPackable) {
        for (auto [M, blocks, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 16},
                                    {3, 3, 48},
                                    {5, 2, 32},
                                    {17, 4, 16},
                                    {35, 128, 32},
                                    {7, 140, 80},
                                    {197, 4, 32}}) {
          const int64_t K = packable_k(dtype, blocks);
          const auto xv = random_floats(static_cast<size_t>(M * K), 31);
          const Tensor x = f32_tensor(Shape{M, K}, xv, "x");
          const Tensor w = random_weight(dtype, N, K, 32);
          const Tensor p = packed_copy(w);
          const auto bv = random_floats(static_cast<size_t>(N), 33);
          const Tensor bias = f32_tensor(Shape{N}, bv, "bias");
          const bool with_bias = M % 2 == 1;
          const auto y = run_matmul(x, p, 2, with_bias ? &bias : nullptr);
          const auto* wp = static_cast<const uint8_t*>(w.data());
          for (int64_t m = 0; m < M; ++m) {
            const std::vector<float> row(xv.begin() + m * K, xv.begin() + (m + 1) * K);
            RefRounded xe;
            if (mode == kernels::Q8Activations::Q8_0) {
              xe = rounded_x(dtype, row);  // q8_0, q8_K for the k-quants, bf16
            } else {
              xe.x.assign(row.begin(), row.end());
            }
            for (int64_t n = 0; n < N; ++n) {
              double magnitude = 0.0;
              const double dot = ref_dot_rounded(dtype, wp + n * w.row_bytes(), xe, &magnitude);
              const double b = with_bias ? bv[static_cast<size_t>(n)] : 0.0;
              magnitude += std::fabs(b);
              ASSERT_NEAR(y[static_cast<size_t>(m * N + n)], dot + b, 1e-5 * magnitude + 1e-30)
                  << dtype_name(dtype) << " " << level << " M " << M << " K " << K << " N " << N << " at (" << m << ", "
                  << n << ")";
            }
          }
        }
      }
    }
  }
}

// Every quant at its largest magnitude and every scale at its largest, so the packed loops' int16
// sums meet their bounds (avx2_packed_blocks.h: q4_0, q4_1 and q4_k 30480, q5_k 31496 over 4 units,
// q5_0 / q5_1 15748 a unit, q6_k 32004 over 2, q8_0 2 * 128 * 127 per pair, iq4 2 * 127 * 127, q3_k 7112 over
// a sub-block of 16) against x all +1,
// all -1 (rounded to +-127) and alternating: bytes 0xFF (q8_0's quants -128, q6_k's scales 127 or -128, iq4_xs's
// scales 31), the f16 fields 2^-7.
Tensor extreme_weight(DType dtype, int64_t N, int64_t K) {
  Tensor w = Tensor::host(dtype, Shape{N, K}, "w");
  auto* p = static_cast<uint8_t*>(w.data());
  std::memset(p, 0xFF, w.nbytes());
  const size_t block = dtype_traits(dtype).block_bytes;
  const uint16_t small = 0x2000;
  for (size_t b = 0; b < w.nbytes() / block; ++b) {
    uint8_t* blk = p + b * block;
    if (dtype == DType::Q6_K) {
      auto* q6 = reinterpret_cast<BlockQ6_K*>(blk);
      std::memset(q6->scales, b % 2 == 0 ? 0x7F : 0x80, sizeof(q6->scales));
      q6->d = small;
    } else if (dtype == DType::Q2_K) {  // sc and m 15, q 3
      auto* q2 = reinterpret_cast<BlockQ2_K*>(blk);
      q2->d = q2->dmin = small;
    } else if (dtype == DType::Q3_K) {  // sc 31, q + 4 = 7
      reinterpret_cast<BlockQ3_K*>(blk)->d = small;
    } else {
      std::memcpy(blk, &small, 2);
      // dmin, m
      if (dtype == DType::Q4_K || dtype == DType::Q5_K || has_block_mins(dtype)) std::memcpy(blk + 2, &small, 2);
      if (dtype == DType::Q8_0) std::memset(blk + 2, 0x80, 32);
      // iq4: both nibbles of a byte at one end of the table, index 0 (-127) in even rows, 15 (113, the largest
      // + 128) in odd ones (an int16 sum wrapped by as much the other way in the row's next block would cancel).
      const int iq4_end = b / (w.row_bytes() / block) % 2 == 0 ? 0x00 : 0xFF;
      if (dtype == DType::IQ4_NL) std::memset(blk + 2, iq4_end, 16);
      if (dtype == DType::IQ4_XS) std::memset(blk + 8, iq4_end, 128);
    }
  }
  return w;
}

TEST(PackedWeights, ExtremeQuantsStayExactAtEveryLevel) {
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  kernels::set_q8_0_activations(kernels::Q8Activations::Q8_0);
  int checked = 0;
  for (DType dtype : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS,
                      DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    // The three rows of x over and over, so the batch reaches the folded panels too (kFoldedMinRows).
    const int64_t M = 18, N = 32, K = packable_k(dtype, 16);
    std::vector<float> xv(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = 0; k < K; ++k) {
        const float v = m % 3 == 0 ? 1.0f : m % 3 == 1 ? -1.0f : k % 2 == 0 ? 1.0f : -1.0f;
        xv[static_cast<size_t>(m * K + k)] = v;
      }
    }
    const Tensor x = f32_tensor(Shape{M, K}, xv, "x");
    const Tensor w = extreme_weight(dtype, N, K);
    const Tensor p = packed_copy(w);
    for (const std::string& level : kernels::available_simd_levels()) {
      kernels::set_simd_level(level);
      if (!level_has_packed_kernels(dtype)) continue;
      ++checked;
      for (int64_t rows : {M, int64_t{3}, int64_t{1}}) {  // batches, and decode's loop on the first row
        const std::vector<float> part(xv.begin(), xv.begin() + rows * K);
        const auto y = run_matmul(f32_tensor(Shape{rows, K}, part, "xr"), p, 1);
        for (int64_t m = 0; m < rows; ++m) {
          const RefRounded xe = rounded_x(dtype, std::vector<float>(xv.begin() + m * K, xv.begin() + (m + 1) * K));
          for (int64_t n = 0; n < N; ++n) {
            double magnitude = 0.0;
            const double dot =
                ref_dot_rounded(dtype, static_cast<const uint8_t*>(w.data()) + n * w.row_bytes(), xe, &magnitude);
            ASSERT_NEAR(y[static_cast<size_t>(m * N + n)], dot, 1e-5 * magnitude + 1e-30)
                << dtype_name(dtype) << " " << level << " rows " << rows << " at (" << m << ", " << n << ")";
          }
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no level with packed kernels for these types on this CPU";
}

TEST(PackedWeights, ResultsAreBitIdenticalForEveryBatchSplitAndPackedLevel) {
  // One order of sums per output (isa.h matmul_packed): a row alone (decode: 4 groups of rows at
  // once where a thread's range has them, N = 80 has a fifth), in small batches (the vector loops) and in a batch of 37
  // (amx: tiles, two blocks in flight, for q8_0 / q4_0 here an odd number of blocks) gives the same bits, with a bias,
  // for 1 to 3 threads, and every level with packed kernels gives the same bits as the others (amx's packed iq4_nl,
  // q2_k, q3_k, q5_k, q6_k and iq4_xs: the vector loops at every batch). The small batches reach each tile of the
  // panels' loops (the blocks of 32 and iq4_xs: 6, 4 and 2 rows of a 16-row panel, one or two groups as the threads
  // split N) and each remainder of the rows' batches of 8 (q4_k, q5_k: 4); the k-quants from 16 rows on take the
  // folded panels of the AVX-512 VNNI levels and of avxvnni (tiles of 8 or 6 rows, the last partly empty; K of 6
  // super-blocks, so a slice of 4 or 2 and a last one of 2). bf16 (by vdpbf16ps where the level has BF16
  // dot products, else by FMAs, its two steps), f16 and f32: tiles of 6 rows (AVX-512 FMAs: 8, f16 10) and each
  // remainder, 1 and 2 groups (the threads' ranges; FloatCallsTakeThePackedKernels runs more at once), 200 rows (two
  // blocks of rows) and a K of two slices (partial sums kept in y between them).
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  kernels::set_q8_0_activations(kernels::Q8Activations::Q8_0);
  int packed_levels = 0;
  for (DType dtype : kPackable) {
    const bool floats = is_float_type(dtype);
    const int64_t M = floats ? 200 : 37, K = floats ? 4200 : is_super_block_type(dtype) ? 1536 : 352, N = 80;
    const auto xv = random_floats(static_cast<size_t>(M * K), 41);
    const Tensor x = f32_tensor(Shape{M, K}, xv, "x");
    const Tensor p = packed_copy(random_weight(dtype, N, K, 42));
    const Tensor bias = f32_tensor(Shape{N}, random_floats(static_cast<size_t>(N), 43), "bias");
    std::vector<float> first_level;
    for (const std::string& level : kernels::available_simd_levels()) {
      kernels::set_simd_level(level);
      if (!level_has_packed_kernels(dtype)) continue;
      ++packed_levels;
      const std::string where = std::string(dtype_name(dtype)) + " " + level;
      const auto batch = run_matmul(x, p, 2, &bias);
      if (first_level.empty()) first_level = batch;
      EXPECT_EQ(batch, first_level) << where << ": another level's bits";
      EXPECT_EQ(batch, run_matmul(x, p, 1, &bias)) << where << " 1 thread";
      EXPECT_EQ(batch, run_matmul(x, p, 3, &bias)) << where << " 3 threads";
      for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 9, 16, 17}) {
        for (int64_t first : {int64_t{0}, M - rows}) {
          const std::vector<float> part(xv.begin() + first * K, xv.begin() + (first + rows) * K);
          for (int threads : {1, 2, 3}) {
            const auto y = run_matmul(f32_tensor(Shape{rows, K}, part, "xr"), p, threads, &bias);
            EXPECT_EQ(y, std::vector<float>(batch.begin() + first * N, batch.begin() + (first + rows) * N))
                << where << " rows " << first << ".." << first + rows - 1 << ", " << threads << " threads";
          }
        }
      }
    }
  }
  if (packed_levels == 0) GTEST_SKIP() << "no level with packed kernels (avx2 and above) on this CPU";
}

TEST(PackedWeights, BatchesAgainstBlocksOf32GetTheLevelsCopyOfX) {
  // Batches against the packed blocks of 32 are fast on x in the level's own copy (panels, or
  // amx's tiles); without it they still give the same bits, a row at a time, so no other test
  // would notice a level that stopped making it. One row (decode) reads x in rows.
  SimdLevelGuard guard;
  int checked = 0;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    const kernels::cpu::Isa& isa = kernels::cpu::active_isa();
    if (!packs_blocks(level)) continue;  // avx2, avxvnni: x in rows for their q8_0, q4_0 and q4_k
    ++checked;
    ASSERT_NE(isa.packed_x_size, nullptr) << level;
    for (DType dtype :
         {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS}) {
      for (int64_t rows : {1, 2, 5, 37}) {
        kernels::cpu::MatmulArgs a;
        a.w_type = dtype;
        a.w_packed = true;
        a.M = rows;
        a.call_rows = rows;
        a.K = dtype == DType::IQ4_XS ? 256 : 64;
        size_t bytes = 0, scales = 0;
        isa.packed_x_size(a, &bytes, &scales);
        EXPECT_EQ(bytes > 0, rows > 1) << level << " " << dtype_name(dtype) << " " << rows << " rows";
        EXPECT_EQ(scales > 0, rows > 1) << level << " " << dtype_name(dtype) << " " << rows << " rows";
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no level with packed kernels (avx512vnni and above) on this CPU";
}

TEST(PackedWeights, FloatCallsTakeThePackedKernels) {
  // Packed bf16, f16 and f32 read back as rows give results within the reference's bound all the
  // same (another order of sums), so only the bits show which loops ran: matmul's must be the
  // level's packed kernels' on the same x (bf16: rounded, as bf16 where the level has BF16 dot
  // products, else widened to f32; f16, f32: as it is). The direct call takes the whole range at once, which the
  // threads' splits of matmul never do at these sizes: a row (decode) runs 4 streams of 2 groups and
  // a ninth alone, a batch blocks of 4 groups and one of 1 (FMAs: 4 of 2 and one of 1), over two
  // slices of K and (200 rows) two blocks of rows; matmul's splits run them 1 or 2 groups at a time.
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  kernels::set_q8_0_activations(kernels::Q8Activations::Q8_0);
  int checked = 0;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    if (!level_has_packed_kernels(DType::F32)) continue;
    ++checked;
    const kernels::cpu::Isa& isa = kernels::cpu::active_isa();
    const int64_t K = 4200, N = 144;
    for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
      ASSERT_TRUE(level_has_packed_kernels(dtype)) << level << " " << dtype_name(dtype);
      const Tensor p = packed_copy(random_weight(dtype, N, K, 72));
      const auto bv = random_floats(static_cast<size_t>(N), 73);
      const Tensor bias = f32_tensor(Shape{N}, bv, "bias");
      for (int64_t M : {1, 7, 200}) {
        const auto xv = random_floats(static_cast<size_t>(M * K), 71);
        std::vector<uint16_t> xb(static_cast<size_t>(M * K));
        std::vector<float> x_in = xv;
        if (dtype == DType::BF16) {
          for (size_t i = 0; i < xv.size(); ++i) {
            xb[i] = f32_to_bf16(xv[i]);
            x_in[i] = bf16_to_f32(xb[i]);
          }
        }
        std::vector<float> direct(static_cast<size_t>(M * N), std::nanf(""));
        kernels::cpu::MatmulArgs a;
        a.w_type = dtype;
        a.x = x_in.data();
        a.M = a.call_rows = M;
        a.K = a.x_stride = K;
        a.w = static_cast<const uint8_t*>(p.data());
        a.w_row_bytes = p.row_bytes();
        a.w_packed = true;
        if (dtype == DType::BF16 && isa.round_row_bf16 != nullptr) a.xb = xb.data();
        a.bias = bv.data();
        a.y = direct.data();
        a.y_stride = N;
        isa.matmul_packed(a, 0, N);
        EXPECT_EQ(run_matmul(f32_tensor(Shape{M, K}, xv, "x"), p, 2, &bias), direct)
            << dtype_name(dtype) << " " << level << " M " << M;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no level with packed kernels (avx2 and above) on this CPU";
}

TEST(PackedWeights, Q4KAndQ5KTilesGiveTheBitsOfThePackedWeights) {
  // amx: q4_k's and q5_k's tiles on the rows as stored take the packed kernels' operations (int32
  // sums per super-block, then two f32 steps), so a batch gives the same bits as against the packed
  // copy (q4_k: amx's packed tiles; q5_k: the vector loops, amx having no packed q5_k tiles; through
  // the bit-identity above, every packed level's). 21 rows of x: a partial tile; 3 super-blocks, 48
  // rows over 2 threads.
  SimdLevelGuard guard;
  Q8ActivationsGuard mode_guard;
  kernels::set_q8_0_activations(kernels::Q8Activations::Q8_0);
  const auto levels = kernels::available_simd_levels();
  if (std::find(levels.begin(), levels.end(), "amx") == levels.end()) GTEST_SKIP() << "no amx level on this CPU";
  kernels::set_simd_level("amx");
  const int64_t M = 21, K = 768, N = 48;
  const Tensor x = f32_tensor(Shape{M, K}, random_floats(static_cast<size_t>(M * K), 61), "x");
  const Tensor bias = f32_tensor(Shape{N}, random_floats(static_cast<size_t>(N), 63), "bias");
  for (DType dtype : {DType::Q4_K, DType::Q5_K}) {
    const Tensor w = random_weight(dtype, N, K, 62);
    EXPECT_EQ(run_matmul(x, packed_copy(w), 2, &bias), run_matmul(x, w, 2, &bias)) << dtype_name(dtype);
  }
}

TEST(PackedWeights, WhichWeightsArePacked) {
  SimdLevelGuard guard;
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    // What the level's packed kernels take (the rest is unpacked for its row loops): every
    // packable type from avx512vnni up (amx: those without tiles by the vector loops), whatever it
    // repacks itself, since a weight may come packed by another level.
    for (DType dtype : kPackable) {
      const bool avx2_type = !is_float_type(dtype);
      const bool expected = packs_blocks(level) || (avx2_type && packs_256_bit_types(level)) ||
                            (is_float_type(dtype) && packs_floats(level));
      EXPECT_EQ(level_has_packed_kernels(dtype), expected) << level << " " << dtype_name(dtype);
    }
    EXPECT_EQ(kernels::repacks_weight(DType::Q8_0, Shape{32, 64}), packs_256_bit_types(level)) << level;
    EXPECT_EQ(kernels::repacks_weight(DType::Q4_0, Shape{4096, 4096}), packs_256_bit_types(level)) << level;
    EXPECT_EQ(kernels::repacks_weight(DType::Q4_K, Shape{32, 256}), packs_256_bit_types(level)) << level;
    // amx keeps q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q5_k, q6_k and iq4_xs as stored: its tiles take the rows (amx.cpp
    // amx_repacks).
    for (DType blocks_of_32 : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL}) {
      EXPECT_EQ(kernels::repacks_weight(blocks_of_32, Shape{32, 64}), packs_256_bit_types(level) && level != "amx")
          << level << " " << dtype_name(blocks_of_32);
    }
    for (DType avx2_super_block : {DType::Q2_K, DType::Q3_K, DType::IQ4_XS, DType::Q5_K, DType::Q6_K}) {
      EXPECT_EQ(kernels::repacks_weight(avx2_super_block, Shape{32, 256}), packs_256_bit_types(level) && level != "amx")
          << level << " " << dtype_name(avx2_super_block);
    }
    EXPECT_FALSE(kernels::repacks_weight(DType::IQ4_XS, Shape{32, 224})) << level << ": not whole super-blocks";
    EXPECT_FALSE(kernels::repacks_weight(DType::Q6_K, Shape{32, 320})) << level << ": not whole super-blocks";
    EXPECT_FALSE(kernels::repacks_weight(DType::Q8_0, Shape{33, 64})) << level << ": not whole groups of 16 rows";
    EXPECT_FALSE(kernels::repacks_weight(DType::Q8_0, Shape{64})) << level << ": a vector";
    EXPECT_FALSE(kernels::repacks_weight(DType::Q3_K, Shape{32, 480})) << level << ": not whole super-blocks";
    // bf16 too (vdpbf16ps, or FMAs on avx512vnni), amx keeping its rows for its tiles; f16 and f32 (FMAs) at every
    // level with packed kernels.
    EXPECT_EQ(kernels::repacks_weight(DType::BF16, Shape{32, 66}), packs_floats(level) && level != "amx") << level;
    for (DType floats : {DType::F16, DType::F32}) {
      EXPECT_EQ(kernels::repacks_weight(floats, Shape{32, 66}), packs_floats(level))
          << level << " " << dtype_name(floats);
    }
    for (DType floats : {DType::BF16, DType::F16, DType::F32})
      EXPECT_FALSE(kernels::repacks_weight(floats, Shape{32, 65}))
          << level << " " << dtype_name(floats) << ": an odd K";
  }
  // The packed kernels take x rounded to q8_0: with f32 activations nothing is packed but f16 and f32, whose kernels
  // take x as it is.
  Q8ActivationsGuard mode_guard;
  kernels::set_q8_0_activations(kernels::Q8Activations::F32);
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    EXPECT_FALSE(kernels::repacks_weight(DType::Q8_0, Shape{32, 64})) << level << " with f32 activations";
    EXPECT_FALSE(kernels::repacks_weight(DType::BF16, Shape{32, 66})) << level << " with f32 activations";
    for (DType floats : {DType::F16, DType::F32}) {
      EXPECT_EQ(kernels::repacks_weight(floats, Shape{32, 66}), packs_floats(level))
          << level << " " << dtype_name(floats) << " with f32 activations";
    }
  }
}

TEST(PackedWeights, OtherKernelsAndReshapeRefuseAPackedWeight) {
  ThreadPool pool(1);
  Tensor p = packed_copy(random_weight(DType::Q8_0, 16, 32, 51));
  expect_error(ErrorKind::Internal, [&] { (void)p.reshape(Shape{32, 16}); }, {"'w'", "repacked"});
  Tensor out = Tensor::host(DType::F32, Shape{16, 32}, "out");
  Tensor ones = f32_tensor(Shape{16, 32}, std::vector<float>(16 * 32, 1.0f), "ones");
  std::vector<Tensor*> inputs{&p, &ones};
  expect_error(ErrorKind::Internal, [&] { kernels::compute(Op::Add, std::monostate{}, inputs, out, pool); },
               {"add", "'w'", "repacked weight"});
  Tensor rows = random_weight(DType::Q2_K, 8, 256, 52);
  expect_error(ErrorKind::Internal, [&] { (void)kernels::repack_weight(rows, pool); },
               {"'w'", "q2_k", "16-row groups"});
  Tensor odd_f16 = random_weight(DType::F16, 16, 255, 54);
  expect_error(ErrorKind::Internal, [&] { (void)kernels::repack_weight(odd_f16, pool); },
               {"'w'", "f16", "even number of columns"});
}
