// The packed k-quant sections' units (packed_weights.h) read into AVX-512 registers, the 16 rows
// of a group in the 16 lanes: what the packed loops (avx512_dot.cpp) and the folded panels
// (avx512_folded.cpp) both read. Include only from inside a target region with AVX-512 F/BW, after
// x86_intrinsics.h; the functions are in an unnamed namespace, so each including file gets its
// own copy compiled for its target (one copy kept by the linker could be another file's, built
// for more).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_q4_k.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/unroll.h"

namespace ferry::kernels::cpu {
namespace {  // NOLINT(google-build-namespaces): one copy per target, as said above

struct KUnits {};  // packed_q4_k.h's instantiation tag here

// Four bytes of x in every 32-bit lane.
inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc + vpdpbusd(w, the four bytes at x in every lane), the bytes broadcast by the instruction's
// own memory operand ({1to16}), where GCC loads them by a separate vpbroadcastd: an instruction
// per product, which a loop that uses each broadcast once then spends (q4_k's and q5_k's folded
// tiles, 15-18% faster so).
inline __m512i dpbusd_broadcast(__m512i acc, __m512i w, const void* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(x)));
  return acc;
}

// v's 16-bit lanes shifted left by kBits, or right by -kBits.
template <int kBits>
inline __m512i shift_epi16(__m512i v) {
  if constexpr (kBits >= 0) {
    return _mm512_slli_epi16(v, kBits);
  } else {
    return _mm512_srli_epi16(v, -kBits);
  }
}

// A packed q3_k section's 16 rows' scales sc_j - 32 as signed bytes, [sub-block j][row]: the low 4
// bits from planes 0-7 (j < 8: plane j's low nibbles, else plane j - 8's high ones), the top 2 from
// plane 8 + j % 4's bits 2 (j / 4), the four planes in the four 128-bit lanes of each vector
// (16-bit shifts: the bits they carry across bytes are masked off).
inline void q3_k_scales(const uint8_t* section, int8_t* out) {
  const __m512i first = _mm512_loadu_si512(section + kPackedQ3KScales);        // planes 0-3
  const __m512i second = _mm512_loadu_si512(section + kPackedQ3KScales + 64);  // planes 4-7
  const __m512i high = _mm512_loadu_si512(section + kPackedQ3KScales + 128);   // planes 8-11
  auto store = [&](int quarter, __m512i low, __m512i top) {
    const __m512i scale =
        _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi8(0x0F)), _mm512_and_si512(top, _mm512_set1_epi8(0x30)));
    _mm512_store_si512(out + 64 * quarter, _mm512_sub_epi8(scale, _mm512_set1_epi8(32)));
  };
  store(0, first, _mm512_slli_epi16(high, 4));
  store(1, second, _mm512_slli_epi16(high, 2));
  store(2, _mm512_srli_epi16(first, 4), high);
  store(3, _mm512_srli_epi16(second, 4), _mm512_srli_epi16(high, 2));
}

// A unit of a packed q2_k or q3_k section, the 16 rows' 4 bytes each: qs unit 8n + c, whose bits
// 2t, 2t + 1 are the low two of elements 128n + 32t + 4c.. (sub-block 8n + 2t + c / 4), and q3_k's
// hmask unit c, whose bit 4n + t is their third.
template <DType T>
struct K16Unit {
  __m512i qs;
  [[maybe_unused]] __m512i hm;

  K16Unit(const uint8_t* section, int n, int c, bool prefetch) {
    const uint8_t* unit = section + (T == DType::Q2_K ? kPackedQ2KQuants : kPackedQ3KQuants) + (8 * n + c) * 64;
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(unit + kDecodePrefetchBytes), _MM_HINT_T0);
    qs = _mm512_loadu_si512(unit);
    if constexpr (T == DType::Q3_K) hm = _mm512_loadu_si512(section + kPackedQ3KHigh + c * 64);
  }

  // Elements 128N + 32T..'s values as unsigned bytes: q2_k's q (0..3); q3_k's q + 4 (0..7),
  // (qs >> 2T & 3) | (hm shifted to bit 2 & 4) by one vpternlogd. 16-bit shifts of at most 6: the
  // bits they carry across bytes land outside the masks.
  template <int N, int kT>
  __m512i values() const {
    const __m512i low = kT == 0 ? qs : _mm512_srli_epi16(qs, 2 * kT);
    if constexpr (T == DType::Q2_K) {
      return _mm512_and_si512(low, _mm512_set1_epi8(3));
    } else {
      const __m512i third = _mm512_and_si512(shift_epi16<2 - 4 * N - kT>(hm), _mm512_set1_epi8(4));
      return _mm512_ternarylogic_epi32(low, _mm512_set1_epi8(3), third, 0xEA);  // (low & 3) | third
    }
  }
};

// q2_k: the mins m of sub-blocks 2p and 2p + 1 of a section's 16 rows (the high nibbles of planes
// 2p and 2p + 1) as a pair of int16 per 32-bit lane (2p's low), for vpdpwssd against x's pair of sums.
inline __m512i q2_k_min_pair(const uint8_t* section, int p) {
  const uint8_t* even = section + kPackedQ2KScales + 32 * p;
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(even));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(even + 16));
  return _mm512_srli_epi16(_mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi))),
                           4);
}

// Sub-block T's 6-bit values (q + 32) of a packed q6_k unit (packed_weights.h), elements
// 128n + 32T + 4c..: e_0..e_2 the low 6 bits of pieces A, B, C, e_3 their top 2 bits gathered
// (16-bit shifts: the bits they carry across bytes are masked off).
template <int T>
inline __m512i q6_k_values(const uint8_t* unit) {
  if constexpr (T < 3) {
    return _mm512_and_si512(_mm512_loadu_si512(unit + 64 * T), _mm512_set1_epi8(0x3F));
  } else {
    const __m512i a = _mm512_srli_epi16(_mm512_loadu_si512(unit), 6);
    const __m512i b = _mm512_srli_epi16(_mm512_loadu_si512(unit + 64), 4);
    const __m512i c = _mm512_srli_epi16(_mm512_loadu_si512(unit + 128), 2);
    return _mm512_or_si512(
        _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi8(0x03)), _mm512_and_si512(b, _mm512_set1_epi8(0x0C))),
        _mm512_and_si512(c, _mm512_set1_epi8(0x30)));
  }
}

// Sub-block J's values in unit c (elements 32J + 4c..) of a packed q4_k or q5_k section, the 16
// rows' 4 bytes each, unsigned: even J the low nibbles, odd J the high ones (q4_k: kept in place,
// 16 q; q5_k: shifted down), q5_k's fifth bit from its qh unit put in above them (16-bit shifts of
// at most 4: the bit stays in its byte).
template <DType T, int J>
inline __m512i k4_values(const uint8_t* section, int c) {
  constexpr int kP = J / 2;
  constexpr int64_t kQuants = T == DType::Q5_K ? kPackedQ5KQuants : kPackedQ4KQuants;
  const __m512i w = _mm512_loadu_si512(section + kQuants + (8 * kP + c) * 64);
  if constexpr (T == DType::Q5_K) {
    const __m512i h = _mm512_loadu_si512(section + kPackedQ5KHigh + c * 64);
    const __m512i nibble = J % 2 == 0 ? w : _mm512_srli_epi16(w, 4);
    return _mm512_or_si512(_mm512_and_si512(nibble, _mm512_set1_epi8(0x0F)),
                           _mm512_and_si512(shift_epi16<4 - J>(h), _mm512_set1_epi8(0x10)));
  } else {
    return _mm512_and_si512(w, _mm512_set1_epi8(static_cast<char>(J % 2 == 0 ? 0x0F : 0xF0)));
  }
}

// The int32 factors of a packed q4_k / q5_k section's 16 rows, [12][16]: the scales sc_j of
// sub-blocks 0..7, then the mins as int16 pairs (packed_q4_k::min_pair) of pairs 0..3.
constexpr int64_t kK4FactorRows = 12;
inline void k4_factors(const uint8_t* section, int32_t* out) {
  using S = KUnits;
  const packed_q4_k::Scales sc = packed_q4_k::scales<S>(section);
  auto store = [&](auto J) {
    constexpr int kJ = decltype(J)::value;
    _mm512_storeu_si512(out + kJ * kPackedRows, packed_q4_k::ints<S, kJ>(sc.sc));
    if constexpr (kJ < 4) _mm512_storeu_si512(out + (8 + kJ) * kPackedRows, packed_q4_k::min_pair<S, kJ>(sc.m));
  };
  unroll<0, 8>(store);
}

}  // namespace
}  // namespace ferry::kernels::cpu
