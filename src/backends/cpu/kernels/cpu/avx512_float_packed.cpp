// Packed bf16, f16 and f32 weights on AVX-512 (avx512_float_packed.h): simd_float_packed.h's loops
// with 16 lanes, a group in one vector. Batches take tiles of a few rows of x by a few groups
// (vdpbf16ps 6 x 4, bf16 by FMA 8 x 2, f16 10 x 2: 16-24 accumulators; on an Intel Xeon bf16 by FMA
// in 6 x 3 and 4 x 4 ran 0.72 of the FMA peak where 8 x 2 ran 0.77, and f16 0.63 in 8 x 2, 0.71 in
// 10 x 2: more rows of x per conversion, f16's vcvtph2ps taking two vector ports' slots), the weight
// rows' slice of K (512 KiB for 4 groups) staying in L2 while a block of rows of x passes.
#include "backends/cpu/kernels/cpu/avx512_float_packed.h"

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")
#endif

#include "backends/cpu/kernels/cpu/simd_float_packed.h"

namespace ferry::kernels::cpu {
namespace {

// simd_float_packed.h's vectors: a group's 16 rows in one.
struct PackedFloat512 {
  using V = __m512;
  static constexpr int kVectors = 1;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fma(V a, V b, V acc) { return _mm512_fmadd_ps(a, b, acc); }
  static V load_f16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V bf16_odd(const uint8_t* p) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static V bf16_even(const uint8_t* p) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16)); }
  using Bf16Pairs = __m512bh;
  static Bf16Pairs load_bf16_pairs(const uint8_t* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }
  static Bf16Pairs broadcast_bf16_pair(int32_t pair) { return reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair)); }
  static V dot_bf16(V acc, Bf16Pairs x, Bf16Pairs w) { return _mm512_dpbf16_ps(acc, x, w); }
};

}  // namespace

void matmul_packed_float(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  using float_packed::packed_units;
  using float_packed::UnitOp;
  if (a.w_type == DType::F32) return packed_units<PackedFloat512, UnitOp::F32Fma, 8, 2>(a, n_begin, n_end);
  if (a.w_type == DType::F16) return packed_units<PackedFloat512, UnitOp::F16Fma, 10, 2>(a, n_begin, n_end);
  if (a.xb != nullptr) return packed_units<PackedFloat512, UnitOp::Bf16Dot, 6, 4>(a, n_begin, n_end);
  packed_units<PackedFloat512, UnitOp::Bf16Fma, 8, 2>(a, n_begin, n_end);
}

}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang
