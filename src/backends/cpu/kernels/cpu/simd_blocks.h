// matmul for the block types of quant_blocks.h (q4_1, q5_0, q5_1, iq4_nl, q2_k..q6_k, iq4_xs) on
// x86: 32 weights at a time unpacked in registers to bytes in element order, multiplied with x's
// quants (rounded as llama.cpp rounds them for the type: q8_0, q8_1 or q8_K) by vpmaddubsw (unsigned
// weight bytes, or signed ones with their signs moved onto x), the int16 pair sums widened by
// vpmaddwd (vpdpwssd at the VNNI levels) against each lane's sub-block scale. So every block's sum is exact, as
// llama.cpp's, and its f32 combination (scale products, mins) is llama.cpp's formula.
//
// Include only from inside an ISA file's target region (avx2.cpp, avx512.cpp, avx512_dot.cpp), after
// simd_kernels.h: everything is a template on the ISA's traits type S, so each ISA gets its own
// instantiation compiled for its instruction set. The blocks of 32 (and iq4_xs) are written in
// 256-bit AVX2 intrinsics, which the AVX-512 file compiles with its wider register file and EVEX
// encodings; the k-quants are written over a vector type V (V256 here, V512 in avx512_traits.h: two
// halves of a super-block per register).
//
// Determinism, as simd_kernels.h: each output has one vector accumulator (and one scalar, for the
// mins of q4_1 / q5_1), updated group after group in increasing k in the same order whatever the
// tile, so an output does not depend on M, on which rows share its tile, or on the thread.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu/simd_block_decode.h"
#include "backends/cpu/kernels/cpu/unroll.h"
#include "core/dtype.h"

namespace ferry::kernels::cpu::blocks {

// 16 int16 sums of adjacent products: unsigned weight bytes u against x, or signed weights w
// (|w| <= 127) against x. Neither saturates: |u| <= 63 and |w|, |x| <= 127.
template <class S, bool kSigned>
inline __m256i pair_products(__m256i w, __m256i x) {
  if constexpr (kSigned) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  } else {
    return _mm256_maddubs_epi16(w, x);
  }
}

template <class S>
inline float hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// a * b + c with one rounding, whatever the compiler would contract.
template <class S>
inline float fmadd(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// ---- blocks of 32 -------------------------------------------------------------------------------

// One block of 32 weights: its quants in element order (signed where kSigned), its scale d at
// byte 0 and, for q4_1 / q5_1, its min m at byte 2 (meeting q8_1's s).
template <class S, DType T>
struct Block32 {
  static constexpr size_t kBytes = T == DType::Q4_1   ? sizeof(BlockQ4_1)
                                   : T == DType::Q5_0 ? sizeof(BlockQ5_0)
                                   : T == DType::Q5_1 ? sizeof(BlockQ5_1)
                                                      : sizeof(BlockIQ4_NL);
  static constexpr bool kSigned = T == DType::Q5_0 || T == DType::IQ4_NL;
  static constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;
  static __m256i quants(const uint8_t* b) {
    if constexpr (T == DType::Q4_1) {
      return nibbles<S>(b + 4);
    } else if constexpr (T == DType::Q5_0) {  // q - 16
      const __m256i q = _mm256_or_si256(nibbles<S>(b + 6), fifth_bits<S>(u32_at<S>(b + 2)));
      return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
    } else if constexpr (T == DType::Q5_1) {
      return _mm256_or_si256(nibbles<S>(b + 8), fifth_bits<S>(u32_at<S>(b + 4)));
    } else {  // IQ4_NL
      return iq4_values<S>(nibbles<S>(b + 2));
    }
  }
};

// Outputs n0, n0 + row_step, ... (NR of them) for rows [m0, m0 + MR): per block, the exact integer
// dot product times (the weights' d) * (x's d), and for q4_1 / q5_1 the weights' m times x's s.
template <class S, DType T, int MR, int NR>
void tile32(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
  using B = Block32<S, T>;
  __m256 acc[MR][NR];
  float acc_min[MR][NR];
  for (int m = 0; m < MR; ++m) {
    for (int n = 0; n < NR; ++n) {
      acc[m][n] = _mm256_setzero_ps();
      acc_min[m][n] = 0.0f;
    }
  }
  const uint8_t* w[NR];
  for (int n = 0; n < NR; ++n) w[n] = a.w + static_cast<size_t>(n0 + n * row_step) * a.w_row_bytes;
  const int8_t* xq[MR];
  const float* xs[MR];
  const float* xsum[MR];
  for (int m = 0; m < MR; ++m) {
    xq[m] = a.xq + (m0 + m) * a.K;
    xs[m] = a.xq_scale + (m0 + m) * (a.K / 32);
    xsum[m] = B::kMin ? a.xq_sum + (m0 + m) * (a.K / 32) : nullptr;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < a.K / 32; ++b) {
    if (prefetch_offset != 0) {
      for (int n = 0; n < NR; ++n) __builtin_prefetch(w[n] + prefetch_offset + (b + 1) * B::kBytes - 1, 0, 3);
    }
    __m256i xb[MR];
    for (int m = 0; m < MR; ++m) xb[m] = load32<S>(xq[m] + b * 32);
    for (int n = 0; n < NR; ++n) {
      const uint8_t* block = w[n] + b * B::kBytes;
      const __m256i q = B::quants(block);
      const float d = a.f16_table[u16_at<S>(block)];
      for (int m = 0; m < MR; ++m) {
        const __m256i dot = _mm256_madd_epi16(pair_products<S, B::kSigned>(q, xb[m]), ones);
        acc[m][n] = _mm256_fmadd_ps(_mm256_set1_ps(d * xs[m][b]), _mm256_cvtepi32_ps(dot), acc[m][n]);
        if constexpr (B::kMin) {
          acc_min[m][n] = fmadd<S>(a.f16_table[u16_at<S>(block + 2)], xsum[m][b], acc_min[m][n]);
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m) {
    float* y = a.y + (m0 + m) * a.y_stride;
    for (int n = 0; n < NR; ++n) {
      const int64_t out = n0 + n * row_step;
      y[out] = hsum<S>(acc[m][n]) + acc_min[m][n] + (a.bias ? a.bias[out] : 0.0f);
    }
  }
}

// ---- super-blocks of 256 ------------------------------------------------------------------------

// unroll.h's compile-time loops, as blocks::unroll.
using cpu::Index;
using cpu::unroll;

// The vectors the super-block code works in (V): V256 holds one 32-weight chunk of a super-block
// (the AVX2 file, and a fallback); an AVX-512 file's V512 (avx512_traits.h) holds two, a chunk below and
// its partner above (chunk p of the super-block's first half and chunk p of its second, or where a
// type's 64 contiguous bytes hold them, chunks c and c + 2: SuperBlock::kPartner), so every integer
// operation covers two chunks. Both offer, for I (the integer vector):
//   kHalves                         1 or 2: the halves one vector covers
//   load(p, stride)                 32 bytes at p (V512: and 32 at p + stride above them)
//   nibbles(p, stride)              16 bytes of nibbles at p (and p + stride) to 32 bytes each
//   srl<C0, C1>(v)                  16-bit lanes shifted right by C0 (V512: C1 in the upper half)
//   scales8<C0, C1>(v)              from 8 int16 scales in every 128-bit lane: scale C0 everywhere
//                                   (V512: C1 in the upper half)
//   scales16<P>(v)                  from one half's 8 int16 scales in every 128-bit lane: scale 2P in
//                                   the low 128 bits of each 256, 2P + 1 in the high
//   broadcast(__m128i)              a 128-bit vector in every lane
//   halves(__m256i scales16, h)     of 16 int16 scales (one per 16), half h's 8 in every lane (V512:
//                                   half 0's below, half 1's above; h unused)
//   products<kSigned>(w, x)         16-bit pair sums of w's bytes (unsigned, or signed) times x's
//   madd, add32, and_, or_, set1_8, srli<N>, slli<N>, iq4(indices)
//   madd_add(acc, p, sc)            acc + madd(p, sc) (a VNNI level's V: one vpdpwssd)
//   add_bit<C0, C1, kShift>(q, bits) q + (1 << kShift) in the bytes whose bit C0 of bits is set (V512:
//                                   C1 in the upper half); those bits of q are clear
//   fold(v)                         the 256-bit sum of the vector's halves (V256: v)
//   Acc, zero_acc(), add_super_block<kCorrect, kMin>(acc, sum, correction, mins, scales), sum_acc
//                                   one output's f32 accumulator (V256 states the contract)
template <class S>
struct V256 {
  using I = __m256i;
  static constexpr int kHalves = 1;
  static I load(const uint8_t* p, size_t) { return load32<S>(p); }
  static I load(const int8_t* p, size_t) { return load32<S>(p); }
  static I nibbles(const uint8_t* p, size_t) { return blocks::nibbles<S>(p); }
  template <int C0, int C1>
  static I srl(I v) {
    return _mm256_srli_epi16(v, C0);
  }
  template <int C0, int C1>
  static I scales8(I v) {
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>((2 * C0) | (2 * C0 + 1) << 8)));
  }
  template <int P>
  static I scales16(I v) {
    return _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((4 * P + 2) | (4 * P + 3) << 8)),
                                                   _mm_set1_epi16(static_cast<int16_t>((4 * P) | (4 * P + 1) << 8))));
  }
  static I broadcast(__m128i v) { return _mm256_set_m128i(v, v); }
  static I halves(__m256i scales16, int h) {
    return h == 0 ? _mm256_permute2x128_si256(scales16, scales16, 0x00)
                  : _mm256_permute2x128_si256(scales16, scales16, 0x11);
  }
  template <bool kSigned>
  static I products(I w, I x) {
    return pair_products<S, kSigned>(w, x);
  }
  static I madd(I a, I b) { return _mm256_madd_epi16(a, b); }
  static I madd_add(I acc, I a, I b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I set1_8(int8_t v) { return _mm256_set1_epi8(v); }
  static I zero() { return _mm256_setzero_si256(); }
  template <int N>
  static I srli(I v) {
    return _mm256_srli_epi16(v, N);
  }
  template <int N>
  static I slli(I v) {
    return _mm256_slli_epi16(v, N);
  }
  static I iq4(I indices) { return iq4_values<S>(indices); }
  template <int C0, int C1, int kShift>
  static I add_bit(I q, I bits) {
    return _mm256_or_si256(q, _mm256_slli_epi16(and_(srl<C0, C1>(bits), set1_8(1)), kShift));
  }
  static __m256i fold(I v) { return v; }

  // One output's f32 accumulator, and one super-block added to it: with scales = (d, -dmin) (times
  // x's scale), d * (sum + correction) + -dmin * mins (without mins where !kMin), in this order.
  using Acc = __m256;
  static Acc zero_acc() { return _mm256_setzero_ps(); }
  template <bool kCorrect, bool kMin>
  static Acc add_super_block(Acc acc, I sum, __m256i correction, __m256i mins, __m128 scales) {
    const __m256i total = kCorrect ? _mm256_add_epi32(sum, correction) : sum;
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(scales), _mm256_cvtepi32_ps(total), acc);
    if constexpr (kMin) {
      acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(scales)), _mm256_cvtepi32_ps(mins), acc);
    }
    return acc;
  }
  static float sum_acc(Acc acc) { return hsum<S>(acc); }
};

// One super-block, per vector type V: header() decodes its scales once (as int16 lanes); quants<H>
// gives four vectors of 32-weight chunks in element order (V256: the chunks 4 H + P of half H; V512,
// H = 0: chunk low_chunk(0, P) and its partner), scales<H, P>(h) the int16 lane scales of vector P's
// chunks. The integer sum is, over
// chunks, scale * (quants . x); correction() (kCorrect types) is what that leaves out and the
// rounded x knows as sums of 16 quants (bsum): q6_k's -32 and q3_k's -4 per weight. mins() (kMin
// types) is the sum of min * bsum, which meets -dmin. Both are 8 int32 lanes to be summed.
template <class S, class V, DType T>
struct SuperBlock;

// Which chunk part P of half H holds (V256), or which chunk the low 256 bits of vector P hold (V512,
// the high 256 holding that chunk + kPartner): a type pairs chunk p of each half (kPartner 4), or,
// where 64 contiguous bytes hold them, chunks 4k, 4k + 1 with 4k + 2, 4k + 3 (kPartner 2).
template <class V, int kPartner>
constexpr int low_chunk(int H, int P) {
  if (V::kHalves == 1) return 4 * H + P;
  return kPartner == 4 ? P : P < 2 ? P : P + 2;
}

// q4_k / q5_k's 8 6-bit scales and mins from 12 bytes (quant_blocks.h unpack_scales_k4), four
// bytes at a time: scales 0..3 and mins 0..3 are the low 6 bits of bytes 0..3 and 4..7; scales and
// mins 4..7 take their low 4 bits from the nibbles of bytes 8..11, their top 2 from the top 2 bits
// of bytes 0..3 (scales) and 4..7 (mins). Returns the scales in bytes 0..7, the mins in 8..15.
// In 32-bit lanes, with w0..w2 the three words: [w0 & 0x3f.., (w2 & 0x0f..) | (w0 >> 2 & 0x30..),
// w1 & 0x3f.., (w2 >> 4 & 0x0f..) | (w1 >> 2 & 0x30..)]. p may be read 4 bytes past the 12 (the
// block goes on).
template <class S>
inline __m128i scales_k4(const uint8_t* p) {
  const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_shuffle_epi32(w, 0x98);   // w0, w2, w1, w2
  const __m128i high = _mm_shuffle_epi32(w, 0x50);  // w0, w0, w1, w1
  const __m128i low_bits = _mm_and_si128(_mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4)),
                                         _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high_bits = _mm_and_si128(_mm_srli_epi32(high, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low_bits, high_bits);
}

// Header of the types with one scale per 32 (q4_k, q5_k, iq4_xs): the 8 scales as int16 in every
// 128-bit lane, and (q4_k, q5_k) the 8 mins as int16, each twice, against x's 16 sums.
template <class V>
struct Header8 {
  typename V::I sc;
  __m256i mins;
};
// Header of the types with one scale per 16 (q2_k, q3_k, q6_k): all 16 as int16 (for correction()),
// each half's 8 in every lane, and (q2_k) the 16 mins as int16.
template <class V>
struct Header16 {
  __m256i sc16;
  typename V::I half[2];
  __m256i mins;
};
template <class V>
Header16<V> header16(__m256i sc16) {
  Header16<V> h;
  h.sc16 = sc16;
  h.half[0] = V::halves(sc16, 0);
  h.half[1] = V::kHalves == 1 ? V::halves(sc16, 1) : h.half[0];  // V512: half[0] holds both
  h.mins = _mm256_setzero_si256();
  return h;
}

template <class S, class V>
struct SuperBlock<S, V, DType::Q4_K> {
  using I = typename V::I;
  using Header = Header8<V>;
  static constexpr size_t kBytes = sizeof(BlockQ4_K);
  static constexpr bool kSigned = false, kMin = true;
  static Header header(const uint8_t* b) {
    const __m128i packed = scales_k4<S>(b + 4);
    const __m128i m = _mm_unpackhi_epi64(packed, packed);
    return {V::broadcast(_mm_cvtepu8_epi16(packed)), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m))};
  }
  // Chunks 2j and 2j + 1 are the low and high nibbles of qs[32 j, 32 j + 32) (qs at byte 16): with
  // V512, 64 bytes at once hold chunks 4k, 4k + 1 below and 4k + 2, 4k + 3 above (kPartner 2).
  static constexpr int kPartner = 2;
  template <int H>
  static void quants(const uint8_t* b, const Header&, I q[4]) {
    const I low = V::set1_8(15);
    for (int j = 0; j < 2; ++j) {
      const I bytes = V::load(b + 16 + (V::kHalves == 2 ? 64 * j : 32 * (2 * H + j)), 32);
      q[2 * j] = V::and_(bytes, low);
      q[2 * j + 1] = V::and_(V::template srli<4>(bytes), low);
    }
  }
  template <int H, int P>
  static I scales(const Header& h) {
    constexpr int kLow = low_chunk<V, kPartner>(H, P);
    return V::template scales8<kLow, kLow + kPartner>(h.sc);
  }
  static constexpr bool kCorrect = false;
  static __m256i correction(const Header&, __m256i) { return _mm256_setzero_si256(); }
  static __m256i mins(const Header& h, __m256i bsum) { return _mm256_madd_epi16(h.mins, bsum); }
  static constexpr size_t kScaleAt = 0;  // d (and, kMin, dmin after it) as f16
};

template <class S, class V>
struct SuperBlock<S, V, DType::Q5_K> {
  using I = typename V::I;
  using Q4 = SuperBlock<S, V, DType::Q4_K>;
  using Header = Header8<V>;
  static constexpr size_t kBytes = sizeof(BlockQ5_K);
  static constexpr bool kSigned = false, kMin = true;
  static Header header(const uint8_t* b) { return Q4::header(b); }
  // As q4_k's from qs at byte 48, plus chunk c's fifth bit: bit c of qh[l] (qh at byte 16).
  static constexpr int kPartner = 2;
  template <int H>
  static void quants(const uint8_t* b, const Header&, I q[4]) {
    const I low = V::set1_8(15);
    const I qh = V::load(b + 16, 0);
    auto chunk_pair = [&](auto J) {
      constexpr int kJ = decltype(J)::value;
      constexpr int kLow = low_chunk<V, kPartner>(H, 2 * kJ), kHigh = low_chunk<V, kPartner>(H, 2 * kJ + 1);
      const I bytes = V::load(b + 48 + (V::kHalves == 2 ? 64 * kJ : 32 * (2 * H + kJ)), 32);
      q[2 * kJ] = V::template add_bit<kLow, kLow + 2, 4>(V::and_(bytes, low), qh);
      q[2 * kJ + 1] = V::template add_bit<kHigh, kHigh + 2, 4>(V::and_(V::template srli<4>(bytes), low), qh);
    };
    unroll<0, 2>(chunk_pair);
  }
  template <int H, int P>
  static I scales(const Header& h) {
    constexpr int kLow = low_chunk<V, kPartner>(H, P);
    return V::template scales8<kLow, kLow + kPartner>(h.sc);
  }
  static constexpr bool kCorrect = false;
  static __m256i correction(const Header&, __m256i) { return _mm256_setzero_si256(); }
  static __m256i mins(const Header& h, __m256i bsum) { return _mm256_madd_epi16(h.mins, bsum); }
  static constexpr size_t kScaleAt = 0;  // d (and, kMin, dmin after it) as f16
};

template <class S, class V>
struct SuperBlock<S, V, DType::Q6_K> {
  using I = typename V::I;
  static constexpr int kPartner = 4;  // V512: chunk p of each half
  using Header = Header16<V>;
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  static constexpr bool kSigned = false, kMin = false;
  static Header header(const uint8_t* b) {
    return header16<V>(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
  }
  // The stored 6-bit q (0..63); the -32 is taken off by correction(). Part p's low 4 bits are the low
  // (p < 2) or high nibble of ql[64 H + 32 (p % 2) + l], its top 2 bits bits 2p of qh[32 H + l]
  // (qh at byte 128).
  template <int H>
  static void quants(const uint8_t* b, const Header&, I q[4]) {
    const I low = V::set1_8(15), two = V::set1_8(3);
    const I ql0 = V::load(b + 64 * H, 64), ql1 = V::load(b + 64 * H + 32, 64);
    const I qh = V::load(b + 128 + 32 * H, 32);
    const I low4[4] = {V::and_(ql0, low), V::and_(ql1, low), V::and_(V::template srli<4>(ql0), low),
                       V::and_(V::template srli<4>(ql1), low)};
    const I high2[4] = {V::and_(qh, two), V::and_(V::template srli<2>(qh), two), V::and_(V::template srli<4>(qh), two),
                        V::and_(V::template srli<6>(qh), two)};
    for (int p = 0; p < 4; ++p) q[p] = V::or_(low4[p], V::template slli<4>(high2[p]));
  }
  template <int H, int P>
  static I scales(const Header& h) {
    return V::template scales16<P>(h.half[H]);
  }
  static constexpr bool kCorrect = true;
  static __m256i correction(const Header& h, __m256i bsum) {
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(h.sc16, bsum), 5));
  }
  static __m256i mins(const Header&, __m256i) { return _mm256_setzero_si256(); }
  static constexpr size_t kScaleAt = 208;  // d (and, kMin, dmin after it) as f16
};

template <class S, class V>
struct SuperBlock<S, V, DType::Q3_K> {
  using I = typename V::I;
  static constexpr int kPartner = 4;  // V512: chunk p of each half
  using Header = Header16<V>;
  static constexpr size_t kBytes = sizeof(BlockQ3_K);
  static constexpr bool kSigned = false, kMin = false;
  // The 16 scales less 32 (quant_blocks.h unpack_scales_q3_k four bytes at a time): scale j has its
  // low 4 bits in the low (j < 8) or high nibble of byte j % 8, its top 2 bits in bits 2 (j / 4) of
  // byte 8 + j % 4 (scales at byte 96).
  static Header header(const uint8_t* b) {
    // The 12 bytes (at 96) as bytes 0-11: 16 loaded to end at the block's end (110), shifted down.
    const __m128i raw = _mm_srli_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 94)), 2);
    const __m128i nibble = _mm_set1_epi8(15);
    const __m128i low4 = _mm_unpacklo_epi64(_mm_and_si128(raw, nibble), _mm_and_si128(_mm_srli_epi16(raw, 4), nibble));
    // Scale j's top bits: byte 8 + j % 4 shifted right by 2 (j / 4), j / 4 being its 32-bit lane.
    const __m128i tops = _mm_shuffle_epi8(raw, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
    const __m128i high2 = _mm_and_si128(_mm_srlv_epi32(tops, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    const __m128i sc = _mm_sub_epi8(_mm_or_si128(low4, _mm_slli_epi16(high2, 4)), _mm_set1_epi8(32));
    return header16<V>(_mm256_cvtepi8_epi16(sc));
  }
  // q + 4 = low 2 bits | high bit << 2 (0..7); the -4 is taken off by correction(). Part p: bits 2p of
  // qs[32 H + l] (qs at byte 32), and bit 4 H + p of hmask[l] (at byte 0).
  template <int H>
  static void quants(const uint8_t* b, const Header&, I q[4]) {
    const I two = V::set1_8(3);
    const I qs = V::load(b + 32 + 32 * H, 32);
    const I hm = V::load(b, 0);
    q[0] = V::template add_bit<4 * H + 0, 4, 2>(V::and_(qs, two), hm);
    q[1] = V::template add_bit<4 * H + 1, 5, 2>(V::and_(V::template srli<2>(qs), two), hm);
    q[2] = V::template add_bit<4 * H + 2, 6, 2>(V::and_(V::template srli<4>(qs), two), hm);
    q[3] = V::template add_bit<4 * H + 3, 7, 2>(V::and_(V::template srli<6>(qs), two), hm);
  }
  template <int H, int P>
  static I scales(const Header& h) {
    return V::template scales16<P>(h.half[H]);
  }
  static constexpr bool kCorrect = true;
  static __m256i correction(const Header& h, __m256i bsum) {
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(h.sc16, bsum), 2));
  }
  static __m256i mins(const Header&, __m256i) { return _mm256_setzero_si256(); }
  static constexpr size_t kScaleAt = 108;  // d (and, kMin, dmin after it) as f16
};

template <class S, class V>
struct SuperBlock<S, V, DType::Q2_K> {
  using I = typename V::I;
  static constexpr int kPartner = 4;  // V512: chunk p of each half
  using Header = Header16<V>;
  static constexpr size_t kBytes = sizeof(BlockQ2_K);
  static constexpr bool kSigned = false, kMin = true;
  // scales[16] at byte 0: low nibble the scale, high nibble the min, per 16.
  static Header header(const uint8_t* b) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m128i low = _mm_set1_epi8(15);
    Header h = header16<V>(_mm256_cvtepu8_epi16(_mm_and_si128(packed, low)));
    h.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low));
    return h;
  }
  // Part p: bits 2p of qs[32 H + l] (qs at byte 16).
  template <int H>
  static void quants(const uint8_t* b, const Header&, I q[4]) {
    const I two = V::set1_8(3);
    const I qs = V::load(b + 16 + 32 * H, 32);
    q[0] = V::and_(qs, two);
    q[1] = V::and_(V::template srli<2>(qs), two);
    q[2] = V::and_(V::template srli<4>(qs), two);
    q[3] = V::and_(V::template srli<6>(qs), two);
  }
  template <int H, int P>
  static I scales(const Header& h) {
    return V::template scales16<P>(h.half[H]);
  }
  static constexpr bool kCorrect = false;
  static __m256i correction(const Header&, __m256i) { return _mm256_setzero_si256(); }
  static __m256i mins(const Header& h, __m256i bsum) { return _mm256_madd_epi16(h.mins, bsum); }
  static constexpr size_t kScaleAt = 80;  // d (and, kMin, dmin after it) as f16
};

template <class S, class V>
struct SuperBlock<S, V, DType::IQ4_XS> {
  using I = typename V::I;
  static constexpr int kPartner = 4;  // V512: chunk p of each half
  using Header = Header8<V>;
  static constexpr size_t kBytes = sizeof(BlockIQ4_XS);
  static constexpr bool kSigned = true, kMin = false;
  // Scale j less 32: the low (even j) or high nibble of scales_l[j / 2] (at byte 4), and bits 2j of
  // scales_h (at byte 2) on top.
  static Header header(const uint8_t* b) {
    const __m128i l = _mm_cvtsi32_si128(static_cast<int>(u32_at<S>(b + 4)));
    const __m128i low = _mm_set1_epi8(15);
    const __m128i low4 = _mm_unpacklo_epi8(_mm_and_si128(l, low), _mm_and_si128(_mm_srli_epi16(l, 4), low));
    const __m256i high = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(u16_at<S>(b + 2)), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
        _mm256_set1_epi32(3));
    const __m128i high16 = _mm_packs_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
    const __m128i sc =
        _mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(low4), _mm_slli_epi16(high16, 4)), _mm_set1_epi16(32));
    return {V::broadcast(sc), _mm256_setzero_si256()};
  }
  // Chunk c: the indices in qs[16 c, 16 c + 16) (qs at byte 8), as iq4_nl.
  template <int H>
  static void quants(const uint8_t* b, const Header&, I q[4]) {
    for (int p = 0; p < 4; ++p) q[p] = V::iq4(V::nibbles(b + 8 + 16 * (4 * H + p), 64));
  }
  template <int H, int P>
  static I scales(const Header& h) {
    return V::template scales8<4 * H + P, 4 + P>(h.sc);
  }
  static constexpr bool kCorrect = false;
  static __m256i correction(const Header&, __m256i) { return _mm256_setzero_si256(); }
  static __m256i mins(const Header&, __m256i) { return _mm256_setzero_si256(); }
  static constexpr size_t kScaleAt = 0;  // d (and, kMin, dmin after it) as f16
};

// As tile32, per super-block: acc += (d * x's d) * (exact integer sum) - (dmin * x's d) * (sum of
// mins times x's sums of 16).
template <class S, class V, DType T, int MR, int NR>
void tile256(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
  using B = SuperBlock<S, V, T>;
  using I = typename V::I;
  typename V::Acc acc[MR][NR];
  for (int m = 0; m < MR; ++m) {
    for (int n = 0; n < NR; ++n) acc[m][n] = V::zero_acc();
  }
  const uint8_t* w[NR];
  for (int n = 0; n < NR; ++n) w[n] = a.w + static_cast<size_t>(n0 + n * row_step) * a.w_row_bytes;
  const int8_t* xq[MR];
  const float* xs[MR];
  const int16_t* xbsum[MR];
  for (int m = 0; m < MR; ++m) {
    xq[m] = a.xq + (m0 + m) * a.K;
    xs[m] = a.xq_scale + (m0 + m) * (a.K / kQK_K);
    xbsum[m] = a.xq_bsum + (m0 + m) * (a.K / 16);
  }
  for (int64_t g = 0; g < a.K / kQK_K; ++g) {
    if (prefetch_offset != 0) {
      for (int n = 0; n < NR; ++n) {
        const uint8_t* next = w[n] + prefetch_offset + g * B::kBytes;
        for (size_t off = 0; off < B::kBytes; off += 64) __builtin_prefetch(next + off, 0, 3);
        __builtin_prefetch(next + B::kBytes - 1, 0, 3);
      }
    }
    // x's quants of this super-block in the chunks' order, read once for all NR rows.
    constexpr int kVectors = 8 / V::kHalves;
    I x[MR][kVectors];
    for (int m = 0; m < MR; ++m) {
      for (int v = 0; v < kVectors; ++v) {
        x[m][v] = V::load(xq[m] + g * kQK_K + 32 * low_chunk<V, B::kPartner>(v / 4, v % 4), 32 * B::kPartner);
      }
    }
    __m256i bsum[MR];
    __m128 x_scale[MR];  // x's scale, and its negative for the mins
    for (int m = 0; m < MR; ++m) {
      bsum[m] = load32<S>(xbsum[m] + g * 16);
      x_scale[m] = _mm_setr_ps(xs[m][g], -xs[m][g], 0.0f, 0.0f);
    }
    // Unrolled, so that the accumulators stay in registers.
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) {
      const uint8_t* block = w[n] + g * B::kBytes;
      const typename B::Header h = B::header(block);
      I sum[MR];
      for (int m = 0; m < MR; ++m) sum[m] = V::zero();
      // Half H's four chunks (with V512: both halves' at once, H = 0).
      auto half = [&](auto H) {
        constexpr int kH = decltype(H)::value;
        I q[4];
        B::template quants<kH>(block, h, q);
        auto part = [&](auto P) {
          constexpr int kP = decltype(P)::value;
          const I sc = B::template scales<kH, kP>(h);
          for (int m = 0; m < MR; ++m) {
            sum[m] = V::madd_add(sum[m], V::template products<B::kSigned>(q[kP], x[m][4 * kH + kP]), sc);
          }
        };
        unroll<0, 4>(part);
      };
      unroll<0, 2 / V::kHalves>(half);
      // d and dmin by vcvtph2ps (exact, as the f16 table), no table lookup on the way.
      const uint32_t bits = B::kMin ? u32_at<S>(block + B::kScaleAt) : u16_at<S>(block + B::kScaleAt);
      const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
      for (int m = 0; m < MR; ++m) {
        acc[m][n] = V::template add_super_block<B::kCorrect, B::kMin>(
            acc[m][n], sum[m], B::correction(h, bsum[m]), B::mins(h, bsum[m]), _mm_mul_ps(d_dmin, x_scale[m]));
      }
    }
  }
  for (int m = 0; m < MR; ++m) {
    float* y = a.y + (m0 + m) * a.y_stride;
    for (int n = 0; n < NR; ++n) {
      const int64_t out = n0 + n * row_step;
      y[out] = V::sum_acc(acc[m][n]) + (a.bias ? a.bias[out] : 0.0f);
    }
  }
}

// The register tile of simd_kernels.h's drivers (simd::matmul_with_tile: decode reads NR long
// sequential streams, prefill goes in blocks of x rows whose quants, a byte each, stay in L2).
template <class S, class V, DType T>
struct Tile {
  static constexpr int64_t kXBytes = 1;
  template <int MR, int NR>
  static void run(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
    if constexpr (T == DType::Q4_1 || T == DType::Q5_0 || T == DType::Q5_1 || T == DType::IQ4_NL) {
      tile32<S, T, MR, NR>(a, m0, n0, row_step, prefetch_offset);
    } else {
      tile256<S, V, T, MR, NR>(a, m0, n0, row_step, prefetch_offset);
    }
  }
};

// f32 activations (Q8Activations::F32): each weight row dequantized (as ggml) into this thread's
// buffer, then the f32 dot product with each row of x.
template <class S>
void matmul_dequantized(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  float* buffer = row_scratch(a.K);
  for (int64_t n = n_begin; n < n_end; ++n) {
    row_to_f32_scalar(a.w_type, a.w + static_cast<size_t>(n) * a.w_row_bytes, buffer, a.K);
    const float bias = a.bias ? a.bias[n] : 0.0f;
    for (int64_t m = 0; m < a.M; ++m) {
      a.y[m * a.y_stride + n] = simd::dot<S>(a.x + m * a.x_stride, buffer, a.K) + bias;
    }
  }
}

// The entry for the block types: the ISA's matmul sends them here, with the vector type V of its
// super-block code (V256, or the AVX-512 file's V512).
template <class S, class V, int MR_MAX>
void matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.xq == nullptr) return matmul_dequantized<S>(a, n_begin, n_end);
  switch (a.w_type) {
    case DType::Q4_1:
      return simd::matmul_with_tile<Tile<S, V, DType::Q4_1>, MR_MAX>(a, n_begin, n_end);
    case DType::Q5_0:
      return simd::matmul_with_tile<Tile<S, V, DType::Q5_0>, MR_MAX>(a, n_begin, n_end);
    case DType::Q5_1:
      return simd::matmul_with_tile<Tile<S, V, DType::Q5_1>, MR_MAX>(a, n_begin, n_end);
    case DType::IQ4_NL:
      return simd::matmul_with_tile<Tile<S, V, DType::IQ4_NL>, MR_MAX>(a, n_begin, n_end);
    case DType::Q2_K:
      return simd::matmul_with_tile<Tile<S, V, DType::Q2_K>, MR_MAX>(a, n_begin, n_end);
    case DType::Q3_K:
      return simd::matmul_with_tile<Tile<S, V, DType::Q3_K>, MR_MAX>(a, n_begin, n_end);
    case DType::Q4_K:
      return simd::matmul_with_tile<Tile<S, V, DType::Q4_K>, MR_MAX>(a, n_begin, n_end);
    case DType::Q5_K:
      return simd::matmul_with_tile<Tile<S, V, DType::Q5_K>, MR_MAX>(a, n_begin, n_end);
    case DType::Q6_K:
      return simd::matmul_with_tile<Tile<S, V, DType::Q6_K>, MR_MAX>(a, n_begin, n_end);
    case DType::IQ4_XS:
      // 256 bits wide on every level: its 16-byte chunks pair across halves only at the cost of
      // extra shuffles, and the signed products need mask moves in 512 bits (measured 1.2x slower).
      return simd::matmul_with_tile<Tile<S, V256<S>, DType::IQ4_XS>, MR_MAX>(a, n_begin, n_end);
    default:
      return;  // matmul.cpp admits only these here
  }
}

}  // namespace ferry::kernels::cpu::blocks
