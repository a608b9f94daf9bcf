// AVX-512 (F, BW, VL, DQ) + FMA + F16C inner loops: 16 floats per vector, weights converted to
// f32 in registers (bf16 by a shift, f16 by vcvtph2ps, q8_0/q4_0 as d * q, which is exact), or
// for q8_0/q4_0 against activations rounded to q8_0, exact integer products per block.
// GCC 12 reports -Wuninitialized inside its own AVX-512 intrinsics, which start from an undefined
// vector (GCC bug 105593). Silence it for the intrinsic header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cmath>  // before the target region: std headers must not be compiled for AVX-512
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AVX512 1

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

#include "backends/cpu/kernels/cpu/simd_kernels.h"
// After simd_kernels.h: the block types' matmul uses its f32 dot product.
#include "backends/cpu/kernels/cpu/simd_blocks.h"
// After both: the traits use their helpers.
#include "backends/cpu/kernels/cpu/avx512_traits.h"

namespace ferry::kernels::cpu {
namespace {

void matmul_avx512(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (is_block_type(a.w_type)) return blocks::matmul<Avx512, V512, 4>(a, n_begin, n_end);
  simd::matmul<Avx512, 4>(a, n_begin, n_end);
}
void row_to_f32_avx512(DType type, const void* src, float* dst, int64_t n) {
  simd::row_to_f32<Avx512>(type, src, dst, n, f16_table(), row_to_f32_scalar);
}
void attention_avx512(const AttentionHeads& r) {
  simd::attention<Avx512>(r);
}
float sum_f32_avx512(const float* p, int64_t n) {
  return simd::sum_f32<Avx512>(p, n);
}

}  // namespace
}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang

namespace ferry::kernels::cpu {
const Isa* avx512_isa() {
#ifdef FERRY_HAVE_AVX512
  static const Isa isa{
      "avx512", matmul_avx512, row_to_f32_avx512, attention_avx512, sum_f32_avx512, quantize_row_q8_0_avx512, nullptr};
  return &isa;
#else
  return nullptr;
#endif
}
}  // namespace ferry::kernels::cpu
