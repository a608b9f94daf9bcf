// The AVX-512 (F, BW, VL, DQ) vector traits that simd_kernels.h and simd_blocks.h are written
// over, for the files of the AVX-512 levels (avx512.cpp; avx512_dot.cpp). Include only from inside
// such a file's target region, after simd_kernels.h and simd_blocks.h: each file gets its own
// copy, compiled for its instruction set. Its includes (x86_intrinsics.h, <cstdint>, <cstring>,
// quant.h, quant_blocks.h) come before the region.
#pragma once

namespace ferry::kernels::cpu {
namespace {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr bool kSignedQ4 = true;  // load_block_q gives q4_0's q, not q + 8

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V acc) { return _mm512_fmadd_ps(a, b, acc); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V round(V v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V scale_by_pow2(V v, V n) { return _mm512_scalef_ps(v, n); }  // v * 2^n
  static V zero_below(V v, V x, V limit) {                             // v where x >= limit, else 0
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, limit, _CMP_GE_OQ), v);
  }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V select_negative(V x, V a, V b) {  // b where x's sign is set
    return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(x)), a, b);
  }
  static bool any_nan(V v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0; }
  static void store_f16(uint16_t* p, V v) {  // to nearest even; NaN keeps its payload's top bits
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V load_x(const float* p) { return _mm512_loadu_ps(p); }
  static V load_x_partial(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_partial(float* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }

  static float hsum(V v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }

  // A block of x rounded to q8_0, its 32 quants widened to int16 (once per block, for every row).
  using XQ = __m512i;
  static XQ load_xq(const int8_t* x) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  }
  // The q8_0 weight quants at w against x's: the block's integer products summed in pairs, as f32
  // lanes (exact: far below 2^24).
  static V dot_q8(const uint8_t* w, XQ x) {
    const __m512i wq = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
    return _mm512_cvtepi32_ps(_mm512_madd_epi16(wq, x));
  }
  // q4_0 against x: the nibbles widened to int16 and made signed (q - 8) before the products.
  struct Q4Bias {};
  static Q4Bias q4_bias(XQ) { return {}; }
  static V dot_q4(const uint8_t* qs, XQ x, Q4Bias) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i low = _mm_set1_epi8(15);
    // Elements 0..15 are the low nibbles of the 16 bytes, elements 16..31 the high ones.
    const __m256i nibbles = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), _mm_and_si128(bytes, low));
    const __m512i wq = _mm512_sub_epi16(_mm512_cvtepu8_epi16(nibbles), _mm512_set1_epi16(8));
    return _mm512_cvtepi32_ps(_mm512_madd_epi16(wq, x));
  }

  static V widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

  // Chunk c of a row: elements [16c, 16c + 16). Plain types only.
  template <DType T>
  static V load_w(const uint8_t* row, int64_t c) {
    if constexpr (T == DType::F32) {
      return _mm512_loadu_ps(row + c * 64);
    } else if constexpr (T == DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * 32)));
    } else {  // BF16
      return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * 32)));
    }
  }

  // Quantized block b: returns its scale in every lane; q[0..1] get its 32 stored integers.
  template <DType T>
  static V load_block_q(const uint8_t* row, int64_t b, V q[2], const float* f16_table) {
    if constexpr (T == DType::Q8_0) {
      const uint8_t* block = row + b * sizeof(BlockQ8_0);
      for (int part = 0; part < 2; ++part) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + part * 16));
        q[part] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
      }
      return _mm512_set1_ps(f16_table[load_u16(block)]);
    } else {  // Q4_0: low nibbles are elements 0..15, high nibbles 16..31
      // vpermps looks up the low 4 bits of each index: nibble -> (nibble - 8) as a float, with
      // no mask and no int-to-float conversion.
      const uint8_t* block = row + b * sizeof(BlockQ4_0);
      const __m512 signed_values = _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f, 1.0f,
                                                  2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
      const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
      q[0] = _mm512_permutexvar_ps(bytes, signed_values);
      q[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), signed_values);
      return _mm512_set1_ps(f16_table[load_u16(block)]);
    }
  }

  template <DType T>
  static V load_w_partial(const uint8_t* row, int64_t c, int n) {
    if constexpr (T == DType::F32) {
      return _mm512_maskz_loadu_ps(mask(n), row + c * 64);
    } else if constexpr (T == DType::F16) {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), row + c * 32));
    } else if constexpr (T == DType::BF16) {
      return widen_bf16(_mm256_maskz_loadu_epi16(mask(n), row + c * 32));
    }
  }
};

// The super-block code's vectors (simd_blocks.h, V256 states the contract): chunk p of a
// super-block's first half in the low 256 bits, chunk p of its second half in the high 256, so each
// integer instruction covers both halves.
struct V512 {
  using I = __m512i;
  static constexpr int kHalves = 2;
  static I pair(__m256i low, __m256i high) { return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1); }
  static I load(const uint8_t* p, size_t stride) {
    if (stride == 32) return _mm512_loadu_si512(p);
    return stride == 0 ? _mm512_broadcast_i64x4(blocks::load32<Avx512>(p))
                       : pair(blocks::load32<Avx512>(p), blocks::load32<Avx512>(p + stride));
  }
  static I load(const int8_t* p, size_t stride) {
    if (stride == 32) return _mm512_loadu_si512(p);
    return pair(blocks::load32<Avx512>(p), blocks::load32<Avx512>(p + stride));
  }
  static I nibbles(const uint8_t* p, size_t stride) {
    return pair(blocks::nibbles<Avx512>(p), blocks::nibbles<Avx512>(p + stride));
  }
  template <int C0, int C1>
  static I srl(I v) {
    return _mm512_srlv_epi16(v, pair(_mm256_set1_epi16(C0), _mm256_set1_epi16(C1)));
  }
  template <int C0, int C1>
  static I scales8(I v) {
    return _mm512_shuffle_epi8(v, pair(_mm256_set1_epi16(static_cast<int16_t>((2 * C0) | (2 * C0 + 1) << 8)),
                                       _mm256_set1_epi16(static_cast<int16_t>((2 * C1) | (2 * C1 + 1) << 8))));
  }
  template <int P>
  static I scales16(I v) {
    const __m256i mask = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((4 * P + 2) | (4 * P + 3) << 8)),
                                          _mm_set1_epi16(static_cast<int16_t>((4 * P) | (4 * P + 1) << 8)));
    return _mm512_shuffle_epi8(v, _mm512_broadcast_i64x4(mask));
  }
  static I broadcast(__m128i v) { return _mm512_broadcast_i32x4(v); }
  static I halves(__m256i scales16, int) {
    const __m512i z = _mm512_castsi256_si512(scales16);
    return _mm512_shuffle_i64x2(z, z, 0x50);  // 128-bit lanes 0, 0, 1, 1
  }
  template <bool kSigned>
  static I products(I w, I x) {
    if constexpr (kSigned) {  // |w| against x with w's signs moved onto it
      const I signed_x = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
      return _mm512_maddubs_epi16(_mm512_abs_epi8(w), signed_x);
    } else {
      return _mm512_maddubs_epi16(w, x);
    }
  }
  static I madd(I a, I b) { return _mm512_madd_epi16(a, b); }
  static I madd_add(I acc, I a, I b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I set1_8(int8_t v) { return _mm512_set1_epi8(v); }
  static I zero() { return _mm512_setzero_si512(); }
  template <int N>
  static I srli(I v) {
    return _mm512_srli_epi16(v, N);
  }
  template <int N>
  static I slli(I v) {
    return _mm512_slli_epi16(v, N);
  }
  static I iq4(I indices) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(table), indices);
  }
  template <int C0, int C1, int kShift>
  static I add_bit(I q, I bits) {
    const __mmask64 set = _mm512_test_epi8_mask(
        bits, pair(_mm256_set1_epi8(static_cast<char>(1 << C0)), _mm256_set1_epi8(static_cast<char>(1 << C1))));
    return _mm512_mask_add_epi8(q, set, q, _mm512_set1_epi8(static_cast<char>(1 << kShift)));
  }
  static __m256i fold(I v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

  // 16 lanes: the sum unfolded (no mins), or the folded sum in lanes 0-7 and the mins in 8-15 with
  // -dmin as their scale, so one conversion and one fma take the whole super-block.
  using Acc = __m512;
  static Acc zero_acc() { return _mm512_setzero_ps(); }
  template <bool kCorrect, bool kMin>
  static Acc add_super_block(Acc acc, I sum, __m256i correction, __m256i mins, __m128 scales) {
    if constexpr (kMin) {
      const __m256i total = kCorrect ? _mm256_add_epi32(fold(sum), correction) : fold(sum);
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(total), mins, 1);
      const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
      const __m512 scale = _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(scales));
      return _mm512_fmadd_ps(_mm512_cvtepi32_ps(both), scale, acc);
    } else {
      const __m512i total = kCorrect ? _mm512_add_epi32(sum, _mm512_zextsi256_si512(correction)) : sum;
      return _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_broadcastss_ps(scales), acc);
    }
  }
  static float sum_acc(Acc acc) { return Avx512::hsum(acc); }
};

}  // namespace
}  // namespace ferry::kernels::cpu
