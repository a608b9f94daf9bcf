// A packed q4_k section (packed_weights.h: one super-block of a group's 16 rows) in AVX-512
// registers, the rows in the 16 lanes: the pieces the packed vector loops (avx512_dot.cpp) and the
// AMX tiles (amx.cpp) share, so both take the same factors and the same f32 steps. Include
// only from inside a target region; templates on the ISA's traits type S, so each file gets its
// own instantiation compiled for its instruction set: all but x_sum_pair need AVX-512 F/BW
// (avx2_packed_blocks.h takes only x_sum_pair).
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/packed_weights.h"

namespace ferry::kernels::cpu::packed_q4_k {

// The 16 rows' 6-bit scales and mins as bytes, sub-block j's in 128-bit lane j % 4 of [j / 4].
struct Scales {
  __m512i sc[2];
  __m512i m[2];
};

// From the 12 scale planes (quant_blocks.h unpack_scales_k4, 16 rows at once): sub-blocks 0..3
// take the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); 4..7 their low 4 bits from the
// nibbles of bytes 8..11 and their top 2 from the top bits of bytes 0..3 and 4..7. Planes 0..3,
// 4..7 and 8..11 are one 64-byte vector each, plane i in lane i % 4.
template <class S>
inline Scales scales(const uint8_t* section) {
  const __m512i p0 = _mm512_loadu_si512(section + kPackedQ4KScales);
  const __m512i p1 = _mm512_loadu_si512(section + kPackedQ4KScales + 64);
  const __m512i p2 = _mm512_loadu_si512(section + kPackedQ4KScales + 128);
  const __m512i six = _mm512_set1_epi8(0x3F), low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
  Scales s;
  s.sc[0] = _mm512_and_si512(p0, six);
  s.sc[1] = _mm512_or_si512(_mm512_and_si512(p2, low4), _mm512_and_si512(_mm512_srli_epi16(p0, 2), top2));
  s.m[0] = _mm512_and_si512(p1, six);
  s.m[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(p2, 4), low4),
                           _mm512_and_si512(_mm512_srli_epi16(p1, 2), top2));
  return s;
}

// The 16 rows' d, and -dmin (the sign flipped, exactly -(dmin)), as f32.
template <class S>
inline __m512 d(const uint8_t* section) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(section)));
}
template <class S>
inline __m512 dmin_neg(const uint8_t* section) {
  const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(section + 32)));
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32(INT32_MIN)));
}

// Sub-block J's 6-bit scales (Scales::sc) or mins (Scales::m) of the 16 rows as int32.
template <class S, int J>
inline __m512i ints(const __m512i (&bytes)[2]) {
  return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(bytes[J / 4], J % 4));
}

// The 16 rows' mins of sub-blocks 2P and 2P + 1 as a pair of int16 per 32-bit lane (2P's low), for
// vpdpwssd against x's sums of the two sub-blocks.
template <class S, int P>
inline __m512i min_pair(const __m512i (&m)[2]) {
  const __m512i odd = ints<S, 2 * P + 1>(m);  // not inside the shift: in debug builds it is a macro
  return _mm512_or_si512(ints<S, 2 * P>(m), _mm512_slli_epi32(odd, 16));
}

// One super-block's step of an output accumulator, the same in every kernel of packed or stored q4_k
// / q5_k (avx512_dot.cpp's loops, amx.cpp's tiles): from the exact int32 sums sum = sum_j sc_j *
// (w_j . x_j) and mins = sum_j m_j * (x's sum over sub-block j),
//   acc = fma(f32(sum), d * x's scale, acc), then acc = fma(f32(mins), -dmin * x's scale, acc).
template <class S>
inline __m512 add_super_block(__m512 acc, __m512i sum, __m512i mins, __m512 d, __m512 dmin_neg, float x_scale) {
  const __m512 xs = _mm512_set1_ps(x_scale);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, xs), acc);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmin_neg, xs), acc);
}

// x's sums over sub-blocks 2k and 2k + 1 (q8_K's bsum: the super-block's 16 sums of 16) as the
// pair of int16 min_pair's lanes meet (each at most 32 * 128 in size).
template <class S>
inline int32_t x_sum_pair(const int16_t* bsum, int k) {
  const int32_t even = bsum[4 * k] + bsum[4 * k + 1];
  const int32_t odd = bsum[4 * k + 2] + bsum[4 * k + 3];
  return static_cast<int32_t>((static_cast<uint32_t>(even) & 0xFFFFu) | (static_cast<uint32_t>(odd) << 16));
}

}  // namespace ferry::kernels::cpu::packed_q4_k
