// What the packed blocks of 32 (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) and iq4_xs's chunks of 32
// (packed_weights.h) need besides their quants, for the vector loops of every width (avx512_dot.cpp,
// avx2_packed_blocks.h): where a block's units are, what x gives each block (its scale, its sum)
// and what the unsigned nibble bytes exceed the values by. Scalar code only, so it may be included
// inside a file's target region (after isa.h and packed_weights.h).
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"

namespace ferry::kernels::cpu {

// What the unsigned nibble bytes exceed the values by: q4_0's stored q + 8, q5_0's q + 16,
// iq4_nl / iq4_xs's value + 128 (q4_1 and q5_1 are unsigned already; q8_0's weights are the signed
// side).
constexpr int32_t nibble_offset(DType t) {
  return t == DType::IQ4_NL || t == DType::IQ4_XS ? 128 : t == DType::Q4_0 ? 8 : t == DType::Q5_0 ? 16 : 0;
}
// iq4_nl and iq4_xs: the nibbles index kIq4NlValues.
constexpr bool has_table(DType t) {
  return t == DType::IQ4_NL || t == DType::IQ4_XS;
}
// q4_1 and q5_1: each block's m times x's block sum (q8_1's s) is added after its products.
constexpr bool has_mins(DType t) {
  return t == DType::Q4_1 || t == DType::Q5_1;
}

// Where x's scale for block b of row m is (a.xq_scale: q8_0 / q8_1 per block, q8_K per 256).
constexpr int64_t x_scale_at(DType t, int64_t blocks, int64_t m, int64_t b) {
  return t == DType::IQ4_XS ? m * (blocks / 8) + b / 8 : m * blocks + b;
}

// The sum of x's quants in block b of row m: q8_K's two sums of 16 (iq4_xs), else matmul.cpp's
// sums of 32 (a.xq_block_sum).
template <DType T>
inline int32_t x_block_sum(const MatmulArgs& a, int64_t blocks, int64_t m, int64_t b) {
  if constexpr (T == DType::IQ4_XS) {
    const int16_t* bsum = a.xq_bsum + m * blocks * 2 + b * 2;
    return bsum[0] + bsum[1];
  } else {
    return a.xq_block_sum[m * blocks + b];
  }
}

// Block b's first quant unit (after q5's unit of fifth bits) in a packed group of `blocks` blocks.
template <DType T>
inline const uint8_t* block_units(const uint8_t* group, int64_t blocks, int64_t b) {
  if constexpr (T == DType::IQ4_XS) {
    return group + b / 8 * kPackedIQ4XSSection + kPackedIQ4XSQuants + b % 8 * 4 * 64;
  } else {
    return group + packed_block_quants_at(T, blocks, b) + kPackedRows * packed_block_high_bytes(T);
  }
}

}  // namespace ferry::kernels::cpu
