// What the folded panels of both VNNI widths share (avx512_folded.cpp, avx_vnni.cpp's folded_256):
// the panels' layout, the thread's scratch, the outputs' start and end, and x's per-row factors
// beside each tile's units. Plain C++, no intrinsics: include it before a target region (its std::
// templates must not be compiled for the region's instruction set).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "core/dtype.h"

namespace ferry::kernels::cpu::folded {

// How a folded panel holds q6_k's quants: sc_j * (q - 32) as int16 pairs, one vpdpwssd chain a
// super-block; or q as unsigned bytes, a vpdpbusd chain per sub-block of 16 (started from x's
// -32 * its sum) times sc_j by vpmulld, as q4_k's sub-blocks of 32. Bytes take 4 vpdpbusd and a
// vpmulld per 256 products where int16 takes 8 vpdpwssd.
enum class Q6Form { Int16, Bytes };

// A folded panel's layout for T, its x tiles of kTileRows rows (avx512_folded.cpp's file comment
// says what each holds).
template <DType T, int kTileRows, Q6Form kQ6>
struct Layout {
  static constexpr bool kInt16 = T == DType::Q6_K && kQ6 == Q6Form::Int16;
  static constexpr bool kK4 = T == DType::Q4_K || T == DType::Q5_K;
  static constexpr bool kQ6Bytes = T == DType::Q6_K && kQ6 == Q6Form::Bytes;
  // Scales kept per sub-block (int32 vectors), each sub-block's chain times its own: q4_k / q5_k's
  // 8 of 32, q6_k's 16 of 16 in bytes.
  static constexpr int kSubBlocks = kK4 ? 8 : kQ6Bytes ? 16 : 0;
  static constexpr int kUnits = kInt16 ? 128 : 64;   // 64-byte units per group and super-block
  static constexpr int64_t kSlice = kInt16 ? 2 : 4;  // super-blocks per panel: 16-21 KB a group
  static constexpr int64_t kSection = T == DType::Q2_K   ? kPackedQ2KSection
                                      : T == DType::Q3_K ? kPackedQ3KSection
                                      : T == DType::Q4_K ? kPackedQ4KSection
                                      : T == DType::Q5_K ? kPackedQ5KSection
                                                         : kPackedQ6KSection;
  // A group's folded super-block: the units, then the sub-blocks' scale vectors (int32), then q2_k's
  // 8 or q4_k / q5_k's 4 min pairs (q2_k_min_pair, k4_factors), then d (and the mins' -dmin) as f32.
  static constexpr int64_t kScales = kUnits * 64;
  static constexpr int64_t kMinPairs = kScales + kSubBlocks * 64;
  static constexpr int kPairs = T == DType::Q2_K ? 8 : kK4 ? 4 : 0;
  static constexpr int64_t kD = kMinPairs + kPairs * 64;
  static constexpr int64_t kSuper = kD + (kPairs > 0 ? 2 * 64 : 64);
  // A tile's x for one super-block: the units [unit][row][4 bytes], then the rows' q8_K scales
  // (f32), the chains' starts (int32: q3_k's one a row, q6_k bytes' one per sub-block, [sub-block]
  // [row]), the mins' sub-block sum pairs [pair][row] (int32).
  static constexpr int64_t kXScales = kUnits * kTileRows * 4;
  static constexpr int64_t kXStarts = kXScales + kTileRows * 4;
  static constexpr int kStarts = T == DType::Q3_K ? 1 : kQ6Bytes ? 16 : 0;
  static constexpr int64_t kXPairs = kXStarts + kStarts * kTileRows * 4;
  static constexpr int64_t kXSuper = (kXPairs + kPairs * kTileRows * 4 + 63) / 64 * 64;
};

// This thread's buffer of at least n bytes, 64-byte aligned (the panels' vectors are read aligned).
inline uint8_t* aligned_scratch(size_t n) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < n + 64) buffer.resize(n + 64);
  const auto at = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - at % 64) % 64);
}

// A slice of super-blocks s0..s0 + count - 1 as the tiles take it: the first starts each output's
// sum from zero (y is not read), the others from y; the last adds the bias as it stores y (acc +
// bias, after every super-block's steps, as the packed loops).
struct Slice {
  int64_t s0 = 0;
  int64_t count = 0;
  bool first = false;
  bool last = false;
};

// A tile's per-row factors of x for super-block s, rows m0..m0 + tile_rows - 1 (those from M on
// zero, so they add nothing): each row's q8_K scale; q3_k's chain start, -124 * the row's sum over
// the super-block (its panel's bytes are w' + 124); q6_k bytes' chain starts, -32 * the row's sum
// over each sub-block of 16 (its panel's bytes are q, not q - 32); the int16 pairs of sums the min pairs meet,
// [pair][row]: q2_k's 8 pairs of sums of 16, q4_k's / q5_k's 4 of sums of 32 (packed_q4_k.h's
// x_sum_pair). Returns the rows below M.
template <DType T, Q6Form kQ6>
int64_t x_factors(const MatmulArgs& a, int64_t m0, int tile_rows, int64_t s, float* scale, int32_t* start,
                  int32_t* pair) {
  const int64_t supers = a.K / kQK_K;
  const int64_t rows = a.M - m0 < tile_rows ? a.M - m0 : tile_rows;
  using L = Layout<T, 1, kQ6>;
  for (int r = 0; r < tile_rows; ++r) {
    scale[r] = 0.0f;
    for (int j = 0; j < L::kStarts; ++j) start[j * tile_rows + r] = 0;
    for (int p = 0; p < L::kPairs; ++p) pair[p * tile_rows + r] = 0;
    if (r >= rows) continue;
    const int16_t* bsum = a.xq_bsum + (m0 + r) * (a.K / 16) + s * 16;
    scale[r] = a.xq_scale[(m0 + r) * supers + s];
    if constexpr (T == DType::Q3_K) {
      int32_t total = 0;
      for (int j = 0; j < 16; ++j) total += bsum[j];
      start[r] = -124 * total;
    }
    if constexpr (L::kQ6Bytes) {
      for (int j = 0; j < 16; ++j) start[j * tile_rows + r] = -32 * bsum[j];
    }
    if constexpr (T == DType::Q2_K) {
      for (int p = 0; p < 8; ++p) std::memcpy(&pair[p * tile_rows + r], bsum + 2 * p, 4);
    }
    if constexpr (L::kK4) {
      for (int p = 0; p < 4; ++p) {
        const int32_t even = bsum[4 * p] + bsum[4 * p + 1], odd = bsum[4 * p + 2] + bsum[4 * p + 3];
        pair[p * tile_rows + r] =
            static_cast<int32_t>((static_cast<uint32_t>(even) & 0xFFFFu) | (static_cast<uint32_t>(odd) << 16));
      }
    }
  }
  return rows;
}

}  // namespace ferry::kernels::cpu::folded
