// Packed bf16 weights (avx512_bf16_packed.h). A 64-byte unit of a group is one pair of elements of
// its 16 rows, so it meets a broadcast pair of x and sums into the 16 rows' outputs themselves: no
// horizontal sums, and each x broadcast serves every group of the tile. Against x rounded to bf16
// (a.xb) one vdpbf16ps does a unit; against x rounded and widened to f32 (a.x: levels without BF16
// dot products) two FMAs do, on the unit's odd elements (its high halves, masked) then its even
// ones (shifted up), which are vdpbf16ps's two steps. Batches take tiles of a few rows of x by a few
// groups (vdpbf16ps 6 x 4, FMA 8 x 2: 24 and 16 accumulators; FMA 6 x 3 and 4 x 4 ran 0.72 of the
// FMA peak on an Intel Xeon where 8 x 2 ran 0.77, its x broadcasts serving fewer conversions), the
// weight rows' slice of K (kSliceUnits pairs, 512 KiB for 4 groups) staying in L2 while a block of
// kBlockRows rows of x passes.
#include "backends/cpu/kernels/cpu/avx512_bf16_packed.h"

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

// Pairs of K per pass over a block of weight rows (64 rows x 4096 elements of bf16: 512 KiB).
constexpr int64_t kSliceUnits = 2048;
// Rows of x per pass over the weights: a block of x that the caches keep while every block of
// weight rows streams past it (a stand-alone copy of these loops held 384 GFLOP/s at 4092 rows
// with it, 330-340 with all the rows at once).
constexpr int64_t kBlockRows = 192;

// y for rows [m0, m0 + MR) and the 16 outputs of each group g (from n0[g]), over pairs
// [u_begin, u_end) of K: started from 0 at the first pair, else from the partial sums in y; bias
// added after the last pair. kFma: x as f32 (a.x) by FMAs, else x as bf16 (a.xb) by vdpbf16ps.
template <bool kFma, int MR, int G>
void bf16_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G],
               int64_t u_begin, int64_t u_end) {
  const bool first = u_begin == 0, last = u_end == a.K / 2;
  // Every loop over acc unrolled whole, or GCC keeps it in memory, storing it at every pair (the
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
    if constexpr (kFma) {
      xf[m] = a.x + (m0 + m) * a.x_stride;
    } else {
      xb[m] = a.xb + (m0 + m) * a.K;
    }
  }
  const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t u = u_begin; u < u_end; ++u) {
    __m512i w[G];
    for (int g = 0; g < G; ++g) {
      // One row of x streams every weight once (decode): ahead of the hardware prefetcher, which
      // stops at page ends.
      if (MR == 1 && a.M == 1 && a.prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(group[g] + u * 64 + kDecodePrefetchBytes), _MM_HINT_T0);
      w[g] = _mm512_loadu_si512(group[g] + u * 64);
    }
    if constexpr (kFma) {
      // The unit's elements 2u + 1 (high halves) and 2u (low halves) of the 16 rows, as f32.
      __m512 odd[G], even[G];
      for (int g = 0; g < G; ++g) {
        odd[g] = _mm512_castsi512_ps(_mm512_and_si512(w[g], high_halves));
        even[g] = _mm512_castsi512_ps(_mm512_slli_epi32(w[g], 16));
      }
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512 x_odd = _mm512_set1_ps(xf[m][2 * u + 1]), x_even = _mm512_set1_ps(xf[m][2 * u]);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          acc[m][g] = _mm512_fmadd_ps(x_odd, odd[g], acc[m][g]);
          acc[m][g] = _mm512_fmadd_ps(x_even, even[g], acc[m][g]);
        }
      }
    } else {
      for (int m = 0; m < MR; ++m) {
        int32_t pair;
        std::memcpy(&pair, xb[m] + 2 * u, 4);
        const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
        for (int g = 0; g < G; ++g) acc[m][g] = _mm512_dpbf16_ps(acc[m][g], xv, reinterpret_cast<__m512bh>(w[g]));
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
template <bool kFma, int MR, int G>
void bf16_rest_tile(const MatmulArgs& a, int64_t m, int64_t rows, const uint8_t* const (&group)[G],
                    const int64_t (&n0)[G], int64_t u0, int64_t u1) {
  if constexpr (MR > 1) {
    if (rows == MR - 1) return bf16_tile<kFma, MR - 1, G>(a, m, group, n0, u0, u1);
    bf16_rest_tile<kFma, MR - 1, G>(a, m, rows, group, n0, u0, u1);
  }
}

// Rows [m_begin, m_end) of x against G groups from n_first, a slice of K at a time, MR rows at once.
template <bool kFma, int MR, int G>
void bf16_block(const MatmulArgs& a, int64_t n_first, int64_t m_begin, int64_t m_end) {
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  const uint8_t* group[G];
  int64_t n0[G];
  for (int g = 0; g < G; ++g) {
    n0[g] = n_first + g * kPackedRows;
    group[g] = a.w + static_cast<size_t>(n0[g] / kPackedRows) * group_bytes;
  }
  const int64_t units = a.K / 2;
  for (int64_t u0 = 0; u0 < units; u0 += kSliceUnits) {
    const int64_t u1 = units - u0 < kSliceUnits ? units : u0 + kSliceUnits;  // no std:: template in here
    int64_t m = m_begin;
    for (; m + MR <= m_end; m += MR) bf16_tile<kFma, MR, G>(a, m, group, n0, u0, u1);
    bf16_rest_tile<kFma, MR, G>(a, m, m_end - m, group, n0, u0, u1);
  }
}

// The groups of [n, n_end) (fewer than G) after the whole blocks of G.
template <bool kFma, int MR, int G>
void bf16_rest_block(const MatmulArgs& a, int64_t n, int64_t n_end, int64_t m0, int64_t m1) {
  if constexpr (G > 1) {
    if ((n_end - n) / kPackedRows == G - 1) return bf16_block<kFma, MR, G - 1>(a, n, m0, m1);
    bf16_rest_block<kFma, MR, G - 1>(a, n, n_end, m0, m1);
  }
}

// One row of x (decode) is bound by memory: kStreams groups at once from kStreams equal parts of
// the range, whole K, so as many sequential streams are in flight. More rows: kBlockRows of x at a
// time against blocks of G groups (then fewer), 16 G outputs per broadcast of x.
template <bool kFma, int MR, int G>
void packed_bf16(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
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
      bf16_tile<kFma, 1, kStreams>(a, 0, group, n0, 0, a.K / 2);
    }
    n = n_begin + kStreams * part;
  }
  const int64_t n_rest = n;
  for (int64_t m0 = 0; m0 < a.M; m0 += kBlockRows) {
    const int64_t m1 = a.M - m0 < kBlockRows ? a.M : m0 + kBlockRows;  // no std:: template in here
    for (n = n_rest; n + G * kPackedRows <= n_end; n += G * kPackedRows) bf16_block<kFma, MR, G>(a, n, m0, m1);
    bf16_rest_block<kFma, MR, G>(a, n, n_end, m0, m1);
  }
}

}  // namespace

void matmul_packed_bf16(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.xb != nullptr) return packed_bf16<false, 6, 4>(a, n_begin, n_end);
  packed_bf16<true, 8, 2>(a, n_begin, n_end);
}

}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang
