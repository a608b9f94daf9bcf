// Packed bf16, f16 and f32 weights (avx512_float_packed.h). A unit of a group (64 bytes, f32's 128)
// is two elements of its 16 rows, so it meets two broadcast elements of x and sums into the 16
// rows' outputs themselves: no horizontal sums, and each x broadcast serves every group of the tile.
//   bf16 against x rounded to bf16 (a.xb): one vdpbf16ps a unit.
//   bf16 against x rounded and widened to f32 (a.x: levels without BF16 dot products): two FMAs, on
//     the unit's odd elements (its high halves, masked) then its even ones (shifted up), which are
//     vdpbf16ps's two steps.
//   f16 against x as it is: two FMAs, on the unit's first 32 bytes (element 2u of the 16 rows)
//     then its second (2u + 1), each widened by vcvtph2ps.
//   f32 against x as it is: two FMAs, on the unit's first 64 bytes (element 2u) then its second.
// Batches take tiles of a few rows of x by a few groups (vdpbf16ps 6 x 4, bf16 by FMA 8 x 2, f16 10 x
// 2: 16-24 accumulators; on an Intel Xeon bf16 by FMA in 6 x 3 and 4 x 4 ran 0.72 of the FMA peak
// where 8 x 2 ran 0.77, and f16 0.63 in 8 x 2, 0.71 in 10 x 2: more rows of x per conversion, f16's
// vcvtph2ps taking two vector ports' slots), the weight rows' slice of K (kSliceUnits units, 512 KiB
// for 4 groups) staying in L2 while a block of kBlockRows rows of x passes.
#include "backends/cpu/kernels/cpu/avx512_float_packed.h"

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")
#endif

namespace ferry::kernels::cpu {
namespace {

// Units (pairs of K) per pass over a block of weight rows (64 rows x 4096 elements of 2 bytes:
// 512 KiB; f32 half as many units, the same bytes).
constexpr int64_t kSliceUnits = 2048;
// Rows of x per pass over the weights: a block of x that the caches keep while every block of
// weight rows streams past it (a stand-alone copy of these loops held 384 GFLOP/s at 4092 rows
// with it, 330-340 with all the rows at once).
constexpr int64_t kBlockRows = 192;

// How a tile multiplies a unit (the file's comment).
enum class UnitOp { Bf16Dot, Bf16Fma, F16Fma, F32Fma };

template <UnitOp Op>
constexpr int64_t kUnitBytes = Op == UnitOp::F32Fma ? 128 : 64;
template <UnitOp Op>
constexpr int64_t kOpSliceUnits = kSliceUnits * 64 / kUnitBytes<Op>;

// y for rows [m0, m0 + MR) and the 16 outputs of each group g (from n0[g]), over units
// [u_begin, u_end) of K: started from 0 at the first unit, else from the partial sums in y; bias
// added after the last unit.
template <UnitOp Op, int MR, int G>
void unit_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G],
               int64_t u_begin, int64_t u_end) {
  const bool first = u_begin == 0, last = u_end == a.K / 2;
  // Every loop over acc unrolled whole, or GCC keeps it in memory, storing it at every unit (the
  // FMA loops ran at half the speed).
  __m512 acc[MR][G];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      acc[m][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(a.y + (m0 + m) * a.y_stride + n0[g]);
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
      __m512i w[G];
      for (int g = 0; g < G; ++g) w[g] = _mm512_loadu_si512(group[g] + u * 64);
      for (int m = 0; m < MR; ++m) {
        int32_t pair;
        std::memcpy(&pair, xb[m] + 2 * u, 4);
        const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
        for (int g = 0; g < G; ++g) acc[m][g] = _mm512_dpbf16_ps(acc[m][g], xv, reinterpret_cast<__m512bh>(w[g]));
      }
    } else {
      // The unit's two elements of the 16 rows as f32, in the order they are summed.
      __m512 w_first[G], w_second[G];
      for (int g = 0; g < G; ++g) {
        const uint8_t* unit = group[g] + u * kUnitBytes<Op>;
        if constexpr (Op == UnitOp::F32Fma) {
          w_first[g] = _mm512_loadu_ps(unit);
          w_second[g] = _mm512_loadu_ps(unit + 64);
        } else if constexpr (Op == UnitOp::Bf16Fma) {
          const __m512i w = _mm512_loadu_si512(unit);
          const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
          w_first[g] = _mm512_castsi512_ps(_mm512_and_si512(w, high_halves));
          w_second[g] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        } else {
          w_first[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
          w_second[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 32)));
        }
      }
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512 x_first = _mm512_set1_ps(xf[m][2 * u + kFirst]);
        const __m512 x_second = _mm512_set1_ps(xf[m][2 * u + 1 - kFirst]);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          acc[m][g] = _mm512_fmadd_ps(x_first, w_first[g], acc[m][g]);
          acc[m][g] = _mm512_fmadd_ps(x_second, w_second[g], acc[m][g]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      __m512 out = acc[m][g];
      if (last && a.bias != nullptr) out = _mm512_add_ps(out, _mm512_loadu_ps(a.bias + n0[g]));
      _mm512_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g], out);
    }
  }
}

// The tile of `rows` (< MR) rows at m: the rest of a block's rows after its whole tiles.
template <UnitOp Op, int MR, int G>
void rest_tile(const MatmulArgs& a, int64_t m, int64_t rows, const uint8_t* const (&group)[G], const int64_t (&n0)[G],
               int64_t u0, int64_t u1) {
  if constexpr (MR > 1) {
    if (rows == MR - 1) return unit_tile<Op, MR - 1, G>(a, m, group, n0, u0, u1);
    rest_tile<Op, MR - 1, G>(a, m, rows, group, n0, u0, u1);
  }
}

// Rows [m_begin, m_end) of x against G groups from n_first, a slice of K at a time, MR rows at once.
template <UnitOp Op, int MR, int G>
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
    for (; m + MR <= m_end; m += MR) unit_tile<Op, MR, G>(a, m, group, n0, u0, u1);
    rest_tile<Op, MR, G>(a, m, m_end - m, group, n0, u0, u1);
  }
}

// The groups of [n, n_end) (fewer than G) after the whole blocks of G.
template <UnitOp Op, int MR, int G>
void rest_block(const MatmulArgs& a, int64_t n, int64_t n_end, int64_t m0, int64_t m1) {
  if constexpr (G > 1) {
    if ((n_end - n) / kPackedRows == G - 1) return groups_block<Op, MR, G - 1>(a, n, m0, m1);
    rest_block<Op, MR, G - 1>(a, n, n_end, m0, m1);
  }
}

// One row of x (decode) is bound by memory: kStreams groups at once from kStreams equal parts of
// the range, whole K, so as many sequential streams are in flight. More rows: kBlockRows of x at a
// time against blocks of G groups (then fewer), 16 G outputs per broadcast of x.
template <UnitOp Op, int MR, int G>
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
      unit_tile<Op, 1, kStreams>(a, 0, group, n0, 0, a.K / 2);
    }
    n = n_begin + kStreams * part;
  }
  const int64_t n_rest = n;
  for (int64_t m0 = 0; m0 < a.M; m0 += kBlockRows) {
    const int64_t m1 = a.M - m0 < kBlockRows ? a.M : m0 + kBlockRows;  // no std:: template in here
    for (n = n_rest; n + G * kPackedRows <= n_end; n += G * kPackedRows) groups_block<Op, MR, G>(a, n, m0, m1);
    rest_block<Op, MR, G>(a, n, n_end, m0, m1);
  }
}

}  // namespace

void matmul_packed_float(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.w_type == DType::F32) return packed_units<UnitOp::F32Fma, 8, 2>(a, n_begin, n_end);
  if (a.w_type == DType::F16) return packed_units<UnitOp::F16Fma, 10, 2>(a, n_begin, n_end);
  if (a.xb != nullptr) return packed_units<UnitOp::Bf16Dot, 6, 4>(a, n_begin, n_end);
  packed_units<UnitOp::Bf16Fma, 8, 2>(a, n_begin, n_end);
}

}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang
