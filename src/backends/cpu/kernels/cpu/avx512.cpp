// AVX-512 (F, BW, VL, DQ) + FMA + F16C inner loops: 16 floats per vector, weights converted to
// f32 in registers (bf16 by a shift, f16 by vcvtph2ps, q8_0/q4_0 as d * q, which is exact), or
// for q8_0/q4_0 against activations rounded to q8_0, exact integer products per block. Packed
// bf16, f16 and f32 (repacked at load) take avx512_float_packed.cpp's FMA loops, the packed
// quantized types avx2's vpmaddubsw loops (avx2_packed.h), 256 bits wide: without VNNI their
// prefill ran 1.1-2.5x this level's own loops on the rows here.
#include <cmath>  // before the target region: std headers must not be compiled for AVX-512
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/avx2_packed.h"
#include "backends/cpu/kernels/cpu/avx512_float_packed.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"
#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AVX512 1

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

#include "backends/cpu/kernels/cpu/simd_elementwise.h"
#include "backends/cpu/kernels/cpu/simd_kernels.h"
#include "backends/cpu/kernels/cpu/simd_prompt_attention.h"
// After simd_kernels.h: the block types' matmul uses its f32 dot product.
#include "backends/cpu/kernels/cpu/simd_blocks.h"
// After both: the traits use their helpers.
#include "backends/cpu/kernels/cpu/avx512_traits.h"

namespace ferry::kernels::cpu {
namespace {

// As quantize_row_q8_0_split: amax / 127 as the step, x / step rounded half away from zero (the
// vector round goes to even; ties it took toward zero are moved out), NaN to 0.
void quantize_row_q8_0_avx512(const float* x, int64_t n, int8_t* q, float* scale) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 v[2] = {_mm512_loadu_ps(x + b * 32), _mm512_loadu_ps(x + b * 32 + 16)};
    // max(|v|, acc) keeps acc where |v| is NaN, as std::fmax does.
    __m512 amax = _mm512_setzero_ps();
    for (const __m512& part : v) amax = _mm512_max_ps(_mm512_andnot_ps(sign, part), amax);
    const float block_max = _mm512_reduce_max_ps(amax);
    const float d = block_max / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    scale[b] = q8_0_scale(block_max);
    for (int part = 0; part < 2; ++part) {
      const __m512 t = _mm512_mul_ps(v[part], id);
      __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 diff = _mm512_sub_ps(t, r);
      const __mmask16 tie = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, diff), _mm512_set1_ps(0.5f), _CMP_EQ_OQ) &
                            _mm512_cmp_ps_mask(_mm512_mul_ps(diff, t), _mm512_setzero_ps(), _CMP_GT_OQ);
      r = _mm512_mask_add_ps(r, tie, r, _mm512_add_ps(diff, diff));
      const __mmask16 in_range = _mm512_cmp_ps_mask(r, _mm512_set1_ps(-127.0f), _CMP_GE_OQ) &
                                 _mm512_cmp_ps_mask(r, _mm512_set1_ps(127.0f), _CMP_LE_OQ);
      r = _mm512_maskz_mov_ps(in_range, r);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + part * 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
  }
}

// As quantize_row_q8_K_split, bit for bit: the first element of greatest |x| (NaN never is) sets
// the step, -127 / it; each product rounded half to even as nearest_int, except a product that is
// not finite (a NaN x; an infinite x against a zero step; any x against an infinite step, where the
// greatest |x| is below 2^-121) which nearest_int's float trick turns into its mantissa bits less
// 2^22; above 127 clamped, then truncated to int8; the sums of each 16 quants.
void quantize_row_q8_K_avx512(const float* x, int64_t n, int8_t* q, float* scale, int16_t* bsum) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* v = x + b * kQK_K;
    int8_t* out = q + b * kQK_K;
    int16_t* sums = bsum + b * (kQK_K / 16);
    // max(|v|, acc) keeps acc where |v| is NaN, as the scalar's > does.
    __m512 amax = _mm512_setzero_ps();
    for (int c = 0; c < kQK_K / 16; ++c)
      amax = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(v + 16 * c)), amax);
    const float block_amax = _mm512_reduce_max_ps(amax);
    if (block_amax == 0.0f) {
      scale[b] = 0.0f;
      std::memset(out, 0, kQK_K);
      std::memset(sums, 0, sizeof(int16_t) * (kQK_K / 16));
      continue;
    }
    float max = 0.0f;
    for (int c = 0; c < kQK_K / 16; ++c) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(v + 16 * c)),
                                               _mm512_set1_ps(block_amax), _CMP_EQ_OQ);
      if (hit != 0) {
        max = v[16 * c + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 step = _mm512_set1_ps(iscale);
    for (int c = 0; c < kQK_K / 16; ++c) {
      const __m512 t = _mm512_mul_ps(_mm512_loadu_ps(v + 16 * c), step);
      const __m512i rounded = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i mantissa_bits = _mm512_sub_epi32(
          _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(0x7fffff)), _mm512_set1_epi32(0x400000));
      const __mmask16 not_finite = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, t), _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);
      const __m512i r =
          _mm512_min_epi32(_mm512_mask_mov_epi32(rounded, not_finite, mantissa_bits), _mm512_set1_epi32(127));
      const __m128i bytes = _mm512_cvtepi32_epi8(r);  // truncates, as the scalar's cast
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * c), bytes);
      sums[c] = static_cast<int16_t>(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(bytes)));
    }
    scale[b] = 1.0f / iscale;
  }
}

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
void prompt_attention_avx512(const AttentionHeads& r) {
  simd::prompt_attention<Avx512>(r);
}
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
  simd::swiglu<Avx512>(gate, up, out, n);
}
void round_row_f16_avx512(const float* x, int64_t n, uint16_t* out) {
  simd::round_row_f16<Avx512>(x, n, out);
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
#ifdef FERRY_HAVE_AVX512
namespace {
void matmul_packed_avx512(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (is_packed_float(a.w_type)) return matmul_packed_float(a, n_begin, n_end);
  matmul_packed_avx2(a, n_begin, n_end);
}
}  // namespace
#endif

const Isa* avx512_isa() {
#ifdef FERRY_HAVE_AVX512
  static const Isa isa{.name = "avx512",
                       .matmul = matmul_avx512,
                       .row_to_f32 = row_to_f32_avx512,
                       .attention = attention_avx512,
                       .prompt_attention = prompt_attention_avx512,
                       .sum_f32 = sum_f32_avx512,
                       .quantize_row_q8_0 = quantize_row_q8_0_avx512,
                       .quantize_row_q8_K = quantize_row_q8_K_avx512,
                       .swiglu = swiglu_avx512,
                       .round_row_f16 = round_row_f16_avx512,
                       .matmul_packed = matmul_packed_avx512,
                       .repacks = avx2_packed_type,
                       .packed_types = avx2_packed_type};
  return &isa;
#else
  return nullptr;
#endif
}
}  // namespace ferry::kernels::cpu
