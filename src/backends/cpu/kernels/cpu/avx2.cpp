// AVX2 + FMA + F16C inner loops: 8 floats per vector, weights converted to f32 in registers, or
// for q8_0/q4_0 against activations rounded to q8_0, exact integer products per block.
// Tails of plain-type rows go through a small zero-padded buffer (AVX2 has no byte-masked loads).
// Weights repacked at load (bf16, f16, f32, q8_0, q4_0) take avx2_packed.cpp's loops.
#include <immintrin.h>

#include <cmath>  // before the target region: std headers must not be compiled for AVX2
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/avx2_packed.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AVX2 1

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "backends/cpu/kernels/cpu/simd_elementwise.h"
#include "backends/cpu/kernels/cpu/simd_kernels.h"
#include "backends/cpu/kernels/cpu/simd_prompt_attention.h"
// After simd_kernels.h: the block types' matmul uses its f32 dot product.
#include "backends/cpu/kernels/cpu/simd_blocks.h"

namespace ferry::kernels::cpu {
namespace {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

struct Avx2 {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr bool kSignedQ4 = false;  // load_block_q gives q4_0's stored nibbles (q + 8)

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V acc) { return _mm256_fmadd_ps(a, b, acc); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V round(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V scale_by_pow2(V v, V n) {  // v * 2^n for n in [-126, 127] (exp clamps its input to that)
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(v, _mm256_castsi256_ps(bits));
  }
  static V zero_below(V v, V x, V limit) { return _mm256_and_ps(v, _mm256_cmp_ps(x, limit, _CMP_GE_OQ)); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V select_negative(V x, V a, V b) { return _mm256_blendv_ps(a, b, x); }  // b where x's sign is set
  static bool any_nan(V v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }
  static void store_f16(uint16_t* p, V v) {  // to nearest even; NaN keeps its payload's top bits
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static V load_x(const float* p) { return _mm256_loadu_ps(p); }
  static V load_x_partial(const float* p, int n) {
    float buf[W] = {};
    std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(float));
    return _mm256_loadu_ps(buf);
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_partial(float* p, V v, int n) {
    float buf[W];
    _mm256_storeu_ps(buf, v);
    std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(float));
  }

  static float hsum(V v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }

  // A block of x rounded to q8_0: its 32 quants as they are (for q4_0) and widened to int16 (for
  // q8_0), made once per block for all the rows of a tile.
  struct XQ {
    __m256i bytes, lo, hi;
  };
  static XQ load_xq(const int8_t* x) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    return {bytes, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(bytes)),
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256(bytes, 1))};
  }
  // The q8_0 weight quants at w against x's: the block's integer products summed in fours, as f32
  // lanes (exact: far below 2^24). Widening the weights to int16 for vpmaddwd measured 5% faster on
  // Zen 3 than vpmaddubsw, which needs the weights' signs moved onto x first.
  static V dot_q8(const uint8_t* w, const XQ& x) {
    const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16)));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(lo, x.lo), _mm256_madd_epi16(hi, x.hi)));
  }
  // q4_0 against x: vpmaddubsw takes q4_0's stored nibbles (q + 8, unsigned) as they are, and
  // 8 * x, summed in the same lanes once per block of x (q4_bias), is taken off after.
  using Q4Bias = __m256i;
  static Q4Bias q4_bias(const XQ& x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), x.bytes), _mm256_set1_epi16(1));
  }
  static V dot_q4(const uint8_t* qs, const XQ& x, Q4Bias bias) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i low = _mm_set1_epi8(15);
    // Elements 0..15 are the low nibbles of the 16 bytes, elements 16..31 the high ones.
    const __m256i nibbles = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), _mm_and_si128(bytes, low));
    const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles, x.bytes), _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, bias));
  }

  // Chunk c of a row: elements [8c, 8c + 8). Plain types only.
  template <DType T>
  static V load_w(const uint8_t* row, int64_t c) {
    if constexpr (T == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row + c * 32));
    } else if constexpr (T == DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 16)));
    } else {  // BF16
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 16));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }

  // Quantized block b: returns its scale in every lane; q[0..3] get its 32 stored integers.
  template <DType T>
  static V load_block_q(const uint8_t* row, int64_t b, V q[4], const float* f16_table) {
    if constexpr (T == DType::Q8_0) {
      const uint8_t* block = row + b * sizeof(BlockQ8_0);
      for (int part = 0; part < 4; ++part) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + part * 8));
        q[part] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
      }
      return _mm256_set1_ps(f16_table[load_u16(block)]);
    } else {  // Q4_0: chunks 0, 1 are the low nibbles of bytes 0..7, 8..15; chunks 2, 3 the high ones
      const uint8_t* block = row + b * sizeof(BlockQ4_0);
      for (int half = 0; half < 2; ++half) {
        const __m256i bytes =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + half * 8)));
        q[half] = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(15)));
        q[2 + half] = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
      }
      return _mm256_set1_ps(f16_table[load_u16(block)]);
    }
  }

  template <DType T>
  static V load_w_partial(const uint8_t* row, int64_t c, int n) {
    {
      constexpr size_t kSize = T == DType::F32 ? 4 : 2;
      alignas(32) uint8_t buf[W * 4] = {};  // zeros decode to 0.0f in all three types
      std::memcpy(buf, row + static_cast<size_t>(c) * W * kSize, static_cast<size_t>(n) * kSize);
      return load_w<T>(buf, 0);
    }
  }
};

// As quantize_row_q8_0_split: amax / 127 as the step, x / step rounded half away from zero (the
// vector round goes to even; ties it took toward zero are moved out), NaN to 0.
void quantize_row_q8_0_avx2(const float* x, int64_t n, int8_t* q, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    __m256 v[4];
    // max(|v|, acc) keeps acc where |v| is NaN, as std::fmax does.
    __m256 amax = _mm256_setzero_ps();
    for (int part = 0; part < 4; ++part) {
      v[part] = _mm256_loadu_ps(x + b * 32 + part * 8);
      amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[part]), amax);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float block_max = _mm_cvtss_f32(m);
    const float d = block_max / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    scale[b] = q8_0_scale(block_max);
    for (int part = 0; part < 4; ++part) {
      const __m256 t = _mm256_mul_ps(v[part], id);
      __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256 diff = _mm256_sub_ps(t, r);
      const __m256 tie = _mm256_and_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, diff), _mm256_set1_ps(0.5f), _CMP_EQ_OQ),
                                       _mm256_cmp_ps(_mm256_mul_ps(diff, t), _mm256_setzero_ps(), _CMP_GT_OQ));
      r = _mm256_add_ps(r, _mm256_and_ps(tie, _mm256_add_ps(diff, diff)));
      const __m256 in_range = _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(-127.0f), _CMP_GE_OQ),
                                            _mm256_cmp_ps(r, _mm256_set1_ps(127.0f), _CMP_LE_OQ));
      const __m256i i32 = _mm256_cvtps_epi32(_mm256_and_ps(r, in_range));
      const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + b * 32 + part * 8), _mm_packs_epi16(i16, i16));
    }
  }
}

// As quantize_row_q8_K_split, bit for bit (quantize_row_q8_K_avx512 says how), 8 lanes at a time.
void quantize_row_q8_K_avx2(const float* x, int64_t n, int8_t* q, float* scale, int16_t* bsum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* v = x + b * kQK_K;
    int8_t* out = q + b * kQK_K;
    int16_t* sums = bsum + b * (kQK_K / 16);
    __m256 amax = _mm256_setzero_ps();
    for (int c = 0; c < kQK_K / 8; ++c) amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * c)), amax);
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    const float block_amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    if (block_amax == 0.0f) {
      scale[b] = 0.0f;
      std::memset(out, 0, kQK_K);
      std::memset(sums, 0, sizeof(int16_t) * (kQK_K / 16));
      continue;
    }
    float max = 0.0f;
    for (int c = 0; c < kQK_K / 8; ++c) {
      const int hit = _mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * c)), _mm256_set1_ps(block_amax), _CMP_EQ_OQ));
      if (hit != 0) {
        max = v[8 * c + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 step = _mm256_set1_ps(iscale);
    for (int c = 0; c < kQK_K / 16; ++c) {
      __m256i r[2];
      for (int h = 0; h < 2; ++h) {
        const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(v + 16 * c + 8 * h), step);
        const __m256i rounded = _mm256_cvtps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i mantissa_bits = _mm256_sub_epi32(
            _mm256_and_si256(_mm256_castps_si256(t), _mm256_set1_epi32(0x7fffff)), _mm256_set1_epi32(0x400000));
        const __m256i not_finite =
            _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(sign, t), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
        // The low byte of each: the scalar's cast truncates.
        r[h] = _mm256_and_si256(
            _mm256_min_epi32(_mm256_blendv_epi8(rounded, mantissa_bits, not_finite), _mm256_set1_epi32(127)),
            _mm256_set1_epi32(0xff));
      }
      // packus works within 128-bit lanes: words [r0 0-3, r1 0-3, r0 4-7, r1 4-7] put in order.
      const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
      const __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * c), bytes);
      const __m256i wide = _mm256_madd_epi16(_mm256_cvtepi8_epi16(bytes), _mm256_set1_epi16(1));
      const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
      const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
      sums[c] = static_cast<int16_t>(_mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1))));
    }
    scale[b] = 1.0f / iscale;
  }
}

void matmul_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (is_block_type(a.w_type)) return blocks::matmul<Avx2, blocks::V256<Avx2>, 2>(a, n_begin, n_end);
  simd::matmul<Avx2, 2>(a, n_begin, n_end);
}
void row_to_f32_avx2(DType type, const void* src, float* dst, int64_t n) {
  simd::row_to_f32<Avx2>(type, src, dst, n, f16_table(), row_to_f32_scalar);
}
void attention_avx2(const AttentionHeads& r) {
  simd::attention<Avx2>(r);
}
void prompt_attention_avx2(const AttentionHeads& r) {
  simd::prompt_attention<Avx2>(r);
}
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  simd::swiglu<Avx2>(gate, up, out, n);
}
void round_row_f16_avx2(const float* x, int64_t n, uint16_t* out) {
  simd::round_row_f16<Avx2>(x, n, out);
}
float sum_f32_avx2(const float* p, int64_t n) {
  return simd::sum_f32<Avx2>(p, n);
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
const Isa* avx2_isa() {
#ifdef FERRY_HAVE_AVX2
  static const Isa isa{.name = "avx2",
                       .matmul = matmul_avx2,
                       .row_to_f32 = row_to_f32_avx2,
                       .attention = attention_avx2,
                       .prompt_attention = prompt_attention_avx2,
                       .sum_f32 = sum_f32_avx2,
                       .quantize_row_q8_0 = quantize_row_q8_0_avx2,
                       .quantize_row_q8_K = quantize_row_q8_K_avx2,
                       .swiglu = swiglu_avx2,
                       .round_row_f16 = round_row_f16_avx2,
                       .matmul_packed = matmul_packed_avx2,
                       .repacks = avx2_packed_type,
                       .packed_types = avx2_packed_type};
  return &isa;
#else
  return nullptr;
#endif
}
}  // namespace ferry::kernels::cpu
