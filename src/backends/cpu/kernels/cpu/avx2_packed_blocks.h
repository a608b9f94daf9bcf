// Packed weights (packed_weights.h) on 256-bit vectors, written once over B, for the avx2 level
// (vpmaddubsw: avx2_packed.cpp, which avx512 takes too) and avxvnni (vpdpbusd: avx_vnni.cpp): the
// blocks of 32 (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) and iq4_xs by block_tile, q4_k and q5_k by
// k4_tile, q6_k by q6_tile; include inside the file's target region, after <cstdint>, <cstring>,
// packed_weights.h and x86_intrinsics.h. A group's 16 rows are two vectors (rows 0-7 and 8-15), x
// in rows, each output's operations those of isa.h's contract, so every level gives the same bits:
// per block (sub-block, super-block) the exact integer dot product, then the f32 steps the tiles
// below say, in increasing k, then acc + bias. The integer products:
//   B::kVnni false (AVX2: no byte dot product into int32), per 4-byte unit of the rows vpmaddubsw
//     (unsigned by signed bytes, pairs summed into int16, saturating), so each type's values and
//     sums are kept within int16's range (the bounds are the tiles'); q8_0 by |w| against x with
//     w's signs moved onto it (vpsignb), pairs at most 2 * 128 * 127, widened to int32 by vpmaddwd
//     against ones each unit.
//   B::kVnni true (B::dot: vpdpbusd, unsigned by signed bytes summed in fours into int32): q8_0 as
//     x + 128 (a.xq_unsigned) against the signed weights, less 128 * (each row's block sum:
//     vpdpbusd of 128s against the weights, once per unit for every row of x); the rest as their
//     unsigned values against x.
// Tiles of 4 rows of x by one group: the block's integer sums in registers, the f32 sums in the
// tile's memory (L1), one fma per block, row and vector.
#pragma once

#include "backends/cpu/kernels/cpu/packed_blocks_of_32.h"
#include "backends/cpu/kernels/cpu/packed_q4_k.h"  // x_sum_pair
#include "backends/cpu/kernels/cpu/unroll.h"

namespace ferry::kernels::cpu {
namespace {
namespace packed_blocks_256 {

// Four bytes of x in every 32-bit lane.
inline __m256i broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Keeps v in a register as computed: GCC would otherwise reassociate a block's integer sums (plain
// vector adds to it) into a tree and keep the partial products on the stack.
inline void keep_order(__m256i& v) {
  __asm__("" : "+x"(v));
}

// out[0..8) += v: a tile's int32 sums kept in memory.
inline void add_to_sums(int32_t* out, __m256i v) {
  auto* p = reinterpret_cast<__m256i*>(out);
  _mm256_store_si256(p, _mm256_add_epi32(_mm256_load_si256(p), v));
}

// y = acc + bias for the tile's G groups by MR rows ([g][m]: the group's 16 outputs).
template <int MR, int G>
inline void store_outputs(const MatmulArgs& a, int64_t m0, const int64_t (&n0)[G], const float (&acc)[G][MR][16]) {
  for (int g = 0; g < G; ++g) {
    for (int v = 0; v < 2; ++v) {
      const __m256 bias = a.bias != nullptr ? _mm256_loadu_ps(a.bias + n0[g] + 8 * v) : _mm256_setzero_ps();
      for (int m = 0; m < MR; ++m) {
        _mm256_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g] + 8 * v,
                         _mm256_add_ps(_mm256_load_ps(acc[g][m] + 8 * v), bias));
      }
    }
  }
}

// Decode's prefetch of the next section's first `bytes` (its d and scales), which the units' own
// prefetches skip.
template <int G>
inline void prefetch_next_factors(const MatmulArgs& a, const uint8_t* const (&section)[G], int64_t section_bytes,
                                  int64_t bytes) {
  if (G < 2 || !a.prefetch) return;
  for (int g = 0; g < G; ++g) {
    for (int64_t off = 0; off < bytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(section[g] + section_bytes + off + kDecodePrefetchBytes), _MM_HINT_T0);
  }
}

// v's 16-bit lanes shifted left by kBits, or right by -kBits.
template <int kBits>
inline __m256i shift_epi16(__m256i v) {
  if constexpr (kBits >= 0) {
    return _mm256_slli_epi16(v, kBits);
  } else {
    return _mm256_srli_epi16(v, -kBits);
  }
}

// The iq4_nl / iq4_xs values (kIq4NlValues) in both 128-bit lanes, for vpshufb: + 128 (unsigned,
// 1..241), as they are (signed), or their magnitudes.
enum class Iq4Table { Shifted, Signed, Magnitudes };
template <Iq4Table kTable>
inline __m256i iq4_table_256() {
  alignas(16) int8_t table[16];
  for (int i = 0; i < 16; ++i) {
    const int value = kIq4NlValues[i];
    table[i] = static_cast<int8_t>(kTable == Iq4Table::Shifted  ? value ^ 0x80
                                   : kTable == Iq4Table::Signed ? value
                                                                : (value < 0 ? -value : value));
  }
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
}

// A packed iq4_xs section's chunk scales d * (ls_j - 32) of its 16 rows, [chunk j][row]: exact in
// f32 (an f16 times a 6-bit integer), so avx512_dot.cpp's iq4_xs_chunk_scales' values. Chunk j's
// ls: the low 4 bits from scales_l plane j / 2 (its high nibble for odd j), the top 2 from bits
// 2 (j % 4) of scales_h plane j / 4.
inline void iq4_xs_chunk_scales_256(const uint8_t* section, float* out) {
  const __m256 d[2] = {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section))),
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section + 16)))};
  auto plane = [&](int64_t at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(section + at)); };
  auto chunk = [&](auto J) {
    constexpr int kJ = decltype(J)::value;
    const __m128i l = plane(kPackedIQ4XSScalesLow + 16 * (kJ / 2));
    const __m128i low = _mm_and_si128(kJ % 2 == 0 ? l : _mm_srli_epi16(l, 4), _mm_set1_epi8(0x0F));
    const __m128i h = plane(kPackedIQ4XSScalesHigh + 16 * (kJ / 4));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(h, 2 * (kJ % 4)), _mm_set1_epi8(3));
    const __m128i ls = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
    for (int v = 0; v < 2; ++v) {
      const __m256i lanes = _mm256_cvtepi8_epi32(v == 0 ? ls : _mm_srli_si128(ls, 8));
      _mm256_storeu_ps(out + 16 * kJ + 8 * v, _mm256_mul_ps(_mm256_cvtepi32_ps(lanes), d[v]));
    }
  };
  unroll<0, 8>(chunk);
}

// G groups of 16 weight rows (group[g], outputs from n0[g]) against MR rows of x from m0, x in
// rows: the blocks of 32 and iq4_xs's chunks. Per block and row the exact integer dot product of
// the weights' values and x, then acc = fma(f32(dot), weight scale * x scale, acc) (q4_1, q5_1:
// then acc = fma(m, x's block sum s, acc)), as avx512_dot.cpp's loops, so the same bits. The dot
// product of the nibble types: the values as unsigned bytes (q4_0's q + 8, q5_0's q + 16, the
// fifth bits put in from the block's unit of them; q4_1's and q5_1's q; iq4's table value + 128,
// looked up) against x, started from -offset * (x's block sum), with VNNI by vpdpbusd; without,
// by vpmaddubsw: q4_0 and q4_1's pairs (at most 2 * 15 * 127) summed in int16 over the block and
// widened once, q5_0 and q5_1's (2 * 31 * 127) widened each unit, and iq4's (|value| up to 241 as
// unsigned would saturate) as q8_0's: |value| against x with the value's signs moved onto it (x is
// in [-127, 127], q8_0 and q8_K alike, so its negation is too), each product widened (at most 2 *
// 127 * 127), from 0.
template <class B, DType T, int MR, int G>
void block_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  const int64_t blocks = a.K / 32;
  constexpr int kUnits = T == DType::Q8_0 ? 8 : 4;  // 64-byte units of quants per block
  constexpr bool kFifth = packed_block_high_bytes(T) != 0;
  constexpr bool kSignMoved = !B::kVnni && has_table(T);
  // Without VNNI: the int16 sums widened once per block (q4_0, q4_1) or each unit (the rest).
  constexpr bool kWidenPerBlock = !B::kVnni && (T == DType::Q4_0 || T == DType::Q4_1);
  constexpr int32_t kOffset = kSignMoved ? 0 : nibble_offset(T);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(15);
  const __m256i bytes128 = _mm256_set1_epi8(static_cast<char>(0x80));
  [[maybe_unused]] const __m256i table = !has_table(T) ? _mm256_setzero_si256()
                                         : B::kVnni    ? iq4_table_256<Iq4Table::Shifted>()
                                                       : iq4_table_256<Iq4Table::Signed>();
  [[maybe_unused]] const __m256i magnitudes =
      kSignMoved ? iq4_table_256<Iq4Table::Magnitudes>() : _mm256_setzero_si256();
  // The f32 sums, in memory: the registers hold the block's integer ones.
  alignas(32) float acc[G][MR][16] = {};
  // iq4_xs: each group's chunk scales of the current super-block
  [[maybe_unused]] alignas(32) float chunk_scale[G][T == DType::IQ4_XS ? 8 * kPackedRows : 1];
  const int8_t* x = a.xq + m0 * a.K;
  [[maybe_unused]] const uint8_t* x_unsigned = B::kVnni && T == DType::Q8_0 ? a.xq_unsigned + m0 * a.K : nullptr;
  for (int64_t b = 0; b < blocks; ++b) {
    if constexpr (T == DType::IQ4_XS) {
      if (b % 8 == 0) {
        for (int g = 0; g < G; ++g) {
          const uint8_t* section = group[g] + b / 8 * kPackedIQ4XSSection;
          if (G > 1 && a.prefetch) {
            for (int64_t off = 0; off < kPackedIQ4XSQuants; off += 64)
              _mm_prefetch(reinterpret_cast<const char*>(section + off + kDecodePrefetchBytes), _MM_HINT_T0);
          }
          iq4_xs_chunk_scales_256(section, chunk_scale[g]);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const uint8_t* unit = block_units<T>(group[g], blocks, b);
      [[maybe_unused]] __m256i fifth[2];  // q5_0, q5_1: the block's unit of fifth bits
      if constexpr (kFifth) {
        const uint8_t* quants = group[g] + packed_block_quants_at(T, blocks, b);
        // The stream's line the units' prefetches below skip.
        if (G > 1 && a.prefetch)
          _mm_prefetch(reinterpret_cast<const char*>(quants + kDecodePrefetchBytes), _MM_HINT_T0);
        for (int v = 0; v < 2; ++v) fifth[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 32 * v));
      }
      __m256i dot[MR][2];
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) dot[m][0] = dot[m][1] = _mm256_setzero_si256();
      [[maybe_unused]] __m256i w_offset[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      auto unit_products = [&](auto C) {
        constexpr int c = decltype(C)::value;
        if (G > 1 && a.prefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(unit + c * 64 + kDecodePrefetchBytes), _MM_HINT_T0);
        }
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + c * 64 + v * 32));
          if constexpr (T == DType::Q8_0 && B::kVnni) {
            w_offset[v] = B::dot(w_offset[v], bytes128, w);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              dot[m][v] = B::dot(dot[m][v], broadcast4(x_unsigned + m * a.K + b * 32 + c * 4), w);
            }
          } else if constexpr (T == DType::Q8_0) {
            const __m256i magnitude = _mm256_abs_epi8(w);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const __m256i signed_x = _mm256_sign_epi8(broadcast4(x + m * a.K + b * 32 + c * 4), w);
              dot[m][v] =
                  _mm256_add_epi32(dot[m][v], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), ones16));
              keep_order(dot[m][v]);
            }
          } else {
            __m256i low = _mm256_and_si256(w, low4);
            __m256i high = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
            if constexpr (kFifth) {
              // + 16 where bit 2c (low nibble) or 2c + 1 (high) of the byte's fifth-bit unit is set:
              // 16-bit shifts of at most 4 keep the bit in its byte.
              const __m256i bit4 = _mm256_set1_epi8(0x10);
              low = _mm256_or_si256(low, _mm256_and_si256(shift_epi16<4 - 2 * c>(fifth[v]), bit4));
              high = _mm256_or_si256(high, _mm256_and_si256(shift_epi16<3 - 2 * c>(fifth[v]), bit4));
            }
            if constexpr (kSignMoved) {
              const __m256i low_value = _mm256_shuffle_epi8(table, low);
              const __m256i high_value = _mm256_shuffle_epi8(table, high);
              const __m256i low_magnitude = _mm256_shuffle_epi8(magnitudes, low);
              const __m256i high_magnitude = _mm256_shuffle_epi8(magnitudes, high);
#pragma GCC unroll 8
              for (int m = 0; m < MR; ++m) {
                const int8_t* xb = x + m * a.K + b * 32 + c * 4;
                const __m256i low_x = _mm256_sign_epi8(broadcast4(xb), low_value);
                const __m256i high_x = _mm256_sign_epi8(broadcast4(xb + 16), high_value);
                dot[m][v] =
                    _mm256_add_epi32(dot[m][v], _mm256_madd_epi16(_mm256_maddubs_epi16(low_magnitude, low_x), ones16));
                dot[m][v] = _mm256_add_epi32(dot[m][v],
                                             _mm256_madd_epi16(_mm256_maddubs_epi16(high_magnitude, high_x), ones16));
                keep_order(dot[m][v]);
              }
            } else {
              if constexpr (has_table(T)) {
                low = _mm256_shuffle_epi8(table, low);
                high = _mm256_shuffle_epi8(table, high);
              }
#pragma GCC unroll 8
              for (int m = 0; m < MR; ++m) {
                const int8_t* xb = x + m * a.K + b * 32 + c * 4;
                if constexpr (B::kVnni) {
                  dot[m][v] = B::dot(dot[m][v], low, broadcast4(xb));
                  dot[m][v] = B::dot(dot[m][v], high, broadcast4(xb + 16));
                } else if constexpr (kWidenPerBlock) {
                  dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(low, broadcast4(xb)));
                  dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(high, broadcast4(xb + 16)));
                  keep_order(dot[m][v]);
                } else {
                  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(low, broadcast4(xb)),
                                                         _mm256_maddubs_epi16(high, broadcast4(xb + 16)));
                  dot[m][v] = _mm256_add_epi32(dot[m][v], _mm256_madd_epi16(pairs, ones16));
                  keep_order(dot[m][v]);
                }
              }
            }
          }
        }
      };
      unroll<0, kUnits>(unit_products);
      __m256 w_scale[2];
      [[maybe_unused]] __m256 w_min[2];
      for (int v = 0; v < 2; ++v) {
        if constexpr (T == DType::IQ4_XS) {
          w_scale[v] = _mm256_load_ps(chunk_scale[g] + b % 8 * kPackedRows + 8 * v);
        } else {
          w_scale[v] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group[g] + b * 32 + 16 * v)));
        }
        if constexpr (has_mins(T)) {
          w_min[v] = _mm256_cvtph_ps(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(group[g] + blocks * 32 + b * 32 + 16 * v)));
        }
      }
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const __m256 x_scale = _mm256_set1_ps(a.xq_scale[x_scale_at(T, blocks, m0 + m, b)]);
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
          __m256i sum = dot[m][v];
          if constexpr (kWidenPerBlock) sum = _mm256_madd_epi16(sum, ones16);
          if constexpr (T == DType::Q8_0 && B::kVnni) sum = _mm256_sub_epi32(sum, w_offset[v]);
          if constexpr (kOffset != 0) {
            sum = _mm256_add_epi32(_mm256_set1_epi32(-kOffset * x_block_sum<T>(a, blocks, m0 + m, b)), sum);
          }
          float* out = acc[g][m] + 8 * v;
          __m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(w_scale[v], x_scale), _mm256_load_ps(out));
          if constexpr (has_mins(T)) r = _mm256_fmadd_ps(w_min[v], _mm256_set1_ps(a.xq_sum[(m0 + m) * blocks + b]), r);
          _mm256_store_ps(out, r);
        }
      }
    }
  }
  store_outputs(a, m0, n0, acc);
}

// A packed q4_k section's factors for its 16 rows, rows 0-7 in [.][0] and 8-15 in [.][1], as int32
// lanes (quant_blocks.h unpack_scales_k4, from the 12 scale planes): sc[j] sub-block j's 6-bit scale
// (without VNNI in both int16 halves, for vpmaddwd against the sub-block's int16 pair sums),
// mins[k] = m_2k | m_2k+1 << 16 (for vpmaddwd against x's sum pair, packed_q4_k.h x_sum_pair).
struct K4Factors256 {
  __m256i sc[8][2];
  __m256i mins[4][2];
};

// Bytes 8v..8v + 7 of 16 (rows 8v..8v + 7) as int32 lanes.
inline __m256i row_ints(__m128i bytes, int v) {
  return _mm256_cvtepu8_epi32(v == 0 ? bytes : _mm_srli_si128(bytes, 8));
}

template <class B>
inline void k4_factors_256(const uint8_t* section, K4Factors256& f) {
  const uint8_t* planes = section + kPackedQ4KScales;
  auto plane = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes + 16 * i)); };
  const __m128i six = _mm_set1_epi8(0x3F), low4 = _mm_set1_epi8(0x0F), top2 = _mm_set1_epi8(0x30);
  __m128i sc[8], m[8];
  for (int j = 0; j < 4; ++j) {
    sc[j] = _mm_and_si128(plane(j), six);
    m[j] = _mm_and_si128(plane(j + 4), six);
    // Sub-block j + 4: the low 4 bits from plane 8 + j, the top 2 from the top of plane j (4 + j).
    sc[j + 4] = _mm_or_si128(_mm_and_si128(plane(j + 8), low4), _mm_and_si128(_mm_srli_epi16(plane(j), 2), top2));
    m[j + 4] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(plane(j + 8), 4), low4),
                            _mm_and_si128(_mm_srli_epi16(plane(j + 4), 2), top2));
  }
  for (int v = 0; v < 2; ++v) {
    for (int j = 0; j < 8; ++j) {
      const __m256i scale = row_ints(sc[j], v);
      f.sc[j][v] = B::kVnni ? scale : _mm256_or_si256(scale, _mm256_slli_epi32(scale, 16));
    }
    for (int k = 0; k < 4; ++k)
      f.mins[k][v] = _mm256_or_si256(row_ints(m[2 * k], v), _mm256_slli_epi32(row_ints(m[2 * k + 1], v), 16));
  }
}

// Packed q4_k or q5_k against x rounded to q8_K: G groups of 16 weight rows against MR rows of x
// from m0, x in rows. Per sub-block j and row, the exact integer dot product (w_j . x_j) of its
// nibbles (even j the low ones, odd j the high ones shifted down; q5_k's fifth bits, bit j of its qh
// unit's bytes, put in above them) against x: without VNNI by vpmaddubsw, pairs at most 2 * 15 * 127
// (q5_k 2 * 31 * 127) summed in int16 over kWidenUnits units (q4_k the sub-block's 8, at most 30480;
// q5_k 4, at most 31496), then times sc_j by vpmaddwd; with it by vpdpbusd, then times sc_j by
// vpmulld. Per super-block the exact int32 sums sum_j sc_j * (w_j . x_j) and sum_j m_j * (x's sum
// over sub-block j) (vpmaddwd), then packed_q4_k.h add_super_block's two f32 steps: the operations
// of avx512_dot.cpp's loops and amx.cpp's tiles, so the same bits.
template <class B, DType T, int MR, int G>
void k4_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  static_assert(T == DType::Q4_K || T == DType::Q5_K, "q4_k's factors");
  constexpr int64_t kSection = T == DType::Q5_K ? kPackedQ5KSection : kPackedQ4KSection;
  constexpr int64_t kQuants = T == DType::Q5_K ? kPackedQ5KQuants : kPackedQ4KQuants;
  constexpr int kWidenUnits = T == DType::Q5_K ? 4 : 8;
  const int64_t supers = a.K / kQK_K;
  const __m256i low4 = _mm256_set1_epi8(15);
  // The f32 sums and each super-block's int32 ones in memory: the registers hold a sub-block's.
  alignas(32) float acc[G][MR][16] = {};
  for (int64_t s = 0; s < supers; ++s) {
    const int8_t* x[MR];
    int32_t x_pair[MR][4];
    for (int m = 0; m < MR; ++m) {
      x[m] = a.xq + (m0 + m) * a.K + s * kQK_K;
      const int16_t* bsum = a.xq_bsum + (m0 + m) * (a.K / 16) + s * 16;
      for (int k = 0; k < 4; ++k) x_pair[m][k] = packed_q4_k::x_sum_pair<B>(bsum, k);
    }
    const uint8_t* section[G];
    K4Factors256 f[G];
    for (int g = 0; g < G; ++g) {
      section[g] = group[g] + s * kSection;
      k4_factors_256<B>(section[g], f[g]);
    }
    alignas(32) int32_t sum[G][MR][16] = {};
    // Sub-block 2p + kOdd (the low nibbles of the pair's 8 units, or the high ones) of every group,
    // a unit of each in turn, so decode's streams advance together (a whole section of one stream
    // at a time read them slower: avx512_dot.cpp packed_k4_rows).
    // pair: the pair's index p, an int (q4_k) or an Index (q5_k).
    auto sub_block = [&](auto pair, auto odd) {
      constexpr int kOdd = decltype(odd)::value;
      int p;
      if constexpr (requires { decltype(pair)::value; }) {
        p = decltype(pair)::value;
      } else {
        p = pair;
      }
      const int j = 2 * p + kOdd;
      // Without VNNI: the int16 pair sums of the current kWidenUnits units, and (q5_k) the int32
      // scaled sums of those before.
      __m256i dot[G][MR][2];
      [[maybe_unused]] __m256i widened[G][MR][2];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) dot[g][m][0] = dot[g][m][1] = _mm256_setzero_si256();
      }
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
          const uint8_t* unit = section[g] + kQuants + (8 * p + c) * 64;
          if (G > 1 && a.prefetch && kOdd == 0) {
            _mm_prefetch(reinterpret_cast<const char*>(unit + kDecodePrefetchBytes), _MM_HINT_T0);
          }
#pragma GCC unroll 2
          for (int v = 0; v < 2; ++v) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + v * 32));
            __m256i values = _mm256_and_si256(kOdd == 0 ? w : _mm256_srli_epi16(w, 4), low4);
            if constexpr (T == DType::Q5_K) {
              // Bit j of each qh byte to bit 4 (16-bit shifts of at most 4: the bit stays in its byte).
              const __m256i h =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(section[g] + kPackedQ5KHigh + c * 64 + v * 32));
              constexpr int kJ = 2 * decltype(pair)::value + kOdd;
              __m256i fifth;
              if constexpr (kJ <= 4) {
                fifth = _mm256_slli_epi16(h, 4 - kJ);
              } else {
                fifth = _mm256_srli_epi16(h, kJ - 4);
              }
              values = _mm256_or_si256(values, _mm256_and_si256(fifth, _mm256_set1_epi8(0x10)));
            }
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const __m256i xb = broadcast4(x[m] + 32 * j + 4 * c);
              if constexpr (B::kVnni) {
                dot[g][m][v] = B::dot(dot[g][m][v], values, xb);
              } else {
                dot[g][m][v] = _mm256_add_epi16(dot[g][m][v], _mm256_maddubs_epi16(values, xb));
                keep_order(dot[g][m][v]);
                if (kWidenUnits < 8 && c == kWidenUnits - 1) {
                  widened[g][m][v] = _mm256_madd_epi16(dot[g][m][v], f[g].sc[j][v]);
                  dot[g][m][v] = _mm256_setzero_si256();
                }
              }
            }
          }
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 2
          for (int v = 0; v < 2; ++v) {
            __m256i scaled;
            if constexpr (B::kVnni) {
              scaled = _mm256_mullo_epi32(dot[g][m][v], f[g].sc[j][v]);
            } else {
              scaled = _mm256_madd_epi16(dot[g][m][v], f[g].sc[j][v]);
              if constexpr (kWidenUnits < 8) scaled = _mm256_add_epi32(widened[g][m][v], scaled);
            }
            add_to_sums(sum[g][m] + 8 * v, scaled);
          }
        }
      }
    };
    if constexpr (T == DType::Q5_K) {
      // The pairs written out, so the fifth bits take immediate shifts (by a register count,
      // vpsllw is two micro-ops): 1.1-1.35x at avxvnni, 0.97-1.16x at avx2. q4_k's loop so ran 0.75-0.95x as fast.
      sub_block(Index<0>{}, Index<0>{});
      sub_block(Index<0>{}, Index<1>{});
      sub_block(Index<1>{}, Index<0>{});
      sub_block(Index<1>{}, Index<1>{});
      sub_block(Index<2>{}, Index<0>{});
      sub_block(Index<2>{}, Index<1>{});
      sub_block(Index<3>{}, Index<0>{});
      sub_block(Index<3>{}, Index<1>{});
    } else {
#pragma GCC unroll 1
      for (int p = 0; p < 4; ++p) {
        sub_block(p, Index<0>{});
        sub_block(p, Index<1>{});
      }
    }
    prefetch_next_factors(a, section, kSection, kQuants);
    for (int g = 0; g < G; ++g) {
      for (int v = 0; v < 2; ++v) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section[g] + 16 * v)));
        const __m256 dmin =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section[g] + 32 + 16 * v)));
        const __m256 dmin_neg = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0f));
        for (int m = 0; m < MR; ++m) {
          __m256i mins = _mm256_setzero_si256();
          for (int k = 0; k < 4; ++k) {
            mins = _mm256_add_epi32(mins, _mm256_madd_epi16(f[g].mins[k][v], _mm256_set1_epi32(x_pair[m][k])));
          }
          const __m256 xs = _mm256_set1_ps(a.xq_scale[(m0 + m) * supers + s]);
          const __m256i total = _mm256_load_si256(reinterpret_cast<const __m256i*>(sum[g][m] + 8 * v));
          float* out = acc[g][m] + 8 * v;
          __m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xs), _mm256_load_ps(out));
          r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin_neg, xs), r);
          _mm256_store_ps(out, r);
        }
      }
    }
  }
  store_outputs(a, m0, n0, acc);
}

// Sub-block t's 6-bit values (q + 32) of half v (rows 8v..8v + 7) of a packed q6_k unit, its three
// 64-byte pieces (packed_weights.h): e_0..e_2 a mask away, e_3 the pieces' top 2 bits gathered
// (16-bit shifts: the bits they carry across bytes are masked off).
template <int T>
inline __m256i q6_k_values_256(const uint8_t* unit, int v) {
  auto piece = [&](int p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 64 * p + 32 * v)); };
  if constexpr (T < 3) {
    return _mm256_and_si256(piece(T), _mm256_set1_epi8(0x3F));
  } else {
    const __m256i a = _mm256_and_si256(_mm256_srli_epi16(piece(0), 6), _mm256_set1_epi8(0x03));
    const __m256i b = _mm256_and_si256(_mm256_srli_epi16(piece(1), 4), _mm256_set1_epi8(0x0C));
    const __m256i c = _mm256_and_si256(_mm256_srli_epi16(piece(2), 2), _mm256_set1_epi8(0x30));
    return _mm256_or_si256(_mm256_or_si256(a, b), c);
  }
}

// The int8 scales of half v of the 16 at p (a scale plane, packed_weights.h) as int32 lanes.
inline __m256i q6_k_scales_256(const uint8_t* p, int v) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * v)));
}

// Two int32 lanes' low halves as one int16 pair (low's first), for vpmaddwd.
inline __m256i int16_pair(__m256i low, __m256i high) {
  return _mm256_blend_epi16(low, _mm256_slli_epi32(high, 16), 0xAA);
}

// Packed q6_k against x rounded to q8_K: G groups of 16 weight rows against MR rows of x from m0,
// x in rows. Per super-block and row the exact int32 sum_j sc_j * (w_j . x_j) of its 16 sub-blocks,
// w the signed 6-bit quants: per sub-block the dot product of the stored values (q + 32, unsigned)
// with x, without VNNI by vpmaddubsw (pairs at most 2 * 63 * 127: two units' pairs summed in int16,
// at most 32004, then times sc_j by vpmaddwd; the sums started from -32 sum_j sc_j * (x's sum over
// sub-block j), vpmaddwd on scale pairs and q8_K's bsum pairs), with it by vpdpbusd from -32 * (x's
// sum over the sub-block), then times sc_j by vpmulld; then y = fma(f32(sum), d * x's scale, y) from 0, and y + bias at
// the end: avx512_dot.cpp's packed_q6_k_rows, so every level gives the same bits.
template <class B, int MR, int G>
void q6_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  const int64_t supers = a.K / kQK_K;
  // The f32 sums and each super-block's int32 ones in memory: the registers hold a sub-block's.
  alignas(32) float acc[G][MR][16] = {};
  for (int64_t s = 0; s < supers; ++s) {
    const int8_t* x[MR];
    for (int m = 0; m < MR; ++m) x[m] = a.xq + (m0 + m) * a.K + s * kQK_K;
    const uint8_t* section[G];
    alignas(32) int32_t sum[G][MR][16];
    // With VNNI each sub-block's chains start from -32 * (x's sum over it), [m][j] (a broadcast
    // load), so they sum the signed quants' products and the sums start from 0; without, the
    // int16 pair sums have no room for it and the sums start from the correction.
    [[maybe_unused]] alignas(32) int32_t start[MR][16];
    if constexpr (B::kVnni) {
      for (int m = 0; m < MR; ++m) {
        const int16_t* bsum = a.xq_bsum + (m0 + m) * (a.K / 16) + s * 16;
        for (int half = 0; half < 2; ++half) {
          const __m256i sums =
              _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsum + 8 * half)));
          _mm256_store_si256(reinterpret_cast<__m256i*>(start[m] + 8 * half),
                             _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 5)));
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      section[g] = group[g] + s * kPackedQ6KSection;
      if constexpr (B::kVnni) {
        for (int m = 0; m < MR; ++m) std::memset(sum[g][m], 0, sizeof(sum[g][m]));
      } else {
        const uint8_t* planes = section[g] + kPackedQ6KScales;
        for (int v = 0; v < 2; ++v) {
          // Sub-blocks 2p and 2p + 1: plane p % 4 of quads 2 (p / 4) and 2 (p / 4) + 1.
          __m256i pairs[8];
          for (int p = 0; p < 8; ++p) {
            const uint8_t* even = planes + 64 * (2 * (p / 4)) + 16 * (p % 4);
            const __m128i low = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(even + 8 * v));
            const __m128i high = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(even + 64 + 8 * v));
            pairs[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(low, high));  // row r's two in 32-bit lane r
          }
          for (int m = 0; m < MR; ++m) {
            const int16_t* bsum = a.xq_bsum + (m0 + m) * (a.K / 16) + s * 16;
            __m256i corr = _mm256_setzero_si256();
            for (int p = 0; p < 8; ++p)
              corr = _mm256_add_epi32(corr, _mm256_madd_epi16(pairs[p], broadcast4(bsum + 2 * p)));
            _mm256_store_si256(reinterpret_cast<__m256i*>(sum[g][m] + 8 * v),
                               _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5)));
          }
        }
      }
    }
    // Sub-block t of quad q (j = 8 (q / 2) + 2t + q % 2) of every group, a unit of each in turn, so
    // decode's streams advance together.
    auto sub_block = [&](int q, auto t) {
      constexpr int kT = decltype(t)::value;
      __m256i dot[G][MR][2];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          dot[g][m][0] = dot[g][m][1] =
              B::kVnni ? _mm256_set1_epi32(start[m][8 * (q / 2) + 2 * kT + q % 2]) : _mm256_setzero_si256();
        }
      }
      __m256i sc[G][2];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        for (int v = 0; v < 2; ++v) {
          const __m256i scale = q6_k_scales_256(section[g] + kPackedQ6KScales + 64 * q + 16 * kT, v);
          sc[g][v] = B::kVnni ? scale : int16_pair(scale, scale);
        }
      }
      [[maybe_unused]] __m256i pair_sums[G][MR][2];  // without VNNI: two units' int16 pairs
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
          const uint8_t* unit = section[g] + kPackedQ6KQuants + q * kPackedQ6KQuad + 192 * i;
          if (G > 1 && a.prefetch && kT == 0) {
            for (int piece = 0; piece < 3; ++piece)
              _mm_prefetch(reinterpret_cast<const char*>(unit + 64 * piece + kDecodePrefetchBytes), _MM_HINT_T0);
          }
#pragma GCC unroll 2
          for (int v = 0; v < 2; ++v) {
            const __m256i values = q6_k_values_256<kT>(unit, v);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const __m256i xb = broadcast4(x[m] + 128 * (q / 2) + 32 * kT + 4 * (4 * (q % 2) + i));
              if constexpr (B::kVnni) {
                dot[g][m][v] = B::dot(dot[g][m][v], values, xb);
              } else {
                const __m256i products = _mm256_maddubs_epi16(values, xb);
                if (i % 2 == 0) {
                  pair_sums[g][m][v] = products;
                } else {
                  const __m256i scaled = _mm256_madd_epi16(_mm256_add_epi16(pair_sums[g][m][v], products), sc[g][v]);
                  dot[g][m][v] = _mm256_add_epi32(dot[g][m][v], scaled);
                }
              }
            }
          }
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 2
          for (int v = 0; v < 2; ++v) {
            const __m256i scaled = B::kVnni ? _mm256_mullo_epi32(dot[g][m][v], sc[g][v]) : dot[g][m][v];
            add_to_sums(sum[g][m] + 8 * v, scaled);
          }
        }
      }
    };
#pragma GCC unroll 1
    for (int q = 0; q < 4; ++q) {
      sub_block(q, Index<0>{});
      sub_block(q, Index<1>{});
      sub_block(q, Index<2>{});
      sub_block(q, Index<3>{});
    }
    prefetch_next_factors(a, section, kPackedQ6KSection, kPackedQ6KQuants);
    for (int g = 0; g < G; ++g) {
      for (int v = 0; v < 2; ++v) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section[g] + 16 * v)));
        for (int m = 0; m < MR; ++m) {
          const __m256 xs = _mm256_set1_ps(a.xq_scale[(m0 + m) * supers + s]);
          const __m256i total = _mm256_load_si256(reinterpret_cast<const __m256i*>(sum[g][m] + 8 * v));
          float* out = acc[g][m] + 8 * v;
          _mm256_store_ps(out, _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xs), _mm256_load_ps(out)));
        }
      }
    }
  }
  store_outputs(a, m0, n0, acc);
}

// A packed q2_k or q3_k section's sub-block factors for the 16 rows, as vpmaddwd takes them, [j][16]
// (rows 0-7, then 8-15): sc_j (q2_k: plane j's low nibbles; q3_k: sc_j - 32 from the 12 planes, as
// avx512_dot.cpp's q3_k_scales) in the low int16 of each row's lane, and without VNNI in the high
// one too (against a sub-block's two int16 pair sums; with VNNI against its int32 dot product,
// whose low int16 holds it: |dot| < 16 * 7 * 128); and per pair p of sub-blocks, the pair's sc
// (q3_k) or m (q2_k) as int16s (2p's low) against x's two sums of 16.
template <class B, DType T>
inline void k16_factors_256(const uint8_t* section, int32_t (&sc)[16][16], int32_t (&pairs)[8][16]) {
  auto plane = [&](int i) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(section + (T == DType::Q2_K ? kPackedQ2KScales : kPackedQ3KScales) + 16 * i));
  };
  __m128i bytes[16];   // sub-block j's factor byte of the 16 rows: sc (signed for q3_k)
  __m128i paired[16];  // what pairs takes: q3_k's sc, q2_k's m
  for (int j = 0; j < 16; ++j) {
    if constexpr (T == DType::Q2_K) {
      const __m128i p = plane(j);
      bytes[j] = _mm_and_si128(p, _mm_set1_epi8(0x0F));
      paired[j] = _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(0x0F));
    } else {
      // the low 4 bits from plane j % 8 (its high nibbles for j >= 8), the top 2 from plane
      // 8 + j % 4's bits 2 (j / 4)
      const __m128i low = _mm_and_si128(j < 8 ? plane(j) : _mm_srli_epi16(plane(j - 8), 4), _mm_set1_epi8(0x0F));
      const __m128i top =
          _mm_and_si128(_mm_srl_epi16(plane(8 + j % 4), _mm_cvtsi32_si128(2 * (j / 4))), _mm_set1_epi8(3));
      bytes[j] = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
      paired[j] = bytes[j];
    }
  }
  auto lanes = [&](__m128i b, int v) {  // bytes 8v..8v + 7 as int32 (q3_k's signed)
    return T == DType::Q2_K ? row_ints(b, v) : _mm256_cvtepi8_epi32(v == 0 ? b : _mm_srli_si128(b, 8));
  };
  for (int v = 0; v < 2; ++v) {
    for (int j = 0; j < 16; ++j) {
      const __m256i low = _mm256_and_si256(lanes(bytes[j], v), _mm256_set1_epi32(0xFFFF));
      const __m256i both = B::kVnni ? low : _mm256_or_si256(low, _mm256_slli_epi32(low, 16));
      _mm256_store_si256(reinterpret_cast<__m256i*>(sc[j] + 8 * v), both);
    }
    for (int p = 0; p < 8; ++p) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(pairs[p] + 8 * v),
                         int16_pair(lanes(paired[2 * p], v), lanes(paired[2 * p + 1], v)));
    }
  }
}

// Packed q2_k or q3_k (sub-blocks of 16, 2 or 3 bits) against x rounded to q8_K: G groups of 16
// weight rows against MR rows of x from m0, x in rows. Per sub-block j and row the dot product of
// its unsigned values (q2_k's q, q3_k's q + 4: packed_weights.h's qs units, q3_k's third bits from
// its hmask units) with x, without VNNI by vpmaddubsw (pairs at most 2 * 7 * 127, four units' in
// int16), with it by vpdpbusd; times sc_j by vpmaddwd (k16_factors_256), summed exactly in int32
// over the super-block, q3_k's from -4 * sum_j sc_j * (x's sum over sub-block j), so sum_j sc_j
// q_j . x_j; q2_k's mins sum_j m_j * (x's sum over j) likewise; then per super-block y = fma(f32(sum),
// d * x's scale, y) (q2_k: then y = fma(f32(mins), -dmin * x's scale, y)): avx512_dot.cpp's
// packed_k16_rows, so every level gives the same bits.
template <class B, DType T, int MR, int G>
void k16_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  static_assert(T == DType::Q2_K || T == DType::Q3_K, "sub-blocks of 16");
  constexpr int64_t kSection = T == DType::Q2_K ? kPackedQ2KSection : kPackedQ3KSection;
  constexpr int64_t kQuants = T == DType::Q2_K ? kPackedQ2KQuants : kPackedQ3KQuants;
  const int64_t supers = a.K / kQK_K;
  // The f32 sums and each super-block's int32 ones in memory: the registers hold a sub-block's.
  alignas(32) float acc[G][MR][16] = {};
  for (int64_t s = 0; s < supers; ++s) {
    const int8_t* x[MR];
    const int16_t* bsum[MR];
    for (int m = 0; m < MR; ++m) {
      x[m] = a.xq + (m0 + m) * a.K + s * kQK_K;
      bsum[m] = a.xq_bsum + (m0 + m) * (a.K / 16) + s * 16;
    }
    const uint8_t* section[G];
    alignas(32) int32_t sc[G][16][16];
    alignas(32) int32_t pairs[G][8][16];
    // sum: sum_j sc_j * (w_j . x_j); q2_k's mins: sum_j m_j * (x's sum over j)
    alignas(32) int32_t sum[G][MR][16];
    [[maybe_unused]] alignas(32) int32_t mins[G][MR][T == DType::Q2_K ? 16 : 1];
    for (int g = 0; g < G; ++g) {
      section[g] = group[g] + s * kSection;
      k16_factors_256<B, T>(section[g], sc[g], pairs[g]);
      for (int m = 0; m < MR; ++m) {
        for (int v = 0; v < 2; ++v) {
          __m256i paired = _mm256_setzero_si256();
          for (int p = 0; p < 8; ++p) {
            const __m256i factors = _mm256_load_si256(reinterpret_cast<const __m256i*>(pairs[g][p] + 8 * v));
            paired = _mm256_add_epi32(paired, _mm256_madd_epi16(factors, broadcast4(bsum[m] + 2 * p)));
          }
          if constexpr (T == DType::Q2_K) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(mins[g][m] + 8 * v), paired);
            _mm256_store_si256(reinterpret_cast<__m256i*>(sum[g][m] + 8 * v), _mm256_setzero_si256());
          } else {
            _mm256_store_si256(reinterpret_cast<__m256i*>(sum[g][m] + 8 * v),
                               _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(paired, 2)));
          }
        }
      }
    }
    // Sub-block j = 8n + 2t + h of every group: units c = 4h..4h + 3 of qs row 8n + c, bits 2t and
    // 2t + 1 of each byte (q3_k: the third from bit 4n + t of hmask unit c).
    auto sub_block = [&](auto J) {
      constexpr int kJ = decltype(J)::value, kN = kJ / 8, kT = kJ % 8 / 2, kH = kJ % 2;
      __m256i dot[G][MR][2];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) dot[g][m][0] = dot[g][m][1] = _mm256_setzero_si256();
      }
#pragma GCC unroll 4
      for (int c = 4 * kH; c < 4 * kH + 4; ++c) {
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
          const uint8_t* unit = section[g] + kQuants + (8 * kN + c) * 64;
          if (G > 1 && a.prefetch && kT == 0) {
            _mm_prefetch(reinterpret_cast<const char*>(unit + kDecodePrefetchBytes), _MM_HINT_T0);
          }
#pragma GCC unroll 2
          for (int v = 0; v < 2; ++v) {
            const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + v * 32));
            __m256i values = _mm256_and_si256(shift_epi16<-2 * kT>(qs), _mm256_set1_epi8(3));
            if constexpr (T == DType::Q3_K) {
              // 16-bit shifts of at most 5: the bit stays in its byte
              const __m256i hm =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(section[g] + kPackedQ3KHigh + c * 64 + v * 32));
              values = _mm256_or_si256(values, _mm256_and_si256(shift_epi16<2 - 4 * kN - kT>(hm), _mm256_set1_epi8(4)));
            }
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const __m256i xb = broadcast4(x[m] + 128 * kN + 32 * kT + 4 * c);
              if constexpr (B::kVnni) {
                dot[g][m][v] = B::dot(dot[g][m][v], values, xb);
              } else {
                dot[g][m][v] = _mm256_add_epi16(dot[g][m][v], _mm256_maddubs_epi16(values, xb));
                keep_order(dot[g][m][v]);
              }
            }
          }
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 2
          for (int v = 0; v < 2; ++v) {
            const __m256i factor = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc[g][kJ] + 8 * v));
            add_to_sums(sum[g][m] + 8 * v, _mm256_madd_epi16(dot[g][m][v], factor));
          }
        }
      }
    };
    unroll<0, 16>(sub_block);
    prefetch_next_factors(a, section, kSection, kQuants);
    for (int g = 0; g < G; ++g) {
      for (int v = 0; v < 2; ++v) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section[g] + 16 * v)));
        [[maybe_unused]] __m256 dmin_neg = _mm256_setzero_ps();
        if constexpr (T == DType::Q2_K) {
          const __m256 dmin =
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(section[g] + 32 + 16 * v)));
          dmin_neg = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0f));
        }
        for (int m = 0; m < MR; ++m) {
          const __m256 xs = _mm256_set1_ps(a.xq_scale[(m0 + m) * supers + s]);
          const __m256i total = _mm256_load_si256(reinterpret_cast<const __m256i*>(sum[g][m] + 8 * v));
          float* out = acc[g][m] + 8 * v;
          __m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xs), _mm256_load_ps(out));
          if constexpr (T == DType::Q2_K) {
            const __m256i min_sum = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins[g][m] + 8 * v));
            r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum), _mm256_mul_ps(dmin_neg, xs), r);
          }
          _mm256_store_ps(out, r);
        }
      }
    }
  }
  store_outputs(a, m0, n0, acc);
}

// One row of x (decode): kStreams groups at once from kStreams equal parts of the range, as many
// sequential streams in flight, then the rest one group at a time. Batches: tiles of kTileRows
// rows against each group, the rows' rest in a smaller tile.
// The tile of T (the blocks of 32 and iq4_xs: block_tile; q4_k, q5_k: k4_tile; q6_k: q6_tile; q2_k,
// q3_k: k16_tile).
template <class B, DType T, int MR, int G>
inline void tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    k4_tile<B, T, MR, G>(a, m0, group, n0);
  } else if constexpr (T == DType::Q6_K) {
    q6_tile<B, MR, G>(a, m0, group, n0);
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    k16_tile<B, T, MR, G>(a, m0, group, n0);
  } else {
    block_tile<B, T, MR, G>(a, m0, group, n0);
  }
}

template <class B, DType T>
void packed_blocks(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  auto group_at = [&](int64_t n) { return a.w + static_cast<size_t>(n / kPackedRows) * group_bytes; };
  int64_t n = n_begin;
  if (a.M == 1) {
    constexpr int kStreams = 2;
    const int64_t part = (n_end - n_begin) / kPackedRows / kStreams * kPackedRows;
    for (int64_t i = 0; i < part; i += kPackedRows) {
      const int64_t n0[kStreams] = {n_begin + i, n_begin + part + i};
      const uint8_t* const group[kStreams] = {group_at(n0[0]), group_at(n0[1])};
      tile<B, T, 1, kStreams>(a, 0, group, n0);
    }
    n = n_begin + kStreams * part;
  }
  constexpr int64_t kTileRows = 4;
  for (; n < n_end; n += kPackedRows) {
    const int64_t n0[1] = {n};
    const uint8_t* const group[1] = {group_at(n)};
    int64_t m = 0;
    for (; m + kTileRows <= a.M; m += kTileRows) tile<B, T, kTileRows, 1>(a, m, group, n0);
    switch (a.M - m) {
      case 3:
        tile<B, T, 3, 1>(a, m, group, n0);
        break;
      case 2:
        tile<B, T, 2, 1>(a, m, group, n0);
        break;
      case 1:
        tile<B, T, 1, 1>(a, m, group, n0);
        break;
      default:
        break;
    }
  }
}

// Every packed quantized type's loops on B (the float types are the caller's: false).
template <class B>
bool packed_quantized(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_type) {
    case DType::Q8_0:
      packed_blocks<B, DType::Q8_0>(a, n_begin, n_end);
      return true;
    case DType::Q4_0:
      packed_blocks<B, DType::Q4_0>(a, n_begin, n_end);
      return true;
    case DType::Q4_1:
      packed_blocks<B, DType::Q4_1>(a, n_begin, n_end);
      return true;
    case DType::Q5_0:
      packed_blocks<B, DType::Q5_0>(a, n_begin, n_end);
      return true;
    case DType::Q5_1:
      packed_blocks<B, DType::Q5_1>(a, n_begin, n_end);
      return true;
    case DType::IQ4_NL:
      packed_blocks<B, DType::IQ4_NL>(a, n_begin, n_end);
      return true;
    case DType::IQ4_XS:
      packed_blocks<B, DType::IQ4_XS>(a, n_begin, n_end);
      return true;
    case DType::Q2_K:
      packed_blocks<B, DType::Q2_K>(a, n_begin, n_end);
      return true;
    case DType::Q3_K:
      packed_blocks<B, DType::Q3_K>(a, n_begin, n_end);
      return true;
    case DType::Q4_K:
      packed_blocks<B, DType::Q4_K>(a, n_begin, n_end);
      return true;
    case DType::Q5_K:
      packed_blocks<B, DType::Q5_K>(a, n_begin, n_end);
      return true;
    case DType::Q6_K:
      packed_blocks<B, DType::Q6_K>(a, n_begin, n_end);
      return true;
    default:
      return false;
  }
}

}  // namespace packed_blocks_256
}  // namespace
}  // namespace ferry::kernels::cpu
