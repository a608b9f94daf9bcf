// Packed weights on AVX2 (avx2_packed.h). A group's 16 rows are two vectors of 8 lanes (rows 0-7
// and 8-15), so no horizontal sums.
//   Floats: simd_float_packed.h's loops, 6 rows of x by one group, one half of a unit at a time:
//     12 accumulators, two vectors of weights and a broadcast of x in AVX2's 16 registers; bf16 5
//     rows, its mask taking the 16th (with 6, GCC kept two sums on the stack: 0.59-0.67 of the FMA
//     peak at 512 rows against 0.64-0.74).
//   The quantized types (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_k..q6_k): avx2_packed_blocks.h's
//     loops by vpmaddubsw.
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

#include "backends/cpu/kernels/cpu/avx2_packed_blocks.h"
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

// avx2_packed_blocks.h's products by vpmaddubsw.
struct BlocksAvx2 {
  static constexpr bool kVnni = false;
};

}  // namespace

void matmul_packed_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  using float_packed::packed_units;
  using float_packed::UnitOp;
  if (packed_blocks_256::packed_quantized<BlocksAvx2>(a, n_begin, n_end)) return;
  if (a.w_type == DType::F32) return packed_units<PackedFloat256, UnitOp::F32Fma, 6, 1>(a, n_begin, n_end);
  if (a.w_type == DType::F16) return packed_units<PackedFloat256, UnitOp::F16Fma, 6, 1>(a, n_begin, n_end);
  packed_units<PackedFloat256, UnitOp::Bf16Fma, 5, 1>(a, n_begin, n_end);
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
  return is_packable_type(type);
}
}  // namespace ferry::kernels::cpu
