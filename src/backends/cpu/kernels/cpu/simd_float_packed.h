// Packed bf16, f16 and f32 weights (packed_weights.h), written once over a level's vector traits P
// and included inside each level's target region (avx512_float_packed.cpp, avx2.cpp), so each gets
// its own copy compiled for its instruction set; nothing here uses a std:: template.
//
// A unit of a group (64 bytes, f32's 128) is two elements of its 16 rows, so it meets two broadcast
// elements of x and sums into the 16 rows' outputs themselves (P::kVectors vectors of them): no
// horizontal sums, and each x broadcast serves every group of the tile.
//   bf16 against x rounded to bf16 (a.xb: AVX-512 BF16 only): one vdpbf16ps a unit (P::dot_bf16).
//   bf16 against x rounded and widened to f32 (a.x: levels without BF16 dot products): two FMAs, on
//     the unit's odd elements (its high halves, masked) then its even ones (shifted up), which are
//     vdpbf16ps's two steps.
//   f16 against x as it is: two FMAs, on the unit's first 32 bytes (element 2u of the 16 rows)
//     then its second (2u + 1), each widened by vcvtph2ps.
//   f32 against x as it is: two FMAs, on the unit's first 64 bytes (element 2u) then its second.
// Every output: acc = 0, then those steps per unit in increasing order, then acc + bias; the same
// operations lane by lane whatever the vector width, tile, split of M, N or K, so every level that
// includes this gives the same bits.
//
// P provides: V, kVectors (vectors per 16 rows), zero(), set1(f), load(const float*), store(float*,
// V), add(a, b), fma(a, b, acc), load_f16(p) (16 / kVectors f16 widened), bf16_odd(p) and
// bf16_even(p) (the 64 / kVectors bytes at p as f32: each 32-bit lane's high half, its low half),
// and for UnitOp::Bf16Dot, Bf16Pairs, load_bf16_pairs(p), broadcast_bf16_pair(int32_t) and
// dot_bf16(acc, x_pairs, w_pairs) (vdpbf16ps).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"

namespace ferry::kernels::cpu {
namespace {
namespace float_packed {

// Units (pairs of K) per pass over a block of weight rows (64 rows x 4096 elements of 2 bytes:
// 512 KiB; f32 half as many units, the same bytes).
constexpr int64_t kSliceUnits = 2048;
// Rows of x per pass over the weights: a block of x that the caches keep while every block of
// weight rows streams past it (a stand-alone copy of these loops held 384 GFLOP/s at 4092 rows
// with it, 330-340 with all the rows at once, AVX-512 on an Intel Xeon).
constexpr int64_t kBlockRows = 192;

// How a tile multiplies a unit (the file's comment).
enum class UnitOp { Bf16Dot, Bf16Fma, F16Fma, F32Fma };

template <UnitOp Op>
constexpr int64_t kUnitBytes = Op == UnitOp::F32Fma ? 128 : 64;
template <UnitOp Op>
constexpr int64_t kOpSliceUnits = kSliceUnits * 64 / kUnitBytes<Op>;

// Vector v of half h (0: the element summed first, 1: the second) of a unit's 16 rows, as f32.
template <class P, UnitOp Op>
typename P::V unit_half(const uint8_t* unit, int h, int v) {
  constexpr int kLanes = 16 / P::kVectors;
  if constexpr (Op == UnitOp::F32Fma) {
    return P::load(reinterpret_cast<const float*>(unit + 64 * h) + v * kLanes);
  } else if constexpr (Op == UnitOp::F16Fma) {
    return P::load_f16(unit + 32 * h + v * 2 * kLanes);
  } else {  // Bf16Fma: the odd elements first
    return h == 0 ? P::bf16_odd(unit + v * 4 * kLanes) : P::bf16_even(unit + v * 4 * kLanes);
  }
}

// y for rows [m0, m0 + MR) and the 16 outputs of each group g (from n0[g]), over units
// [u_begin, u_end) of K: started from 0 at the first unit, else from the partial sums in y; bias
// added after the last unit.
template <class P, UnitOp Op, int MR, int G>
void unit_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G],
               int64_t u_begin, int64_t u_end) {
  using V = typename P::V;
  constexpr int NV = P::kVectors;
  constexpr int kLanes = 16 / NV;
  const bool first = u_begin == 0, last = u_end == a.K / 2;
  // Every loop over acc unrolled whole, or GCC keeps it in memory, storing it at every unit (the
  // FMA loops ran at half the speed).
  V acc[MR][G][NV];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        acc[m][g][v] = first ? P::zero() : P::load(a.y + (m0 + m) * a.y_stride + n0[g] + v * kLanes);
      }
    }
  }
  const uint16_t* xb[MR];
  const float* xf[MR];
  for (int m = 0; m < MR; ++m) {
    if constexpr (Op == UnitOp::Bf16Dot) {
      xb[m] = a.xb + (m0 + m) * a.K;
    } else {
      xf[m] = a.x + (m0 + m) * a.x_stride;
    }
  }
  // The FMA ways: the element of x each half of a unit meets first (bf16: the odd one).
  constexpr int64_t kFirst = Op == UnitOp::Bf16Fma ? 1 : 0;
  for (int64_t u = u_begin; u < u_end; ++u) {
    // One row of x streams every weight once (decode): ahead of the hardware prefetcher, which
    // stops at page ends.
    if (MR == 1 && a.M == 1 && a.prefetch) {
      for (int g = 0; g < G; ++g) {
        for (int64_t line = 0; line < kUnitBytes<Op>; line += 64) {
          const uint8_t* ahead = group[g] + u * kUnitBytes<Op> + line + kDecodePrefetchBytes;
          _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
        }
      }
    }
    if constexpr (Op == UnitOp::Bf16Dot) {
      typename P::Bf16Pairs w[G][NV];
      for (int g = 0; g < G; ++g) {
        for (int v = 0; v < NV; ++v) w[g][v] = P::load_bf16_pairs(group[g] + u * 64 + v * 4 * kLanes);
      }
      for (int m = 0; m < MR; ++m) {
        int32_t pair;
        std::memcpy(&pair, xb[m] + 2 * u, 4);
        const typename P::Bf16Pairs xv = P::broadcast_bf16_pair(pair);
        for (int g = 0; g < G; ++g) {
          for (int v = 0; v < NV; ++v) acc[m][g][v] = P::dot_bf16(acc[m][g][v], xv, w[g][v]);
        }
      }
    } else {
      // With a group in one vector, both halves' weights at once (the tile's registers hold them);
      // in two, one half whole before the next (the order each output sums them in), so that
      // AVX2's 16 registers take 6 rows of x by one group.
      constexpr int kHalves = NV == 1 ? 2 : 1;
#pragma GCC unroll 2
      for (int h0 = 0; h0 < 2; h0 += kHalves) {
        V w[kHalves][G][NV];
#pragma GCC unroll 2
        for (int h = 0; h < kHalves; ++h) {
#pragma GCC unroll 16
          for (int g = 0; g < G; ++g) {
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) w[h][g][v] = unit_half<P, Op>(group[g] + u * kUnitBytes<Op>, h0 + h, v);
          }
        }
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 2
          for (int h = 0; h < kHalves; ++h) {
            const V xv = P::set1(xf[m][2 * u + (h0 + h == 0 ? kFirst : 1 - kFirst)]);
#pragma GCC unroll 16
            for (int g = 0; g < G; ++g) {
#pragma GCC unroll 2
              for (int v = 0; v < NV; ++v) acc[m][g][v] = P::fma(xv, w[h][g][v], acc[m][g][v]);
            }
          }
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        V out = acc[m][g][v];
        if (last && a.bias != nullptr) out = P::add(out, P::load(a.bias + n0[g] + v * kLanes));
        P::store(a.y + (m0 + m) * a.y_stride + n0[g] + v * kLanes, out);
      }
    }
  }
}

// The tile of `rows` (< MR) rows at m: the rest of a block's rows after its whole tiles.
template <class P, UnitOp Op, int MR, int G>
void rest_tile(const MatmulArgs& a, int64_t m, int64_t rows, const uint8_t* const (&group)[G], const int64_t (&n0)[G],
               int64_t u0, int64_t u1) {
  if constexpr (MR > 1) {
    if (rows == MR - 1) return unit_tile<P, Op, MR - 1, G>(a, m, group, n0, u0, u1);
    rest_tile<P, Op, MR - 1, G>(a, m, rows, group, n0, u0, u1);
  }
}

// Rows [m_begin, m_end) of x against G groups from n_first, a slice of K at a time, MR rows at once.
template <class P, UnitOp Op, int MR, int G>
void groups_block(const MatmulArgs& a, int64_t n_first, int64_t m_begin, int64_t m_end) {
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  const uint8_t* group[G];
  int64_t n0[G];
  for (int g = 0; g < G; ++g) {
    n0[g] = n_first + g * kPackedRows;
    group[g] = a.w + static_cast<size_t>(n0[g] / kPackedRows) * group_bytes;
  }
  const int64_t units = a.K / 2;
  constexpr int64_t kSlice = kOpSliceUnits<Op>;
  for (int64_t u0 = 0; u0 < units; u0 += kSlice) {
    const int64_t u1 = units - u0 < kSlice ? units : u0 + kSlice;  // no std:: template in here
    int64_t m = m_begin;
    for (; m + MR <= m_end; m += MR) unit_tile<P, Op, MR, G>(a, m, group, n0, u0, u1);
    rest_tile<P, Op, MR, G>(a, m, m_end - m, group, n0, u0, u1);
  }
}

// The groups of [n, n_end) (fewer than G) after the whole blocks of G.
template <class P, UnitOp Op, int MR, int G>
void rest_block(const MatmulArgs& a, int64_t n, int64_t n_end, int64_t m0, int64_t m1) {
  if constexpr (G > 1) {
    if ((n_end - n) / kPackedRows == G - 1) return groups_block<P, Op, MR, G - 1>(a, n, m0, m1);
    rest_block<P, Op, MR, G - 1>(a, n, n_end, m0, m1);
  }
}

// One row of x (decode) is bound by memory: kStreams groups at once from kStreams equal parts of
// the range, whole K, so as many sequential streams are in flight. More rows: kBlockRows of x at a
// time against blocks of G groups (then fewer), 16 G outputs per broadcast of x.
template <class P, UnitOp Op, int MR, int G>
void packed_units(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  if (a.M == 1) {
    constexpr int kStreams = 4;
    const size_t group_bytes = a.w_row_bytes * kPackedRows;
    const int64_t part = (n_end - n_begin) / kPackedRows / kStreams * kPackedRows;
    for (int64_t i = 0; i < part; i += kPackedRows) {
      int64_t n0[kStreams];
      const uint8_t* group[kStreams];
      for (int s = 0; s < kStreams; ++s) {
        n0[s] = n_begin + s * part + i;
        group[s] = a.w + static_cast<size_t>(n0[s] / kPackedRows) * group_bytes;
      }
      unit_tile<P, Op, 1, kStreams>(a, 0, group, n0, 0, a.K / 2);
    }
    n = n_begin + kStreams * part;
  }
  const int64_t n_rest = n;
  for (int64_t m0 = 0; m0 < a.M; m0 += kBlockRows) {
    const int64_t m1 = a.M - m0 < kBlockRows ? a.M : m0 + kBlockRows;  // no std:: template in here
    for (n = n_rest; n + G * kPackedRows <= n_end; n += G * kPackedRows) groups_block<P, Op, MR, G>(a, n, m0, m1);
    rest_block<P, Op, MR, G>(a, n, n_end, m0, m1);
  }
}

}  // namespace float_packed
}  // namespace
}  // namespace ferry::kernels::cpu
