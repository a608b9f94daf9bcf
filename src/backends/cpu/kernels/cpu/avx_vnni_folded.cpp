// Batches against the packed k-quants at the avxvnni level, from per-batch panels: avx512_folded.cpp's
// panels in 256-bit form, each 64-byte unit read as two vectors (rows 0-7, 8-15), x copied per
// slice into tiles of 6 rows (12 chains, a unit's two vectors and x's broadcast fill the 16
// registers):
//   q2_k, q3_k: sc * q and (sc - 32) * (q - 4) + 124 as unsigned bytes, one chain of vpdpbusd a
//     super-block (q3_k's started from -124 * x's super-block sum);
//   q6_k: sc * (q - 32) as int16 against x widened to int16, one chain of vpdpwssd;
//   q4_k, q5_k: q as unsigned bytes, a chain per sub-block of 32 times its scale (vpmulld) into the
//     super-block's sum, which waits in the tile's memory (the registers hold the chains).
// The same exact int32 sums per super-block and the same f32 steps as avx2_packed_blocks.h's
// k16_tile, k4_tile and q6_tile, so the same bits.
#include "backends/cpu/kernels/cpu/avx_vnni_folded.h"

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/folded_panels.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#include "backends/cpu/kernels/cpu/avx2_packed_blocks.h"
#include "backends/cpu/kernels/cpu/x_units.h"

namespace ferry::kernels::cpu {
namespace {

using packed_blocks_256::broadcast4;
using packed_blocks_256::shift_epi16;

struct Vnni {  // avx2_packed_blocks.h's factor readers in their VNNI form
  static constexpr bool kVnni = true;
};

constexpr int kRows = 6;

template <DType T>
using Folded = folded::Layout<T, kRows, folded::Q6Form::Int16>;

// One q2_k or q3_k section's folded super-block: unit u holds elements 4u..4u+3 of the 16 rows, 4
// bytes a row, as vpdpbusd's unsigned bytes.
template <DType T>
void fold_k16_section(const uint8_t* section, uint8_t* out) {
  using F = Folded<T>;
  constexpr int64_t kQuants = T == DType::Q2_K ? kPackedQ2KQuants : kPackedQ3KQuants;
  alignas(32) int32_t sc[16][16];
  alignas(32) int32_t pairs[8][16];
  packed_blocks_256::k16_factors_256<Vnni, T>(section, sc, pairs);
  // Per 128-bit lane i of 4 rows: bytes [4i, -, 4i, -] (even), [-, 4i, -, 4i] (odd), [4i x 4] (every).
  const __m256i to_even = _mm256_setr_epi32(static_cast<int32_t>(0x80008000u), static_cast<int32_t>(0x80048004u),
                                            static_cast<int32_t>(0x80088008u), static_cast<int32_t>(0x800C800Cu),
                                            static_cast<int32_t>(0x80008000u), static_cast<int32_t>(0x80048004u),
                                            static_cast<int32_t>(0x80088008u), static_cast<int32_t>(0x800C800Cu));
  const __m256i to_odd =
      _mm256_setr_epi32(0x00800080, 0x04800480, 0x08800880, 0x0C800C80, 0x00800080, 0x04800480, 0x08800880, 0x0C800C80);
  const __m256i to_every =
      _mm256_setr_epi32(0x00000000, 0x04040404, 0x08080808, 0x0C0C0C0C, 0x00000000, 0x04040404, 0x08080808, 0x0C0C0C0C);
  auto sub_block = [&](auto J) {  // j = 8n + 2t + h: units 32n + 8t + 4h..+3
    constexpr int kJ = decltype(J)::value, kN = kJ / 8, kT = kJ % 8 / 2, kH = kJ % 2;
    for (int v = 0; v < 2; ++v) {
      // row r's scale of sub-block j in lane r's byte 0 (k16_factors_256: its low int16)
      const __m256i scale = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc[kJ] + 8 * v));
      const __m256i scale_even = _mm256_shuffle_epi8(scale, to_even);
      const __m256i scale_odd = _mm256_shuffle_epi8(scale, to_odd);
      const __m256i every = _mm256_shuffle_epi8(scale, to_every);
      const __m256i twice = _mm256_add_epi8(every, every);
      // q3_k: 124 - 4 * scale in every byte (bytewise, mod 256: the result is in 0..252)
      const __m256i offset = _mm256_sub_epi8(_mm256_set1_epi8(124), _mm256_add_epi8(twice, twice));
      for (int c = 4 * kH; c < 4 * kH + 4; ++c) {
        const __m256i qs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(section + kQuants + (8 * kN + c) * 64 + v * 32));
        __m256i values = _mm256_and_si256(shift_epi16<-2 * kT>(qs), _mm256_set1_epi8(3));
        if constexpr (T == DType::Q3_K) {
          const __m256i hm =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(section + kPackedQ3KHigh + c * 64 + v * 32));
          values = _mm256_or_si256(values, _mm256_and_si256(shift_epi16<2 - 4 * kN - kT>(hm), _mm256_set1_epi8(4)));
        }
        // scale * value of the even and odd bytes as int16 (one product each: no saturation), their
        // low bytes put back in place
        const __m256i even = _mm256_maddubs_epi16(values, scale_even);
        const __m256i odd = _mm256_maddubs_epi16(values, scale_odd);
        __m256i folded = _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00FF)), _mm256_slli_epi16(odd, 8));
        if constexpr (T == DType::Q3_K) folded = _mm256_add_epi8(folded, offset);
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + (32 * kN + 8 * kT + c) * 64 + v * 32), folded);
      }
    }
  };
  unroll<0, 16>(sub_block);
  for (int v = 0; v < 2; ++v) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section + 16 * v)));
    _mm256_store_ps(reinterpret_cast<float*>(out + F::kD + 32 * v), d);
    if constexpr (T == DType::Q2_K) {
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section + 32 + 16 * v)));
      _mm256_store_ps(reinterpret_cast<float*>(out + F::kD + 64 + 32 * v),
                      _mm256_xor_ps(dmin, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN))));
    }
  }
  if constexpr (T == DType::Q2_K) std::memcpy(out + F::kMinPairs, pairs, sizeof(pairs));
}

// One q4_k or q5_k section's super-block: unit u holds elements 4u..4u+3 of the 16 rows as
// unsigned bytes (q, 0..15 or 0..31), then the scales, min pairs (k4_factors_256), d and -dmin.
template <DType T>
void fold_k4_section(const uint8_t* section, uint8_t* out) {
  using F = Folded<T>;
  constexpr int64_t kQuants = T == DType::Q5_K ? kPackedQ5KQuants : kPackedQ4KQuants;
  auto sub_block = [&](auto J) {  // even j the low nibbles of units 8 (j / 2).., odd j the high ones
    constexpr int kJ = decltype(J)::value;
    for (int c = 0; c < 8; ++c) {
      for (int v = 0; v < 2; ++v) {
        const __m256i w =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(section + kQuants + (8 * (kJ / 2) + c) * 64 + 32 * v));
        __m256i values = _mm256_and_si256(kJ % 2 == 0 ? w : _mm256_srli_epi16(w, 4), _mm256_set1_epi8(0x0F));
        if constexpr (T == DType::Q5_K) {
          // bit j of each qh byte to bit 4 (16-bit shifts of at most 4: the bit stays in its byte)
          const __m256i h =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(section + kPackedQ5KHigh + c * 64 + 32 * v));
          values = _mm256_or_si256(values, _mm256_and_si256(shift_epi16<4 - kJ>(h), _mm256_set1_epi8(0x10)));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + (8 * kJ + c) * 64 + 32 * v), values);
      }
    }
  };
  unroll<0, 8>(sub_block);
  packed_blocks_256::K4Factors256 f;
  packed_blocks_256::k4_factors_256<Vnni>(section, f);
  for (int v = 0; v < 2; ++v) {
    for (int j = 0; j < 8; ++j)
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + F::kScales + 64 * j + 32 * v), f.sc[j][v]);
    for (int p = 0; p < 4; ++p)
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + F::kMinPairs + 64 * p + 32 * v), f.mins[p][v]);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section + 16 * v)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section + 32 + 16 * v)));
    _mm256_store_ps(reinterpret_cast<float*>(out + F::kD + 32 * v), d);
    _mm256_store_ps(reinterpret_cast<float*>(out + F::kD + 64 + 32 * v),
                    _mm256_xor_ps(dmin, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN))));
  }
}

// One q6_k section's folded super-block: int16 unit U holds elements 2U and 2U + 1 of the 16 rows as
// a pair a row, sc_j * (q - 32), exact in int16 (|.| <= 4096).
void fold_q6_k_section(const uint8_t* section, uint8_t* out) {
  using F = Folded<DType::Q6_K>;
  // Per 128-bit lane i of 4 rows: bytes 4i, 4i + 1 (low) or 4i + 2, 4i + 3 (high) as int16.
  const __m256i to_low = _mm256_setr_epi32(static_cast<int32_t>(0x80018000u), static_cast<int32_t>(0x80058004u),
                                           static_cast<int32_t>(0x80098008u), static_cast<int32_t>(0x800D800Cu),
                                           static_cast<int32_t>(0x80018000u), static_cast<int32_t>(0x80058004u),
                                           static_cast<int32_t>(0x80098008u), static_cast<int32_t>(0x800D800Cu));
  const __m256i to_high = _mm256_setr_epi32(static_cast<int32_t>(0x80038002u), static_cast<int32_t>(0x80078006u),
                                            static_cast<int32_t>(0x800B800Au), static_cast<int32_t>(0x800F800Eu),
                                            static_cast<int32_t>(0x80038002u), static_cast<int32_t>(0x80078006u),
                                            static_cast<int32_t>(0x800B800Au), static_cast<int32_t>(0x800F800Eu));
  const __m256i bias = _mm256_set1_epi16(32);
#pragma GCC unroll 1
  for (int q = 0; q < 4; ++q) {  // quad q = 2n + h
    const int n = q / 2, h = q % 2;
    const uint8_t* quad = section + kPackedQ6KQuants + q * kPackedQ6KQuad;
    auto value = [&](auto T) {  // elements 128n + 32t + 4c.., c = 4h + i: sub-block 8n + 2t + h
      constexpr int kT = decltype(T)::value;
      for (int v = 0; v < 2; ++v) {
        const __m256i scale = packed_blocks_256::q6_k_scales_256(section + kPackedQ6KScales + 64 * q + 16 * kT, v);
        const __m256i pair = _mm256_or_si256(_mm256_and_si256(scale, _mm256_set1_epi32(0xFFFF)),
                                             _mm256_slli_epi32(scale, 16));  // the int16 scale twice a lane
        for (int i = 0; i < 4; ++i) {
          const __m256i w = packed_blocks_256::q6_k_values_256<kT>(quad + 192 * i, v);
          const __m256i low = _mm256_mullo_epi16(_mm256_sub_epi16(_mm256_shuffle_epi8(w, to_low), bias), pair);
          const __m256i high = _mm256_mullo_epi16(_mm256_sub_epi16(_mm256_shuffle_epi8(w, to_high), bias), pair);
          const int unit = (128 * n + 32 * kT + 4 * (4 * h + i)) / 2;
          _mm256_store_si256(reinterpret_cast<__m256i*>(out + unit * 64 + 32 * v), low);
          _mm256_store_si256(reinterpret_cast<__m256i*>(out + (unit + 1) * 64 + 32 * v), high);
        }
      }
    };
    unroll<0, 4>(value);
  }
  for (int v = 0; v < 2; ++v) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section + 16 * v)));
    _mm256_store_ps(reinterpret_cast<float*>(out + F::kD + 32 * v), d);
  }
}

template <DType T>
void fold_section(const uint8_t* section, uint8_t* out) {
  if constexpr (Folded<T>::kK4) {
    fold_k4_section<T>(section, out);
  } else if constexpr (T == DType::Q6_K) {
    fold_q6_k_section(section, out);
  } else {
    fold_k16_section<T>(section, out);
  }
}

// x's rows 6t..6t + 5 for super-blocks s0..s0 + count - 1 into tile t of `out`; rows past M zero.
template <DType T>
void pack_x_slice(const MatmulArgs& a, int64_t s0, int64_t count, uint8_t* out) {
  using F = Folded<T>;
  const int64_t tiles = (a.M + kRows - 1) / kRows;
  // int16: a row's four widened bytes (two pairs) in lanes 2r, 2r + 1, reordered so the first pairs
  // come first.
  [[maybe_unused]] const __m256i pairs_first = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t m0 = t * kRows;
    const int64_t rows = a.M - m0 < kRows ? a.M - m0 : kRows;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t s = s0 + i;
      uint8_t* o = out + (t * F::kSlice + i) * F::kXSuper;
      const int8_t* x = a.xq + m0 * a.K + s * kQK_K;
      for (int u0 = 0; u0 < kQK_K / 4; u0 += 8) {
        __m256i units[8];  // 4 elements of the 6 rows each, lanes 6 and 7 zero
        x_units_8x8(x + 4 * u0, a.K, rows, units);
        for (int k = 0; k < 8; ++k) {
          const int u = u0 + k;
          if constexpr (F::kInt16) {  // int16 units 2u (rows 0-3, then 4-5) and 2u + 1
            const __m256i low =
                _mm256_permutevar8x32_epi32(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(units[k])), pairs_first);
            const __m256i high =
                _mm256_permutevar8x32_epi32(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(units[k], 1)), pairs_first);
            uint8_t* first = o + 2 * u * kRows * 4;
            uint8_t* second = first + kRows * 4;
            _mm_storeu_si128(reinterpret_cast<__m128i*>(first), _mm256_castsi256_si128(low));
            _mm_storel_epi64(reinterpret_cast<__m128i*>(first + 16), _mm256_castsi256_si128(high));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(second), _mm256_extracti128_si256(low, 1));
            _mm_storel_epi64(reinterpret_cast<__m128i*>(second + 16), _mm256_extracti128_si256(high, 1));
          } else {
            // 32 bytes for the unit's 24: the 8 past it are the next unit's, stored next (the last
            // unit's, the row factors', stored after the units)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + u * kRows * 4), units[k]);
          }
        }
      }
      folded::x_factors<T, folded::Q6Form::Int16>(a, m0, kRows, s, reinterpret_cast<float*>(o + F::kXScales),
                                                  reinterpret_cast<int32_t*>(o + F::kXStarts),
                                                  reinterpret_cast<int32_t*>(o + F::kXPairs));
    }
  }
}

// A tile's accumulators for its rows' outputs n0..n0 + 15 at the start of a slice: y's partial
// sums, or zero in the first slice and in rows past M. And y's outputs from them at its end (the
// last slice's with the bias), rows past M not stored.
inline void start_acc(const MatmulArgs& a, int64_t m0, int64_t rows, int64_t n0, const folded::Slice& slice,
                      float (&acc)[kRows][16]) {
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < 2; ++v) {
      const float* y = a.y + (m0 + r) * a.y_stride + n0 + 8 * v;
      _mm256_store_ps(acc[r] + 8 * v, r < rows && !slice.first ? _mm256_loadu_ps(y) : _mm256_setzero_ps());
    }
  }
}
inline void store_acc(const MatmulArgs& a, int64_t m0, int64_t rows, int64_t n0, const folded::Slice& slice,
                      const float (&acc)[kRows][16]) {
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < 2; ++v) {
      __m256 y = _mm256_load_ps(acc[r] + 8 * v);
      if (slice.last && a.bias != nullptr) y = _mm256_add_ps(y, _mm256_loadu_ps(a.bias + n0 + 8 * v));
      _mm256_storeu_ps(a.y + (m0 + r) * a.y_stride + n0 + 8 * v, y);
    }
  }
}

inline float x_scale(const uint8_t* x, int r) {
  float scale;
  std::memcpy(&scale, x + 4 * r, 4);
  return scale;
}

// q2_k, q3_k, q6_k: a super-block's exact int32 sums, sum[row][output], from one chain per row and
// half (q3_k's started from -124 * x's super-block sum).
template <DType T>
void k16_sums(const uint8_t* x, const uint8_t* w, int32_t (&sum)[kRows][16]) {
  using F = Folded<T>;
  __m256i chain[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    const __m256i start = T == DType::Q3_K ? broadcast4(x + F::kXStarts + 4 * r) : _mm256_setzero_si256();
    chain[r][0] = chain[r][1] = start;
  }
#pragma GCC unroll 1
  for (int u0 = 0; u0 < F::kUnits; u0 += 8) {
    auto unit = [&](auto U) {
      const int u = u0 + decltype(U)::value;
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 64 * u));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 64 * u + 32));
      for (int r = 0; r < kRows; ++r) {
        const __m256i xv = broadcast4(x + (u * kRows + r) * 4);
        if constexpr (F::kInt16) {
          chain[r][0] = _mm256_dpwssd_avx_epi32(chain[r][0], w0, xv);
          chain[r][1] = _mm256_dpwssd_avx_epi32(chain[r][1], w1, xv);
        } else {
          chain[r][0] = _mm256_dpbusd_avx_epi32(chain[r][0], w0, xv);
          chain[r][1] = _mm256_dpbusd_avx_epi32(chain[r][1], w1, xv);
        }
      }
    };
    unroll<0, 8>(unit);
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < 2; ++v) _mm256_store_si256(reinterpret_cast<__m256i*>(sum[r] + 8 * v), chain[r][v]);
  }
}

// q4_k, q5_k: per sub-block of 32 each row's dot product by a chain of 8 vpdpbusd a half, times its
// scale (vpmulld) into the super-block's sums (the registers hold the chains).
template <DType T>
void k4_sums(const uint8_t* x, const uint8_t* w, int32_t (&sum)[kRows][16]) {
  using F = Folded<T>;
  std::memset(sum, 0, sizeof(sum));
#pragma GCC unroll 1
  for (int j = 0; j < 8; ++j) {
    __m256i dot[kRows][2];
    for (int r = 0; r < kRows; ++r) dot[r][0] = dot[r][1] = _mm256_setzero_si256();
    auto unit = [&](auto C) {
      const int u = 8 * j + decltype(C)::value;
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 64 * u));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 64 * u + 32));
      for (int r = 0; r < kRows; ++r) {
        const __m256i xv = broadcast4(x + (u * kRows + r) * 4);
        dot[r][0] = _mm256_dpbusd_avx_epi32(dot[r][0], w0, xv);
        dot[r][1] = _mm256_dpbusd_avx_epi32(dot[r][1], w1, xv);
      }
    };
    unroll<0, 8>(unit);
    for (int v = 0; v < 2; ++v) {
      const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + F::kScales + 64 * j + 32 * v));
      for (int r = 0; r < kRows; ++r) packed_blocks_256::add_to_sums(sum[r] + 8 * v, _mm256_mullo_epi32(dot[r][v], sc));
    }
  }
}

// Tile x_tile (rows from m0) against one group's panel: per super-block the sums, then the packed
// loops' f32 steps (k16_tile, k4_tile, q6_tile): acc = fma(f32(sum), d * x's scale, acc), then for
// q2_k, q4_k and q5_k acc = fma(f32(mins), -dmin * x's scale, acc), mins the exact int32 sum of
// the min pairs against x's pairs of sub-block sums (vpdpwssd).
template <DType T>
void tile(const MatmulArgs& a, int64_t m0, int64_t n0, const uint8_t* panel, const uint8_t* x_tile,
          const folded::Slice& slice) {
  using F = Folded<T>;
  const int64_t rows = a.M - m0 < kRows ? a.M - m0 : kRows;
  alignas(32) float acc[kRows][16];
  start_acc(a, m0, rows, n0, slice, acc);
  for (int64_t i = 0; i < slice.count; ++i) {
    const uint8_t* x = x_tile + i * F::kXSuper;
    const uint8_t* w = panel + i * F::kSuper;
    alignas(32) int32_t sum[kRows][16];
    if constexpr (F::kK4) {
      k4_sums<T>(x, w, sum);
    } else {
      k16_sums<T>(x, w, sum);
    }
    for (int v = 0; v < 2; ++v) {
      const __m256 d = _mm256_load_ps(reinterpret_cast<const float*>(w + F::kD + 32 * v));
      for (int r = 0; r < kRows; ++r) {
        const __m256 xs = _mm256_set1_ps(x_scale(x + F::kXScales, r));
        const __m256i total = _mm256_load_si256(reinterpret_cast<const __m256i*>(sum[r] + 8 * v));
        float* out = acc[r] + 8 * v;
        __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xs), _mm256_load_ps(out));
        if constexpr (F::kPairs > 0) {
          __m256i mins = _mm256_setzero_si256();
          for (int p = 0; p < F::kPairs; ++p) {
            const __m256i factors =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(w + F::kMinPairs + 64 * p + 32 * v));
            mins = _mm256_dpwssd_avx_epi32(mins, factors, broadcast4(x + F::kXPairs + (p * kRows + r) * 4));
          }
          const __m256 dmin_neg = _mm256_load_ps(reinterpret_cast<const float*>(w + F::kD + 64 + 32 * v));
          y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin_neg, xs), y);
        }
        _mm256_store_ps(out, y);
      }
    }
  }
  store_acc(a, m0, rows, n0, slice, acc);
}

// Per slice of super-blocks x's tiles copied and each group folded and multiplied, y holding the
// sums between slices: each output's super-blocks in increasing order, then the bias. Each thread
// copies x's slice for itself (the threads split N).
template <DType T>
void matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  using F = Folded<T>;
  if (n_begin >= n_end) return;
  const int64_t supers = a.K / kQK_K, tiles = (a.M + kRows - 1) / kRows;
  const auto panel_bytes = static_cast<size_t>(F::kSlice * F::kSuper);
  uint8_t* panel = folded::aligned_scratch(panel_bytes + static_cast<size_t>(tiles * F::kSlice * F::kXSuper));
  uint8_t* x_slice = panel + panel_bytes;
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  for (int64_t s0 = 0; s0 < supers; s0 += F::kSlice) {
    const folded::Slice slice{s0, supers - s0 < F::kSlice ? supers - s0 : F::kSlice, s0 == 0, s0 + F::kSlice >= supers};
    pack_x_slice<T>(a, s0, slice.count, x_slice);
    for (int64_t n = n_begin; n < n_end; n += kPackedRows) {
      const uint8_t* group = a.w + static_cast<size_t>(n / kPackedRows) * group_bytes;
      for (int64_t i = 0; i < slice.count; ++i) {
        fold_section<T>(group + (s0 + i) * F::kSection, panel + i * F::kSuper);
      }
      for (int64_t t = 0; t < tiles; ++t) {
        tile<T>(a, t * kRows, n, panel, x_slice + t * F::kSlice * F::kXSuper, slice);
      }
    }
  }
}

}  // namespace

bool matmul_folded_avx_vnni(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_type) {
    case DType::Q2_K:
      matmul<DType::Q2_K>(a, n_begin, n_end);
      return true;
    case DType::Q3_K:
      matmul<DType::Q3_K>(a, n_begin, n_end);
      return true;
    case DType::Q4_K:
      matmul<DType::Q4_K>(a, n_begin, n_end);
      return true;
    case DType::Q5_K:
      matmul<DType::Q5_K>(a, n_begin, n_end);
      return true;
    case DType::Q6_K:
      matmul<DType::Q6_K>(a, n_begin, n_end);
      return true;
    default:
      return false;
  }
}

}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang
