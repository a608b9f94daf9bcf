// Packed weights on AVX2 (avx2_packed.h). A group's 16 rows are two vectors of 8 lanes (rows 0-7
// and 8-15), so no horizontal sums.
//   Floats: simd_float_packed.h's loops, 6 rows of x by one group, one half of a unit at a time:
//     12 accumulators, two vectors of weights and a broadcast of x in AVX2's 16 registers.
//   q8_0, q4_0: AVX2 has no byte dot product into int32 (VNNI), so per 4-byte unit of the rows
//     vpmaddubsw (unsigned by signed bytes, pairs summed into int16, saturating) then sums:
//       q8_0: |w| against x with w's signs moved onto it (vpsignb): pairs at most 2 * 128 * 127,
//             no saturation; widened to int32 by vpmaddwd against ones each unit, as a block's 8
//             units could reach 2^18;
//       q4_0: the stored nibbles (q + 8) against x: pairs at most 2 * 15 * 127, so a block's 8
//             pair sums stay in int16 (at most 30480) and are widened once per block, started
//             from -8 * (x's block sum, a.xq_block_sum).
//     Tiles of 4 rows of x by one group: the 8 integer sums of a block in registers, the f32 sums
//     in the tile's memory (L1), one fma per block and row.
#include "backends/cpu/kernels/cpu/avx2_packed.h"

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "backends/cpu/kernels/cpu/simd_float_packed.h"

namespace ferry::kernels::cpu {
namespace {

// simd_float_packed.h's vectors: a group's 16 rows in two, rows 0-7 and 8-15.
struct PackedFloat256 {
  using V = __m256;
  static constexpr int kVectors = 2;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fma(V a, V b, V acc) { return _mm256_fmadd_ps(a, b, acc); }
  static V load_f16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static V bf16_odd(const uint8_t* p) {
    return _mm256_castsi256_ps(_mm256_and_si256(load32(p), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static V bf16_even(const uint8_t* p) { return _mm256_castsi256_ps(_mm256_slli_epi32(load32(p), 16)); }
};

// Four bytes of x in every 32-bit lane.
inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// G groups of 16 weight rows (group[g], outputs from n0[g]) against MR rows of x from m0, x in rows.
template <DType T, int MR, int G>
void block_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  const int64_t blocks = a.K / 32;
  constexpr int64_t kUnits = T == DType::Q8_0 ? 8 : 4;  // 64-byte units of quants per block
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(15);
  // The f32 sums, in memory: the registers hold the block's integer ones.
  alignas(32) float acc[MR][G][16] = {};
  const int8_t* x = a.xq + m0 * a.K;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int g = 0; g < G; ++g) {
      const uint8_t* unit = group[g] + packed_block_quants_at(T, blocks, b);
      __m256i dot[MR][2];
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) dot[m][0] = dot[m][1] = _mm256_setzero_si256();
        // Not unrolled: GCC would reassociate the integer sums of a whole block into a tree and
        // keep its partial products on the stack.
#pragma GCC unroll 1
      for (int64_t c = 0; c < kUnits; ++c) {
        if (G > 1 && a.prefetch)
          _mm_prefetch(reinterpret_cast<const char*>(unit + c * 64 + kDecodePrefetchBytes), _MM_HINT_T0);
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + c * 64 + v * 32));
          if constexpr (T == DType::Q8_0) {
            const __m256i magnitude = _mm256_abs_epi8(w);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const __m256i signed_x = _mm256_sign_epi8(broadcast4(x + m * a.K + b * 32 + c * 4), w);
              dot[m][v] =
                  _mm256_add_epi32(dot[m][v], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), ones16));
            }
          } else {
            const __m256i low = _mm256_and_si256(w, low4);
            const __m256i high = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const int8_t* xb = x + m * a.K + b * 32 + c * 4;
              dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(low, broadcast4(xb)));
              dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(high, broadcast4(xb + 16)));
            }
          }
        }
      }
      const __m128i* scale_bits = reinterpret_cast<const __m128i*>(group[g] + b * 32);
      const __m256 w_scale[2] = {_mm256_cvtph_ps(_mm_loadu_si128(scale_bits)),
                                 _mm256_cvtph_ps(_mm_loadu_si128(scale_bits + 1))};
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const __m256 x_scale = _mm256_set1_ps(a.xq_scale[(m0 + m) * blocks + b]);
        const __m256i start =
            T == DType::Q4_0 ? _mm256_set1_epi32(-8 * a.xq_block_sum[(m0 + m) * blocks + b]) : _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
          __m256i sum = dot[m][v];
          if constexpr (T == DType::Q4_0) sum = _mm256_add_epi32(start, _mm256_madd_epi16(sum, ones16));
          float* out = acc[m][g] + 8 * v;
          _mm256_store_ps(
              out, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(w_scale[v], x_scale), _mm256_load_ps(out)));
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int v = 0; v < 2; ++v) {
      const __m256 bias = a.bias != nullptr ? _mm256_loadu_ps(a.bias + n0[g] + 8 * v) : _mm256_setzero_ps();
      for (int m = 0; m < MR; ++m) {
        _mm256_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g] + 8 * v,
                         _mm256_add_ps(_mm256_load_ps(acc[m][g] + 8 * v), bias));
      }
    }
  }
}

// One row of x (decode): kStreams groups at once from kStreams equal parts of the range, as many
// sequential streams in flight, then the rest one group at a time. Batches: tiles of kTileRows
// rows against each group, the rows' rest in a smaller tile.
template <DType T>
void packed_blocks(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  auto group_at = [&](int64_t n) { return a.w + static_cast<size_t>(n / kPackedRows) * group_bytes; };
  int64_t n = n_begin;
  if (a.M == 1) {
    constexpr int kStreams = 2;
    const int64_t part = (n_end - n_begin) / kPackedRows / kStreams * kPackedRows;
    for (int64_t i = 0; i < part; i += kPackedRows) {
      const int64_t n0[kStreams] = {n_begin + i, n_begin + part + i};
      const uint8_t* const group[kStreams] = {group_at(n0[0]), group_at(n0[1])};
      block_tile<T, 1, kStreams>(a, 0, group, n0);
    }
    n = n_begin + kStreams * part;
  }
  constexpr int64_t kTileRows = 4;
  for (; n < n_end; n += kPackedRows) {
    const int64_t n0[1] = {n};
    const uint8_t* const group[1] = {group_at(n)};
    int64_t m = 0;
    for (; m + kTileRows <= a.M; m += kTileRows) block_tile<T, kTileRows, 1>(a, m, group, n0);
    switch (a.M - m) {
      case 3:
        block_tile<T, 3, 1>(a, m, group, n0);
        break;
      case 2:
        block_tile<T, 2, 1>(a, m, group, n0);
        break;
      case 1:
        block_tile<T, 1, 1>(a, m, group, n0);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void matmul_packed_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  using float_packed::packed_units;
  using float_packed::UnitOp;
  if (a.w_type == DType::Q8_0) return packed_blocks<DType::Q8_0>(a, n_begin, n_end);
  if (a.w_type == DType::Q4_0) return packed_blocks<DType::Q4_0>(a, n_begin, n_end);
  if (a.w_type == DType::F32) return packed_units<PackedFloat256, UnitOp::F32Fma, 6, 1>(a, n_begin, n_end);
  if (a.w_type == DType::F16) return packed_units<PackedFloat256, UnitOp::F16Fma, 6, 1>(a, n_begin, n_end);
  packed_units<PackedFloat256, UnitOp::Bf16Fma, 6, 1>(a, n_begin, n_end);
}

}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang

namespace ferry::kernels::cpu {
bool avx2_packed_type(DType type) {
  return is_packed_float(type) || type == DType::Q8_0 || type == DType::Q4_0;
}
}  // namespace ferry::kernels::cpu
