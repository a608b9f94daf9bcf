// Batches against the packed k-quants at the AVX-512 VNNI levels, from per-batch panels of their
// quants unpacked. The packed loops (avx512_dot.cpp) unpack each unit's values per tile of rows and
// scale each sub-block's dot product on its own: with sub-blocks of 16, a vpdpwssd (q2_k, q3_k) or
// a vpmulld (q6_k) per 4 vpdpbusd; they ran at 0.22-0.34 of vpdpbusd's peak at 512 rows (q4_k
// 0.40-0.45, q5_k 0.33-0.35). Here each slice of super-blocks of two groups is rewritten once per
// batch into a panel, unit u holding elements 4u..4u+3 of the 16 rows as vpdpbusd's unsigned bytes:
//   q2_k: sc_j * q (0..45) and q3_k: (sc_j - 32) * (q - 4) + 124 (0..252), exact (q3_k's chains
//         started from -124 * x's super-block sum): a super-block's exact sum_j scale_j * (w_j . x_j)
//         from one chain of 64 vpdpbusd, nothing per sub-block;
//   q4_k, q5_k, q6_k: q (0..15, 0..31, 0..63), their scales (int32) beside them (q4_k / q5_k's min
//         pairs, d and -dmin too): each sub-block's dot product (of 32; q6_k's of 16, its chain
//         started from -32 * x's sub-block sum) times its scale by vpmulld into the super-block's
//         sum (sc * q would need 11 or 13 bits). Zen 5 issues vpmulld as one vpdpbusd; q6_k's
//         sc * (q - 32) as int16 against x widened, a vpdpwssd per 32 products where this takes
//         1.25 instructions per 64, ran at 0.31-0.35 of the peak there.
// Then the packed loops' f32 steps per super-block: the same integers and the same steps, so the
// same bits. x is copied per slice into tiles of 8 rows, [unit][row][4 bytes], so a tile's
// broadcasts of a unit read 32 adjacent bytes (x's rows are K apart: 8 of them share one L1 set).
#include "backends/cpu/kernels/cpu/avx512_folded.h"

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/folded_panels.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#endif

#include "backends/cpu/kernels/cpu/avx512_k_units.h"
#include "backends/cpu/kernels/cpu/packed_q4_k.h"
#include "backends/cpu/kernels/cpu/unroll.h"
#include "backends/cpu/kernels/cpu/x_units.h"

namespace ferry::kernels::cpu {
namespace {

struct Avx512Folded {};  // packed_q4_k.h's instantiation tag in this file

constexpr int kTileRows = 8;  // rows of x per tile: with two groups, 16 chains

template <DType T>
using Folded = folded::Layout<T, kTileRows, folded::Q6Form::Bytes>;

// One q2_k or q3_k section's folded super-block (Folded<T>::kSuper bytes at out): unit u holds
// elements 4u..4u+3 of the 16 rows, 4 bytes a row, as vpdpbusd's unsigned bytes.
template <DType T>
void fold_k16_section(const uint8_t* section, uint8_t* out) {
  using F = Folded<T>;
  [[maybe_unused]] alignas(64) int8_t q3_k_scale[T == DType::Q3_K ? 16 * kPackedRows : 1];
  if constexpr (T == DType::Q3_K) q3_k_scales(section, q3_k_scale);
  // Per 128-bit lane i of 4 rows: bytes [4i, -, 4i, -] (even), [-, 4i, -, 4i] (odd), [4i x 4] (every).
  const __m512i to_even = _mm512_set4_epi32(static_cast<int32_t>(0x800C800Cu), static_cast<int32_t>(0x80088008u),
                                            static_cast<int32_t>(0x80048004u), static_cast<int32_t>(0x80008000u));
  const __m512i to_odd = _mm512_set4_epi32(0x0C800C80, 0x08800880, 0x04800480, 0x00800080);
  [[maybe_unused]] const __m512i to_every = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
  auto sub_block = [&](auto J) {  // j = 8n + 2t + h: units 32n + 8t + 4h..+3
    constexpr int kJ = decltype(J)::value, kN = kJ / 8, kT = kJ % 8 / 2, kH = kJ % 2;
    __m512i scale;  // row r's scale of sub-block j in lane r's byte 0
    if constexpr (T == DType::Q2_K) {
      const __m128i plane = _mm_loadu_si128(reinterpret_cast<const __m128i*>(section + kPackedQ2KScales + 16 * kJ));
      scale = _mm512_and_si512(_mm512_cvtepu8_epi32(plane), _mm512_set1_epi32(0x0F));
    } else {
      scale = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q3_k_scale + 16 * kJ)));
    }
    const __m512i scale_even = _mm512_shuffle_epi8(scale, to_even);
    const __m512i scale_odd = _mm512_shuffle_epi8(scale, to_odd);
    [[maybe_unused]] __m512i offset;  // q3_k: 124 - 4 * scale, in every byte of the lane
    if constexpr (T == DType::Q3_K) {
      offset = _mm512_shuffle_epi8(_mm512_sub_epi32(_mm512_set1_epi32(124), _mm512_slli_epi32(scale, 2)), to_every);
    }
    for (int c = 4 * kH; c < 4 * kH + 4; ++c) {
      const __m512i v = K16Unit<T>(section, kN, c, false).template values<kN, kT>();
      // scale * v of the even and odd bytes as int16 (|.| <= 224, one product each: no
      // saturation), their low bytes put back in place, then (q3_k) the offset added to each
      // byte: w' is in 0..252, so its byte is exact.
      const __m512i even = _mm512_maddubs_epi16(v, scale_even);
      const __m512i odd = _mm512_maddubs_epi16(v, scale_odd);
      __m512i folded =
          _mm512_ternarylogic_epi32(even, _mm512_slli_epi16(odd, 8), _mm512_set1_epi16(0x00FF), 0xEC);  // (e & m) | o
      if constexpr (T == DType::Q3_K) folded = _mm512_add_epi8(folded, offset);
      _mm512_store_si512(out + (32 * kN + 8 * kT + c) * 64, folded);
    }
  };
  unroll<0, 16>(sub_block);
  using S = Avx512Folded;
  if constexpr (T == DType::Q2_K) {
    for (int p = 0; p < 8; ++p) _mm512_store_si512(out + F::kMinPairs + 64 * p, q2_k_min_pair(section, p));
    _mm512_store_ps(out + F::kD + 64, packed_q4_k::dmin_neg<S>(section));
  }
  _mm512_store_ps(out + F::kD, packed_q4_k::d<S>(section));
}

// One q6_k section's folded super-block: unit u holds elements 4u..4u+3 of the 16 rows as
// unsigned bytes (q, 0..63), so sub-block j (of 16) is units 4j..4j + 3; its scales (int32) and d
// beside them.
void fold_q6_k_section(const uint8_t* section, uint8_t* out) {
  using F = Folded<DType::Q6_K>;
#pragma GCC unroll 1
  for (int q = 0; q < 4; ++q) {  // quad q = 2n + h
    const int n = q / 2, h = q % 2;
    const uint8_t* quad = section + kPackedQ6KQuants + q * kPackedQ6KQuad;
    auto sub_block = [&](auto T) {  // elements 128n + 32t + 4c.., c = 4h + i: sub-block 8n + 2t + h
      constexpr int kT = decltype(T)::value;
      const int j = 8 * n + 2 * kT + h;
      const __m128i plane =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(section + kPackedQ6KScales + 64 * q + 16 * kT));
      _mm512_store_si512(out + F::kScales + 64 * j, _mm512_cvtepi8_epi32(plane));
      for (int i = 0; i < 4; ++i) _mm512_store_si512(out + (4 * j + i) * 64, q6_k_values<kT>(quad + 192 * i));
    };
    unroll<0, 4>(sub_block);
  }
  _mm512_store_ps(out + F::kD, packed_q4_k::d<Avx512Folded>(section));
}

// One q4_k or q5_k section's super-block: unit u holds elements 4u..4u+3 of the 16 rows as
// unsigned bytes (q, 0..15 or 0..31), the scales, min pairs, d and -dmin beside them.
template <DType T>
void fold_k4_section(const uint8_t* section, uint8_t* out) {
  using F = Folded<T>;
  auto sub_block = [&](auto J) {
    constexpr int kJ = decltype(J)::value;
    for (int c = 0; c < 8; ++c) {
      __m512i v = k4_values<T, kJ>(section, c);
      if constexpr (T == DType::Q4_K && kJ % 2 == 1) v = _mm512_srli_epi16(v, 4);  // q4_k's high nibbles down
      _mm512_store_si512(out + (8 * kJ + c) * 64, v);
    }
  };
  unroll<0, 8>(sub_block);
  k4_factors(section, reinterpret_cast<int32_t*>(out + F::kScales));
  _mm512_store_ps(out + F::kD, packed_q4_k::d<Avx512Folded>(section));
  _mm512_store_ps(out + F::kD + 64, packed_q4_k::dmin_neg<Avx512Folded>(section));
}

template <DType T>
void fold_section(const uint8_t* section, uint8_t* out) {
  if constexpr (Folded<T>::kK4) {
    fold_k4_section<T>(section, out);
  } else if constexpr (Folded<T>::kQ6Bytes) {
    fold_q6_k_section(section, out);
  } else {
    fold_k16_section<T>(section, out);
  }
}

// x's rows 8t..8t + 7 for super-blocks s0..s0 + count - 1 into tile t of `out` ([tile][slice][
// Folded<T>::kXSuper]); rows past M zero, so they add nothing (their outputs are not stored).
template <DType T>
void pack_x_slice(const MatmulArgs& a, int64_t s0, int64_t count, uint8_t* out) {
  using F = Folded<T>;
  const int64_t tiles = (a.M + kTileRows - 1) / kTileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t m0 = t * kTileRows;
    const int64_t rows = a.M - m0 < kTileRows ? a.M - m0 : kTileRows;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t s = s0 + i;
      uint8_t* o = out + (t * F::kSlice + i) * F::kXSuper;
      const int8_t* x = a.xq + m0 * a.K + s * kQK_K;
      for (int u0 = 0; u0 < kQK_K / 4; u0 += 8) {
        __m256i units[8];  // 4 elements of the 8 rows each
        x_units_8x8(x + 4 * u0, a.K, rows, units);
        for (int k = 0; k < 8; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(o + (u0 + k) * 32), units[k]);
      }
      folded::x_factors<T, folded::Q6Form::Bytes>(a, m0, kTileRows, s, reinterpret_cast<float*>(o + F::kXScales),
                                                  reinterpret_cast<int32_t*>(o + F::kXStarts),
                                                  reinterpret_cast<int32_t*>(o + F::kXPairs));
    }
  }
}

// A tile's accumulators for row m0 + r's outputs n0..n0 + 15 at the start of a slice: y's partial
// sums, or zero in the first slice and in rows past M. And y's 16 outputs from them at its end (the
// last slice's with the bias).
inline __m512 start_acc(const MatmulArgs& a, int64_t m0, int r, int64_t rows, int64_t n0, const folded::Slice& slice) {
  return r < rows && !slice.first ? _mm512_loadu_ps(a.y + (m0 + r) * a.y_stride + n0) : _mm512_setzero_ps();
}
inline void store_acc(const MatmulArgs& a, int64_t m, int64_t n0, const folded::Slice& slice, const float* acc) {
  __m512 y = _mm512_load_ps(acc);
  if (slice.last && a.bias != nullptr) y = _mm512_add_ps(y, _mm512_loadu_ps(a.bias + n0));
  _mm512_storeu_ps(a.y + m * a.y_stride + n0, y);
}

// A super-block's exact int32 sum times d (16 rows) and x's q8_K scale, added to acc: the packed
// loops' one f32 step for q3_k and q6_k.
inline __m512 q8_k_step(__m512 acc, __m512i sum, __m512 d, float x_scale) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, _mm512_set1_ps(x_scale)), acc);
}

// Tile x_tile (its rows from m0) against G groups' panels (the slice's super-blocks): per
// super-block one chain per row and group, then the packed loops' f32 steps, into accumulators
// started and stored by start_acc and store_acc (rows past M not stored).
template <DType T, int G>
void folded_tile(const MatmulArgs& a, int64_t m0, const int64_t (&n0)[G], const uint8_t* const (&panel)[G],
                 const uint8_t* x_tile, const folded::Slice& slice) {
  using F = Folded<T>;
  const int64_t rows = a.M - m0 < kTileRows ? a.M - m0 : kTileRows;
  alignas(64) float acc[G][kTileRows][16];
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(acc[g][r], start_acc(a, m0, r, rows, n0[g], slice));
  }
  for (int64_t i = 0; i < slice.count; ++i) {
    const uint8_t* x = x_tile + i * F::kXSuper;
    const uint8_t* w[G];
    for (int g = 0; g < G; ++g) w[g] = panel[g] + i * F::kSuper;
    __m512i sum[G][kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      const __m512i start = T == DType::Q3_K ? broadcast4(reinterpret_cast<const int8_t*>(x + F::kXStarts + 4 * r))
                                             : _mm512_setzero_si512();
      for (int g = 0; g < G; ++g) sum[g][r] = start;
    }
    // 16 units per pass, written out: a loop over single units made GCC copy every chain between
    // registers each pass.
#pragma GCC unroll 1
    for (int u0 = 0; u0 < F::kUnits; u0 += 16) {
      auto unit = [&](auto U) {
        const int u = u0 + decltype(U)::value;
        __m512i wu[G];
        for (int g = 0; g < G; ++g) wu[g] = _mm512_load_si512(w[g] + 64 * u);
        for (int r = 0; r < kTileRows; ++r) {
          // One broadcast for both groups (from the instruction's memory operand each, loading x
          // twice: q3_k 0.67 of the peak against 0.73-0.77, q2_k half as fast).
          const __m512i xv = broadcast4(reinterpret_cast<const int8_t*>(x + (u * kTileRows + r) * 4));
          for (int g = 0; g < G; ++g) {
            sum[g][r] = _mm512_dpbusd_epi32(sum[g][r], wu[g], xv);
          }
        }
      };
      unroll<0, 16>(unit);
    }
    for (int g = 0; g < G; ++g) {
      const __m512 d = _mm512_load_ps(w[g] + F::kD);
      for (int r = 0; r < kTileRows; ++r) {
        float x_scale;
        std::memcpy(&x_scale, x + F::kXScales + 4 * r, 4);
        if constexpr (T == DType::Q2_K) {
          __m512i mins = _mm512_setzero_si512();
          for (int p = 0; p < 8; ++p) {
            const __m512i pair = broadcast4(reinterpret_cast<const int8_t*>(x + F::kXPairs + (p * kTileRows + r) * 4));
            mins = _mm512_dpwssd_epi32(mins, _mm512_load_si512(w[g] + F::kMinPairs + 64 * p), pair);
          }
          const __m512 dmin_neg = _mm512_load_ps(w[g] + F::kD + 64);
          _mm512_store_ps(acc[g][r], packed_q4_k::add_super_block<Avx512Folded>(_mm512_load_ps(acc[g][r]), sum[g][r],
                                                                                mins, d, dmin_neg, x_scale));
        } else {
          _mm512_store_ps(acc[g][r], q8_k_step(_mm512_load_ps(acc[g][r]), sum[g][r], d, x_scale));
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < rows; ++r) store_acc(a, m0 + r, n0[g], slice, acc[g][r]);
  }
}

// The q4_k / q5_k / q6_k tile: per group, per super-block and sub-block (8 of 32, or 16 of 16),
// each row's dot product by a chain of vpdpbusd (q6_k's started from x's -32 * the sub-block's sum),
// times its scale sc_j (vpmulld) into the super-block's exact int32 sum; then q4_k / q5_k's mins by
// vpdpwssd and add_super_block's two f32 steps, as packed_k4_batch, or q6_k's one step.
template <DType T, int G>
void folded_scaled_tile(const MatmulArgs& a, int64_t m0, const int64_t (&n0)[G], const uint8_t* const (&panel)[G],
                        const uint8_t* x_tile, const folded::Slice& slice) {
  using F = Folded<T>;
  constexpr int kSubUnits = F::kUnits / F::kSubBlocks;
  const int64_t rows = a.M - m0 < kTileRows ? a.M - m0 : kTileRows;
  for (int g = 0; g < G; ++g) {
    alignas(64) float acc[kTileRows][16];
    for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(acc[r], start_acc(a, m0, r, rows, n0[g], slice));
    for (int64_t i = 0; i < slice.count; ++i) {
      const uint8_t* x = x_tile + i * F::kXSuper;
      const uint8_t* w = panel[g] + i * F::kSuper;
      __m512i sum[kTileRows];
      for (int r = 0; r < kTileRows; ++r) sum[r] = _mm512_setzero_si512();
#pragma GCC unroll 1
      for (int j = 0; j < F::kSubBlocks; ++j) {
        __m512i dot[kTileRows];
        for (int r = 0; r < kTileRows; ++r) {
          dot[r] = F::kQ6Bytes ? broadcast4(reinterpret_cast<const int8_t*>(x + F::kXStarts + (j * kTileRows + r) * 4))
                               : _mm512_setzero_si512();
        }
        auto unit = [&](auto C) {
          const int u = kSubUnits * j + decltype(C)::value;
          const __m512i wu = _mm512_load_si512(w + 64 * u);
          for (int r = 0; r < kTileRows; ++r) {
            dot[r] = dpbusd_broadcast(dot[r], wu, x + (u * kTileRows + r) * 4);
          }
        };
        unroll<0, kSubUnits>(unit);
        const __m512i sc = _mm512_load_si512(w + F::kScales + 64 * j);
        for (int r = 0; r < kTileRows; ++r) sum[r] = _mm512_add_epi32(sum[r], _mm512_mullo_epi32(dot[r], sc));
      }
      const __m512 d = _mm512_load_ps(w + F::kD);
      for (int r = 0; r < kTileRows; ++r) {
        float x_scale;
        std::memcpy(&x_scale, x + F::kXScales + 4 * r, 4);
        if constexpr (F::kK4) {
          __m512i mins = _mm512_setzero_si512();
          for (int p = 0; p < 4; ++p) {
            const __m512i pair = broadcast4(reinterpret_cast<const int8_t*>(x + F::kXPairs + (p * kTileRows + r) * 4));
            mins = _mm512_dpwssd_epi32(mins, _mm512_load_si512(w + F::kMinPairs + 64 * p), pair);
          }
          const __m512 dmin_neg = _mm512_load_ps(w + F::kD + 64);
          _mm512_store_ps(acc[r], packed_q4_k::add_super_block<Avx512Folded>(_mm512_load_ps(acc[r]), sum[r], mins, d,
                                                                             dmin_neg, x_scale));
        } else {
          _mm512_store_ps(acc[r], q8_k_step(_mm512_load_ps(acc[r]), sum[r], d, x_scale));
        }
      }
    }
    for (int r = 0; r < rows; ++r) store_acc(a, m0 + r, n0[g], slice, acc[r]);
  }
}

// G groups (from n0[0], n0[1]...) for one slice: their sections folded into `panels`, then every
// tile of x's slice against them.
template <DType T, int G>
void folded_groups(const MatmulArgs& a, const int64_t (&n0)[G], const folded::Slice& slice, uint8_t* panels,
                   const uint8_t* x_slice) {
  using F = Folded<T>;
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  const uint8_t* panel[G];
  for (int g = 0; g < G; ++g) {
    const uint8_t* group = a.w + static_cast<size_t>(n0[g] / kPackedRows) * group_bytes;
    uint8_t* out = panels + g * F::kSlice * F::kSuper;
    for (int64_t i = 0; i < slice.count; ++i) {
      fold_section<T>(group + (slice.s0 + i) * F::kSection, out + i * F::kSuper);
    }
    panel[g] = out;
  }
  const int64_t tiles = (a.M + kTileRows - 1) / kTileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    const uint8_t* x_tile = x_slice + t * F::kSlice * F::kXSuper;
    if constexpr (F::kSubBlocks > 0) {
      folded_scaled_tile<T, G>(a, t * kTileRows, n0, panel, x_tile, slice);
    } else {
      folded_tile<T, G>(a, t * kTileRows, n0, panel, x_tile, slice);
    }
  }
}

// Per slice of super-blocks x's tiles copied and every pair of groups (then a last group) folded
// and multiplied, y holding the sums between slices: each output's super-blocks in increasing
// order, then the bias. Each thread copies x's slice for itself (the threads split N).
template <DType T>
void folded_matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  using F = Folded<T>;
  if (n_begin >= n_end) return;
  const int64_t supers = a.K / kQK_K, tiles = (a.M + kTileRows - 1) / kTileRows;
  const auto panel_bytes = static_cast<size_t>(2 * F::kSlice * F::kSuper);
  uint8_t* panels = folded::aligned_scratch(panel_bytes + static_cast<size_t>(tiles * F::kSlice * F::kXSuper));
  uint8_t* x_slice = panels + panel_bytes;
  for (int64_t s0 = 0; s0 < supers; s0 += F::kSlice) {
    const folded::Slice slice{s0, supers - s0 < F::kSlice ? supers - s0 : F::kSlice, s0 == 0, s0 + F::kSlice >= supers};
    pack_x_slice<T>(a, s0, slice.count, x_slice);
    int64_t n = n_begin;
    for (; n + 2 * kPackedRows <= n_end; n += 2 * kPackedRows) {
      const int64_t n0[2] = {n, n + kPackedRows};
      folded_groups<T, 2>(a, n0, slice, panels, x_slice);
    }
    if (n < n_end) {
      const int64_t n0[1] = {n};
      folded_groups<T, 1>(a, n0, slice, panels, x_slice);
    }
  }
}

}  // namespace

void matmul_folded(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.w_type == DType::Q2_K) return folded_matmul<DType::Q2_K>(a, n_begin, n_end);
  if (a.w_type == DType::Q3_K) return folded_matmul<DType::Q3_K>(a, n_begin, n_end);
  if (a.w_type == DType::Q4_K) return folded_matmul<DType::Q4_K>(a, n_begin, n_end);
  if (a.w_type == DType::Q5_K) return folded_matmul<DType::Q5_K>(a, n_begin, n_end);
  folded_matmul<DType::Q6_K>(a, n_begin, n_end);
}

}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang
