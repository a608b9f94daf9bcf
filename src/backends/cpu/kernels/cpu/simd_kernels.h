// ISA-independent tiling of the CPU inner loops, written once over a "vector traits" type S
// that each ISA file defines (see avx2.cpp, avx512.cpp). Include only from inside an ISA file's
// target region: every function here is a template on S, so each ISA gets its own instantiation
// compiled for its instruction set, and nothing here uses a std:: template.
//
// S provides: V (a vector of W floats), W, zero(), fma(a, b, acc), add, sub, mul, set1, hsum(v),
// load_x(p), load_x_partial(p, n), store(p, v), store_partial(p, v, n), and for weights
// load_w<T>(row, chunk) -> W weights of chunk `chunk` of a row of plain type T, as f32,
// load_w_partial<T>(row, chunk, n) -> the first n of them, zero elsewhere,
// load_block_q<T>(row, block, q, f16_table) -> the block's scale d in every lane, with its 32
// integers as f32 in the 32 / W chunks q[]: q8_0's q; for q4_0 the signed q if S::kSignedQ4,
// else the stored nibble q + 8. For q8_0 / q4_0 weights against activations rounded to q8_0 (see
// MatmulArgs::xq): XQ (a block of x's quants as the ISA wants them), load_xq(x) -> XQ,
// dot_q8(weight quants, XQ) -> the block's integer products, partly summed, as f32 lanes (exact),
// and for q4_0 Q4Bias, q4_bias(XQ) (what the ISA needs of x per block) and dot_q4(nibbles, XQ, bias).
//
// Determinism: every dot product keeps one vector accumulator, adds chunks in increasing k order
// with fma and reduces with S::hsum, whatever the tile shape. So an output does not depend on M,
// on which rows share its tile, or on the thread that computes it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/cpu/isa.h"
#include "core/dtype.h"

namespace ferry::kernels::cpu::simd {

// Requests the cache line at p into L1 ahead of its use.
template <class S>
void prefetch_line(const uint8_t* p) {
  __builtin_prefetch(p, 0, 3);
}

template <class S>
uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Writes hsum(acc) (+ bias) to y for rows [m0, m0 + MR) and outputs n0, n0 + row_step, ...
template <class S, int MR, int NR>
void store_tile(const MatmulArgs& a, typename S::V (&acc)[MR][NR], int64_t m0, int64_t n0, int64_t row_step) {
  for (int m = 0; m < MR; ++m) {
    float* y = a.y + (m0 + m) * a.y_stride;
    for (int n = 0; n < NR; ++n) {
      const int64_t out = n0 + n * row_step;
      y[out] = S::hsum(acc[m][n]) + (a.bias ? a.bias[out] : 0.0f);
    }
  }
}

// matmul_tile for q8_0 or q4_0 weights against x rounded to q8_0 (a.xq, a.xq_scale). Per block and
// output: the exact integer dot product of the block, times x's block scale, then
// acc += (the weight block's scale) * that.
template <class S, DType T, int MR, int NR>
void matmul_tile_quantized_x(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
  static_assert(T == DType::Q8_0 || T == DType::Q4_0, "blocks of 32 with an f16 scale first");
  constexpr size_t kBlockBytes = T == DType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  using V = typename S::V;
  V acc[MR][NR];
  for (int m = 0; m < MR; ++m) {
    for (int n = 0; n < NR; ++n) acc[m][n] = S::zero();
  }
  const uint8_t* w[NR];
  for (int n = 0; n < NR; ++n) w[n] = a.w + static_cast<size_t>(n0 + n * row_step) * a.w_row_bytes;
  const int8_t* xq[MR];
  const float* xs[MR];
  for (int m = 0; m < MR; ++m) {
    xq[m] = a.xq + (m0 + m) * a.K;
    xs[m] = a.xq_scale + (m0 + m) * (a.K / 32);
  }
  for (int64_t b = 0; b < a.K / 32; ++b) {
    if (prefetch_offset != 0) {
      for (int n = 0; n < NR; ++n) prefetch_line<S>(w[n] + prefetch_offset + (b + 1) * kBlockBytes - 1);
    }
    // x's block, read once for all NR rows.
    typename S::XQ xb[MR];
    V x_scale[MR];
    for (int m = 0; m < MR; ++m) {
      xb[m] = S::load_xq(xq[m] + b * 32);
      x_scale[m] = S::set1(xs[m][b]);
    }
    [[maybe_unused]] typename S::Q4Bias q4_bias[MR];
    if constexpr (T == DType::Q4_0) {
      for (int m = 0; m < MR; ++m) q4_bias[m] = S::q4_bias(xb[m]);
    }
    for (int n = 0; n < NR; ++n) {
      const uint8_t* block = w[n] + b * kBlockBytes;
      const V d = S::set1(a.f16_table[load_u16<S>(block)]);
      for (int m = 0; m < MR; ++m) {
        V dot;
        if constexpr (T == DType::Q8_0) {
          dot = S::dot_q8(block + 2, xb[m]);
        } else {
          dot = S::dot_q4(block + 2, xb[m], q4_bias[m]);
        }
        acc[m][n] = S::fma(S::mul(dot, x_scale[m]), d, acc[m][n]);
      }
    }
  }
  store_tile<S, MR, NR>(a, acc, m0, n0, row_step);
}

// y for rows [m0, m0 + MR) and outputs n0, n0 + row_step, ..., n0 + (NR - 1) * row_step. When
// prefetch_offset is not 0, the weight bytes that far past each row are prefetched as the row is read.
template <class S, DType T, int MR, int NR>
void matmul_tile(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step = 1, size_t prefetch_offset = 0) {
  if constexpr (T == DType::Q8_0 || T == DType::Q4_0) {
    if (a.xq != nullptr) return matmul_tile_quantized_x<S, T, MR, NR>(a, m0, n0, row_step, prefetch_offset);
  }
  using V = typename S::V;
  V acc[MR][NR];
  for (int m = 0; m < MR; ++m) {
    for (int n = 0; n < NR; ++n) acc[m][n] = S::zero();
  }
  const uint8_t* w[NR];
  for (int n = 0; n < NR; ++n) w[n] = a.w + static_cast<size_t>(n0 + n * row_step) * a.w_row_bytes;
  const float* x[MR];
  for (int m = 0; m < MR; ++m) x[m] = a.x + (m0 + m) * a.x_stride;

  const int64_t full = a.K / S::W;
  if constexpr (T == DType::Q8_0 || T == DType::Q4_0) {
    // Whole blocks of 32. Per block and output: s = sum over the block of x * q (q as small
    // integers in f32, products exact), then acc += d * s. Applying the scale once per block
    // instead of once per weight saves vector-port work, which bounds decode on quantized weights.
    // An ISA that gets q4_0's nibbles as stored (q + 8) computes sum x (q + 8) - 8 sum x, with
    // -8 sum x once per block and row.
    constexpr int kChunks = 32 / S::W;
    for (int64_t b = 0; b < a.K / 32; ++b) {
      constexpr bool kOffsetNibbles = T == DType::Q4_0 && !S::kSignedQ4;
      V minus_8_xsum[MR];
      if constexpr (kOffsetNibbles) {
        for (int m = 0; m < MR; ++m) {
          const float* xb = x[m] + b * 32;
          V xsum = S::load_x(xb);
          for (int part = 1; part < kChunks; ++part) xsum = S::add(xsum, S::load_x(xb + part * S::W));
          minus_8_xsum[m] = S::mul(xsum, S::set1(-8.0f));
        }
      }
      if (prefetch_offset != 0) {
        // A block is 18 or 34 bytes: prefetch the line holding the block's last byte.
        constexpr size_t kBlockBytes = T == DType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
        for (int n = 0; n < NR; ++n) prefetch_line<S>(w[n] + prefetch_offset + (b + 1) * kBlockBytes - 1);
      }
      for (int n = 0; n < NR; ++n) {
        V q[kChunks];
        const V d = S::template load_block_q<T>(w[n], b, q, a.f16_table);
        for (int m = 0; m < MR; ++m) {
          const float* xb = x[m] + b * 32;
          V s;
          if constexpr (kOffsetNibbles) {
            s = S::fma(S::load_x(xb), q[0], minus_8_xsum[m]);
          } else {
            s = S::mul(S::load_x(xb), q[0]);
          }
          for (int part = 1; part < kChunks; ++part) s = S::fma(S::load_x(xb + part * S::W), q[part], s);
          acc[m][n] = S::fma(s, d, acc[m][n]);
        }
      }
    }
  } else {
    constexpr int64_t kChunkBytes = S::W * (T == DType::F32 ? 4 : 2);
    static_assert(64 % kChunkBytes == 0 || kChunkBytes % 64 == 0, "chunks tile cache lines");
    for (int64_t c = 0; c < full; ++c) {
      if (prefetch_offset != 0 && (c * kChunkBytes) % 64 == 0) {
        for (int n = 0; n < NR; ++n) prefetch_line<S>(w[n] + prefetch_offset + c * kChunkBytes);
      }
      V wv[NR];
      for (int n = 0; n < NR; ++n) wv[n] = S::template load_w<T>(w[n], c);
      for (int m = 0; m < MR; ++m) {
        const V xv = S::load_x(x[m] + c * S::W);
        for (int n = 0; n < NR; ++n) acc[m][n] = S::fma(xv, wv[n], acc[m][n]);
      }
    }
  }
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {  // quantized rows are whole blocks
    const int rest = static_cast<int>(a.K - full * S::W);
    if (rest != 0) {
      V wv[NR];
      for (int n = 0; n < NR; ++n) wv[n] = S::template load_w_partial<T>(w[n], full, rest);
      for (int m = 0; m < MR; ++m) {
        const V xv = S::load_x_partial(x[m] + full * S::W, rest);
        for (int n = 0; n < NR; ++n) acc[m][n] = S::fma(xv, wv[n], acc[m][n]);
      }
    }
  }
  store_tile<S, MR, NR>(a, acc, m0, n0, row_step);
}

// The register tile the drivers below run: Tile::run<MR, NR>(a, m0, n0, row_step, prefetch_offset)
// computes y for rows [m0, m0 + MR) and outputs n0, n0 + row_step, ... (as matmul_tile does), and
// Tile::kXBytes is the bytes one element of the x rows it reads takes (for the cache blocking). This
// one is matmul_tile's; the AVX-512 dot-product levels bring their own (avx512_dot.cpp).
template <class S, DType T>
struct GenericTile {
  static constexpr int64_t kXBytes = 4;
  template <int MR, int NR>
  static void run(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
    matmul_tile<S, T, MR, NR>(a, m0, n0, row_step, prefetch_offset);
  }
};

// Rows [m_begin, m_end) against outputs [n0, n0 + NR), MR_MAX rows at a time.
template <class Tile, int NR, int MR_MAX>
void matmul_rows(const MatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n0) {
  int64_t m = m_begin;
  for (; m + MR_MAX <= m_end; m += MR_MAX) Tile::template run<MR_MAX, NR>(a, m, n0, 1, 0);
  switch (m_end - m) {
    case 0:
      break;
    case 1:
      Tile::template run<1, NR>(a, m, n0, 1, 0);
      break;
    case 2:
      if constexpr (MR_MAX > 2) Tile::template run<2, NR>(a, m, n0, 1, 0);
      break;
    case 3:
      if constexpr (MR_MAX > 3) Tile::template run<3, NR>(a, m, n0, 1, 0);
      break;
    default:
      break;
  }
}

// The x rows of one block stay in L2 while every weight tile of [n_begin, n_end) streams past
// them, so each weight tile is read and converted once per block of rows, not once per row.
//
// A single row (decode) streams every weight once and is bound by memory. Its tiles take their NR
// rows from NR equal parts of [n_begin, n_end), tile i rows i, i + part, i + 2 part, ...: the tiles
// then read NR long sequential streams, which the hardware prefetcher follows, where NR adjacent
// rows would be NR streams of a row each (a few KiB), ended before the prefetcher has ramped up.
// Each stream also prefetches its own weights kDecodePrefetchBytes ahead (isa.h; when a.prefetch:
// some CPUs' own prefetchers do better without).
template <class Tile, int NR, int MR_MAX>
void matmul_typed(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  static_assert(MR_MAX >= 1 && MR_MAX <= 4, "row tiles of 1 to 4");
  if (a.M == 1) {
    constexpr auto kAhead = static_cast<size_t>(kDecodePrefetchBytes);
    const int64_t part = (n_end - n_begin) / NR;
    for (int64_t i = 0; i < part; ++i) {
      // Within the stream: its rows after row i hold the bytes prefetched past row i's end.
      const bool ahead_in_stream = static_cast<size_t>(part - 1 - i) * a.w_row_bytes >= kAhead;
      Tile::template run<1, NR>(a, 0, n_begin + i, part, a.prefetch && ahead_in_stream ? kAhead : 0);
    }
    for (int64_t n = n_begin + NR * part; n < n_end; ++n) Tile::template run<1, 1>(a, 0, n, 1, 0);
    return;
  }
  constexpr int64_t kBlockBytes = 256 * 1024;
  int64_t rows_per_block = kBlockBytes / (a.K * Tile::kXBytes);
  rows_per_block = rows_per_block < MR_MAX ? MR_MAX : rows_per_block / MR_MAX * MR_MAX;
  for (int64_t m0 = 0; m0 < a.M; m0 += rows_per_block) {
    const int64_t m1 = m0 + rows_per_block < a.M ? m0 + rows_per_block : a.M;
    int64_t n = n_begin;
    for (; n + NR <= n_end; n += NR) matmul_rows<Tile, NR, MR_MAX>(a, m0, m1, n);
    for (; n < n_end; ++n) matmul_rows<Tile, 1, MR_MAX>(a, m0, m1, n);
  }
}

// Decode (M = 1) takes 8 weight rows per tile: 8 independent accumulators hide the FMA latency
// that 4 would expose. Larger M takes MR_MAX x 4 tiles, whose MR_MAX * 4 accumulators do the same.
template <class Tile, int MR_MAX>
void matmul_with_tile(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.M == 1) {
    matmul_typed<Tile, 8, 1>(a, n_begin, n_end);
  } else {
    matmul_typed<Tile, 4, MR_MAX>(a, n_begin, n_end);
  }
}

template <class S, DType T, int MR_MAX>
void matmul_for_type(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  matmul_with_tile<GenericTile<S, T>, MR_MAX>(a, n_begin, n_end);
}

template <class S, int MR_MAX>
void matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_type) {
    case DType::F32:
      return matmul_for_type<S, DType::F32, MR_MAX>(a, n_begin, n_end);
    case DType::F16:
      return matmul_for_type<S, DType::F16, MR_MAX>(a, n_begin, n_end);
    case DType::BF16:
      return matmul_for_type<S, DType::BF16, MR_MAX>(a, n_begin, n_end);
    case DType::Q8_0:
      return matmul_for_type<S, DType::Q8_0, MR_MAX>(a, n_begin, n_end);
    case DType::Q4_0:
      return matmul_for_type<S, DType::Q4_0, MR_MAX>(a, n_begin, n_end);
    default:
      return;  // matmul.cpp admits only the five types above
  }
}

template <class S, DType T>
void row_to_f32_typed(const uint8_t* src, float* dst, int64_t n, const float* f16_table) {
  if constexpr (T == DType::Q8_0 || T == DType::Q4_0) {
    constexpr int kChunks = 32 / S::W;
    for (int64_t b = 0; b < n / 32; ++b) {
      typename S::V q[kChunks];
      const typename S::V d = S::template load_block_q<T>(src, b, q, f16_table);
      for (int part = 0; part < kChunks; ++part) {
        // d * q is exact in f32 (an 11-bit scale times a <= 8-bit integer).
        const typename S::V value = T == DType::Q4_0 && !S::kSignedQ4 ? S::sub(q[part], S::set1(8.0f)) : q[part];
        S::store(dst + b * 32 + part * S::W, S::mul(value, d));
      }
    }
  } else {
    const int64_t full = n / S::W;
    for (int64_t c = 0; c < full; ++c) S::store(dst + c * S::W, S::template load_w<T>(src, c));
    const int rest = static_cast<int>(n - full * S::W);
    if (rest != 0) S::store_partial(dst + full * S::W, S::template load_w_partial<T>(src, full, rest), rest);
  }
}

template <class S>
void row_to_f32(DType type, const void* src, float* dst, int64_t n, const float* f16_table,
                void (*fallback)(DType, const void*, float*, int64_t)) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::F32:
      return row_to_f32_typed<S, DType::F32>(bytes, dst, n, f16_table);
    case DType::F16:
      return row_to_f32_typed<S, DType::F16>(bytes, dst, n, f16_table);
    case DType::BF16:
      return row_to_f32_typed<S, DType::BF16>(bytes, dst, n, f16_table);
    case DType::Q8_0:
      return row_to_f32_typed<S, DType::Q8_0>(bytes, dst, n, f16_table);
    case DType::Q4_0:
      return row_to_f32_typed<S, DType::Q4_0>(bytes, dst, n, f16_table);
    default:
      return fallback(type, src, dst, n);
  }
}

template <class S>
float dot(const float* a, const float* b, int64_t n) {
  typename S::V acc = S::zero();
  const int64_t full = n / S::W;
  for (int64_t c = 0; c < full; ++c) acc = S::fma(S::load_x(a + c * S::W), S::load_x(b + c * S::W), acc);
  const int rest = static_cast<int>(n - full * S::W);
  if (rest != 0) {
    acc = S::fma(S::load_x_partial(a + full * S::W, rest), S::load_x_partial(b + full * S::W, rest), acc);
  }
  return S::hsum(acc);
}

// e^x for a vector, accurate to ~2 ulp for x <= 88 (larger x give e^88) and 0 below -87.3
// (softmax feeds it x <= 0):
// x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to degree 7 (truncation < 1e-8).
template <class S>
typename S::V exp(typename S::V x) {
  using V = typename S::V;
  const V xc = S::min(S::max(x, S::set1(-87.3365447f)), S::set1(88.0f));
  const V n = S::round(S::mul(xc, S::set1(1.44269504088896341f)));
  V r = S::fma(n, S::set1(-0.693359375f), xc);  // ln 2 in two parts (Cody-Waite)
  r = S::fma(n, S::set1(2.12194440e-4f), r);
  V p = S::set1(1.0f / 5040.0f);
  p = S::fma(p, r, S::set1(1.0f / 720.0f));
  p = S::fma(p, r, S::set1(1.0f / 120.0f));
  p = S::fma(p, r, S::set1(1.0f / 24.0f));
  p = S::fma(p, r, S::set1(1.0f / 6.0f));
  p = S::fma(p, r, S::set1(0.5f));
  p = S::fma(p, r, S::set1(1.0f));
  p = S::fma(p, r, S::set1(1.0f));
  return S::zero_below(S::scale_by_pow2(p, n), x, S::set1(-87.3365447f));
}

// Prefetches the n bytes at p (whole cache lines) into the cache level `locality` names (3: L1).
// (A template like everything here, so each ISA file keeps its own copy.)
template <class S>
void prefetch_bytes(const uint8_t* p, int64_t n, int locality) {
  for (int64_t off = 0; off < n; off += 64) {
    if (locality == 3) {
      __builtin_prefetch(p + off, 0, 3);
    } else {
      __builtin_prefetch(p + off, 0, 2);
    }
  }
}

// Row `row` of this kv head in `cache` (AttentionHeads::k_cache or v_cache): its first byte, and
// how many bytes the head's elements span (whole q8_0 blocks).
template <class S>
const uint8_t* head_bytes(const AttentionHeads& r, const uint8_t* cache, int64_t row, int64_t* bytes) {
  const uint8_t* p = cache + static_cast<size_t>(row) * r.cache_row_bytes;
  if (r.cache_type == DType::Q8_0) {
    const int64_t first_block = r.first_col / kQK8_0;
    const int64_t end_block = (r.first_col + r.head_dim + kQK8_0 - 1) / kQK8_0;
    *bytes = (end_block - first_block) * static_cast<int64_t>(sizeof(BlockQ8_0));
    return p + first_block * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  const int64_t size = r.cache_type == DType::F32 ? 4 : 2;
  *bytes = r.head_dim * size;
  return p + r.first_col * size;
}

// This head's rows [start, start + count) of `cache` as f32: for an f32 cache the rows in place
// (*stride: a cache row, in floats); otherwise widened into `tile` ([count, head_dim], *stride
// head_dim), exactly, the next rows prefetched as it goes.
template <class S>
const float* cache_tile(const AttentionHeads& r, const uint8_t* cache, int64_t start, int64_t count, float* tile,
                        int64_t* stride) {
  constexpr int64_t kPrefetchRows = 4;
  if (r.cache_type == DType::F32) {
    *stride = static_cast<int64_t>(r.cache_row_bytes / 4);
    return reinterpret_cast<const float*>(cache + static_cast<size_t>(start) * r.cache_row_bytes) + r.first_col;
  }
  const int64_t hd = r.head_dim;
  *stride = hd;
  const bool whole_blocks = r.first_col % kQK8_0 == 0 && hd % kQK8_0 == 0;
  for (int64_t j = 0; j < count; ++j) {
    int64_t bytes = 0;
    if (j + kPrefetchRows < count) {
      const uint8_t* ahead = head_bytes<S>(r, cache, start + j + kPrefetchRows, &bytes);
      prefetch_bytes<S>(ahead, bytes, 3);
    }
    const uint8_t* src = head_bytes<S>(r, cache, start + j, &bytes);
    float* dst = tile + j * hd;
    if (r.cache_type == DType::F16) {
      row_to_f32_typed<S, DType::F16>(src, dst, hd, r.f16_table);
    } else if (r.cache_type == DType::BF16) {
      row_to_f32_typed<S, DType::BF16>(src, dst, hd, r.f16_table);
    } else if (whole_blocks) {
      row_to_f32_typed<S, DType::Q8_0>(src, dst, hd, r.f16_table);
    } else {  // a head that starts inside a q8_0 block
      cache_row_to_f32_scalar(r.cache_type, cache + static_cast<size_t>(start + j) * r.cache_row_bytes, r.first_col, hd,
                              dst);
    }
  }
  return tile;
}

// Prefetches the n floats at p (whole cache lines) into the cache level `locality` names (3: L1).
template <class S>
void prefetch_row(const float* p, int64_t n, int locality) {
  prefetch_bytes<S>(reinterpret_cast<const uint8_t*>(p), n * 4, locality);
}

// Attention for up to kMaxHeads query heads sharing a kv head. Per key tile: the scores of every
// head (each K row read once), a vectorised exp, then the V rows folded into each head's
// accumulator chunk by chunk (each V row read once). A cache that is not f32 is widened a tile at a
// time (cache_tile): the tile's K rows before the scores, its V rows (into the same scratch) before
// the accumulation.
template <class S>
void attention(const AttentionHeads& r) {
  constexpr int64_t kPrefetchKeys = 4;
  constexpr int64_t kKeysPerPass = 8;
  using V = typename S::V;
  constexpr int64_t kTile = AttentionHeads::kKeyTile;
  constexpr int kMax = AttentionHeads::kMaxHeads;
  static_assert(kTile % 16 == 0, "the tile holds whole vectors");
  const int heads = r.n_heads;
  const int64_t hd = r.head_dim;
  const int64_t full = hd / S::W;
  const int rest = static_cast<int>(hd - full * S::W);
  const bool in_place = r.cache_type == DType::F32;
  float* acc = r.scratch;                         // [heads, hd]
  float* probs = r.scratch + kMax * hd;           // [heads, kTile]
  float* tile = r.scratch + kMax * (hd + kTile);  // [kTile, hd]: K or V rows widened (not f32 caches)
  float running_max[kMax];
  float running_sum[kMax];
  float keep[kMax];
  for (int g = 0; g < heads; ++g) {
    for (int64_t d = 0; d < hd; ++d) acc[g * hd + d] = 0.0f;
    running_max[g] = -INFINITY;
    running_sum[g] = 0.0f;
  }
  for (int64_t start = 0; start < r.n_keys; start += kTile) {
    const int64_t count = r.n_keys - start < kTile ? r.n_keys - start : kTile;
    int64_t k_stride = 0;
    const float* k_rows = cache_tile<S>(r, r.k_cache, start, count, tile, &k_stride);
    // Scores. Cache rows of one head are a whole row of all kv heads apart (4 KiB and more), so
    // the hardware prefetcher, which stays inside a page, does not see them coming: fetch the K
    // row a few keys ahead, and the V row for the pass below (cache_tile does both for a cache it
    // widens).
    for (int64_t j = 0; j < count; ++j) {
      const float* k = k_rows + j * k_stride;
      if (in_place) {
        if (start + j + kPrefetchKeys < r.n_keys) prefetch_row<S>(k + kPrefetchKeys * k_stride, hd, 3);
        int64_t bytes = 0;
        prefetch_bytes<S>(head_bytes<S>(r, r.v_cache, start + j, &bytes), bytes, 2);
      }
      V dot[kMax];
      for (int g = 0; g < heads; ++g) dot[g] = S::zero();
      for (int64_t c = 0; c < full; ++c) {
        const V kv = S::load_x(k + c * S::W);
        for (int g = 0; g < heads; ++g) dot[g] = S::fma(S::load_x(r.q + g * hd + c * S::W), kv, dot[g]);
      }
      if (rest != 0) {
        const V kv = S::load_x_partial(k + full * S::W, rest);
        for (int g = 0; g < heads; ++g) {
          dot[g] = S::fma(S::load_x_partial(r.q + g * hd + full * S::W, rest), kv, dot[g]);
        }
      }
      for (int g = 0; g < heads; ++g) probs[g * kTile + j] = S::hsum(dot[g]) * r.scale;
    }
    // Online softmax: new maximum, rescale factor for what came before, this tile's weights.
    const int64_t padded = (count + S::W - 1) / S::W * S::W;
    for (int g = 0; g < heads; ++g) {
      float* pg = probs + g * kTile;
      float tile_max = -INFINITY;
      for (int64_t j = 0; j < count; ++j) tile_max = std::fmax(tile_max, pg[j]);
      const float new_max = std::fmax(running_max[g], tile_max);
      keep[g] = std::exp(running_max[g] - new_max);  // 0 on the first tile
      for (int64_t j = count; j < padded; ++j) pg[j] = -INFINITY;
      for (int64_t j = 0; j < padded; j += S::W) {
        S::store(pg + j, exp<S>(S::sub(S::load_x(pg + j), S::set1(new_max))));
      }
      float tile_sum = 0.0f;
      for (int64_t j = 0; j < count; ++j) tile_sum += pg[j];
      running_sum[g] = running_sum[g] * keep[g] + tile_sum;
      running_max[g] = new_max;
    }
    // acc = acc * keep + sum_j p_j v_j. Keys go in groups of kKeysPerPass, chunk by chunk of
    // head_dim: a group's rows stay in L1 across its chunks, while a whole tile's rows would not
    // (equal strides of 4 KiB put them all in the same few L1 sets).
    for (int g = 0; g < heads; ++g) {
      if (keep[g] != 1.0f) {
        for (int64_t d = 0; d < hd; ++d) acc[g * hd + d] *= keep[g];
      }
    }
    int64_t v_stride = 0;
    const float* v_rows = cache_tile<S>(r, r.v_cache, start, count, tile, &v_stride);
    for (int64_t j0 = 0; j0 < count; j0 += kKeysPerPass) {
      const int64_t j1 = j0 + kKeysPerPass < count ? j0 + kKeysPerPass : count;
      for (int64_t c = 0; c < full + (rest != 0 ? 1 : 0); ++c) {
        const int width = c < full ? S::W : rest;
        V o[kMax];
        for (int g = 0; g < heads; ++g) {
          const float* a = acc + g * hd + c * S::W;
          o[g] = width == S::W ? S::load_x(a) : S::load_x_partial(a, width);
        }
        for (int64_t j = j0; j < j1; ++j) {
          const float* v = v_rows + j * v_stride + c * S::W;
          const V vv = width == S::W ? S::load_x(v) : S::load_x_partial(v, width);
          for (int g = 0; g < heads; ++g) o[g] = S::fma(S::set1(probs[g * kTile + j]), vv, o[g]);
        }
        for (int g = 0; g < heads; ++g) {
          float* a = acc + g * hd + c * S::W;
          if (width == S::W) {
            S::store(a, o[g]);
          } else {
            S::store_partial(a, o[g], width);
          }
        }
      }
    }
  }
  for (int g = 0; g < heads; ++g) {
    const float inv = 1.0f / running_sum[g];
    for (int64_t d = 0; d < hd; ++d) r.out[g * hd + d] = acc[g * hd + d] * inv;
  }
}

// The bandwidth probe's read: the n floats are read as kStreams equal parts in lockstep, as a gemv
// reads its rows. One sequential stream leaves a server core's memory parallelism unused and would
// understate what the machine delivers (by about 2x on the machines we measured).
template <class S>
float sum_f32(const float* p, int64_t n) {
  constexpr int kStreams = 8;
  using V = typename S::V;
  V acc[kStreams];
  for (int s = 0; s < kStreams; ++s) acc[s] = S::zero();
  const int64_t per_stream = n / kStreams / S::W * S::W;
  for (int64_t i = 0; i < per_stream; i += S::W) {
    for (int s = 0; s < kStreams; ++s) acc[s] = S::add(acc[s], S::load_x(p + s * per_stream + i));
  }
  for (int64_t i = kStreams * per_stream; i < n; i += S::W) {  // the remainder
    const int64_t left = n - i;
    acc[0] = S::add(acc[0], left >= S::W ? S::load_x(p + i) : S::load_x_partial(p + i, static_cast<int>(left)));
  }
  V total = S::zero();
  for (int s = 0; s < kStreams; ++s) total = S::add(total, acc[s]);
  return S::hsum(total);
}

}  // namespace ferry::kernels::cpu::simd
