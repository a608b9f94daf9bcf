// The avxvnni level: avx2's table, with the packed quantized types summed by the VEX-encoded vpdpbusd
// (AVX-VNNI: Alder Lake and later Intel cores, Zen 5) in avx2_packed_blocks.h's loops, one
// instruction where avx2 takes vpmaddubsw and its sums, and batches of q2_k and q3_k from folded
// panels (folded_256 below). Everything else is the avx2 level's.
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/avx2_packed.h"
#include "backends/cpu/kernels/cpu/folded_panels.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AVX_VNNI 1

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#include "backends/cpu/kernels/cpu/avx2_packed_blocks.h"

namespace ferry::kernels::cpu {
namespace {

// avx2_packed_blocks.h's products by vpdpbusd: acc + the products of unsigned u and signed s bytes,
// summed in fours.
struct BlocksAvxVnni {
  static constexpr bool kVnni = true;
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
};

// Batches of packed q2_k and q3_k from per-batch panels with each sub-block's scale folded into its
// quants, as avx512_folded.cpp at 256 bits: the same exact integers (q2_k's sc * q, q3_k's
// (sc - 32) * (q - 4) + 124 as unsigned bytes, q3_k's chains started from -124 * x's super-block
// sum), each unit of 64 bytes read as two vectors (rows 0-7, 8-15), x copied per slice into tiles
// of 6 rows (12 chains, 2 weight vectors and x's broadcast fill the 16 registers). The same int32
// sums per super-block and f32 steps as k16_tile, so the same bits.
namespace folded_256 {

using packed_blocks_256::broadcast4;
using packed_blocks_256::shift_epi16;

constexpr int kRows = 6;
constexpr int64_t kMinRows = 16;  // from here (measured: q3_k 0.29-0.36 -> 0.47-0.51 of the peak at 16 rows)

template <DType T>
using Folded = folded::Layout<T, kRows>;

template <DType T>
void fold_section(const uint8_t* section, uint8_t* out) {
  using F = Folded<T>;
  constexpr int64_t kQuants = T == DType::Q2_K ? kPackedQ2KQuants : kPackedQ3KQuants;
  alignas(32) int32_t sc[16][16];
  alignas(32) int32_t pairs[8][16];
  packed_blocks_256::k16_factors_256<BlocksAvxVnni, T>(section, sc, pairs);
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

// x's rows 6t..6t + 5 for super-blocks s0..s0 + count - 1 into tile t of `out`; rows past M zero.
template <DType T>
void pack_x_slice(const MatmulArgs& a, int64_t s0, int64_t count, uint8_t* out) {
  using F = Folded<T>;
  const int64_t tiles = (a.M + kRows - 1) / kRows;
  const __m256i row_offsets =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 0, 0), _mm256_set1_epi32(static_cast<int32_t>(a.K)));
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t m0 = t * kRows;
    const int64_t rows = a.M - m0 < kRows ? a.M - m0 : kRows;
    const __m256i valid =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(rows)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i stored = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t s = s0 + i;
      uint8_t* o = out + (t * F::kSlice + i) * F::kXSuper;
      const int8_t* x = a.xq + m0 * a.K + s * kQK_K;
      for (int u = 0; u < kQK_K / 4; ++u) {
        const __m256i four = _mm256_mask_i32gather_epi32(
            _mm256_setzero_si256(), reinterpret_cast<const int*>(x + 4 * u), row_offsets, valid, 1);
        _mm256_maskstore_epi32(reinterpret_cast<int*>(o + u * kRows * 4), stored, four);
      }
      folded::x_factors<T>(a, m0, kRows, s, reinterpret_cast<float*>(o + F::kXScales),
                           reinterpret_cast<int32_t*>(o + F::kXStarts), reinterpret_cast<int32_t*>(o + F::kXPairs));
    }
  }
}

// Tile x_tile (rows from m0) against one group's panel: per super-block one chain per row and
// half, then k16_tile's f32 steps into accumulators read from y and written back.
template <DType T>
void tile(const MatmulArgs& a, int64_t m0, int64_t n0, const uint8_t* panel, const uint8_t* x_tile, int64_t count) {
  using F = Folded<T>;
  const int64_t rows = a.M - m0 < kRows ? a.M - m0 : kRows;
  alignas(32) float acc[kRows][16];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < 2; ++v) {
      _mm256_store_ps(acc[r] + 8 * v,
                      r < rows ? _mm256_loadu_ps(a.y + (m0 + r) * a.y_stride + n0 + 8 * v) : _mm256_setzero_ps());
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* x = x_tile + i * F::kXSuper;
    const uint8_t* w = panel + i * F::kSuper;
    __m256i sum[kRows][2];
    for (int r = 0; r < kRows; ++r) {
      const __m256i start = T == DType::Q3_K ? broadcast4(x + F::kXStarts + 4 * r) : _mm256_setzero_si256();
      sum[r][0] = sum[r][1] = start;
    }
#pragma GCC unroll 1
    for (int u0 = 0; u0 < 64; u0 += 8) {
      auto unit = [&](auto U) {
        const int u = u0 + decltype(U)::value;
        const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 64 * u));
        const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 64 * u + 32));
        for (int r = 0; r < kRows; ++r) {
          const __m256i xv = broadcast4(x + (u * kRows + r) * 4);
          sum[r][0] = _mm256_dpbusd_avx_epi32(sum[r][0], w0, xv);
          sum[r][1] = _mm256_dpbusd_avx_epi32(sum[r][1], w1, xv);
        }
      };
      unroll<0, 8>(unit);
    }
    for (int v = 0; v < 2; ++v) {
      const __m256 d = _mm256_load_ps(reinterpret_cast<const float*>(w + F::kD + 32 * v));
      for (int r = 0; r < kRows; ++r) {
        float x_scale;
        std::memcpy(&x_scale, x + F::kXScales + 4 * r, 4);
        const __m256 xs = _mm256_set1_ps(x_scale);
        float* out = acc[r] + 8 * v;
        __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][v]), _mm256_mul_ps(d, xs), _mm256_load_ps(out));
        if constexpr (T == DType::Q2_K) {
          __m256i mins = _mm256_setzero_si256();
          for (int p = 0; p < 8; ++p) {
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
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < 2; ++v)
      _mm256_storeu_ps(a.y + (m0 + r) * a.y_stride + n0 + 8 * v, _mm256_load_ps(acc[r] + 8 * v));
  }
}

template <DType T>
void matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  using F = Folded<T>;
  if (n_begin >= n_end) return;
  const int64_t supers = a.K / kQK_K, tiles = (a.M + kRows - 1) / kRows;
  const auto panel_bytes = static_cast<size_t>(F::kSlice * F::kSuper);
  uint8_t* panel = folded::aligned_scratch(panel_bytes + static_cast<size_t>(tiles * F::kSlice * F::kXSuper));
  uint8_t* x_slice = panel + panel_bytes;
  folded::zero_outputs(a, n_begin, n_end);
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  for (int64_t s0 = 0; s0 < supers; s0 += F::kSlice) {
    const int64_t count = supers - s0 < F::kSlice ? supers - s0 : F::kSlice;
    pack_x_slice<T>(a, s0, count, x_slice);
    for (int64_t n = n_begin; n < n_end; n += kPackedRows) {
      const uint8_t* group = a.w + static_cast<size_t>(n / kPackedRows) * group_bytes;
      for (int64_t i = 0; i < count; ++i) fold_section<T>(group + (s0 + i) * F::kSection, panel + i * F::kSuper);
      for (int64_t t = 0; t < tiles; ++t) tile<T>(a, t * kRows, n, panel, x_slice + t * F::kSlice * F::kXSuper, count);
    }
  }
  folded::add_bias(a, n_begin, n_end);
}

}  // namespace folded_256

void matmul_packed_avx_vnni(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.M >= folded_256::kMinRows && a.xq != nullptr) {
    if (a.w_type == DType::Q2_K) return folded_256::matmul<DType::Q2_K>(a, n_begin, n_end);
    if (a.w_type == DType::Q3_K) return folded_256::matmul<DType::Q3_K>(a, n_begin, n_end);
  }
  if (packed_blocks_256::packed_quantized<BlocksAvxVnni>(a, n_begin, n_end)) return;
  matmul_packed_avx2(a, n_begin, n_end);
}

}  // namespace
}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang

namespace ferry::kernels::cpu {
const Isa* avx_vnni_isa() {
#ifdef FERRY_HAVE_AVX_VNNI
  static const Isa isa = [] {
    Isa level = *avx2_isa();
    level.name = "avxvnni";
    level.matmul_packed = matmul_packed_avx_vnni;
    level.repacks = avx2_packed_type;
    level.packed_types = avx2_packed_type;
    return level;
  }();
  return &isa;
#else
  return nullptr;
#endif
}
}  // namespace ferry::kernels::cpu
