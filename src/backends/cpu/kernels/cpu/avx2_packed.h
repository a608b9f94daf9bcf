// The avx2 level's loops for packed weights (packed_weights.h), which avxvnni and avx512 take too: the
// float types, the blocks of 32, iq4_xs and the k-quants: every packable type.
// Defined where avx2.cpp's level is (x86-64 with GCC or Clang), which calls it.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"
#include "core/dtype.h"

namespace ferry::kernels::cpu {

// The packed types matmul_packed_avx2 takes (Isa::packed_types): every packable type (packed_weights.h).
bool avx2_packed_type(DType type);

// Isa::matmul_packed for those types, each output's operations those of isa.h's contract, so
// the bits are every packed level's: bf16 (x rounded and widened to f32), f16 and f32 by
// simd_float_packed.h's loops; the blocks of 32 against x rounded to q8_0 or q8_1 in rows (a.xq;
// q4_0, q5_0 and iq4_nl also a.xq_block_sum), iq4_xs against q8_K, each block's exact integer dot
// product, then acc = fma(f32(dot), weight scale * x scale, acc) (q4_1, q5_1: then + m * s), then
// acc + bias; the k-quants against x rounded to q8_K, their super-blocks' f32 steps.
void matmul_packed_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace ferry::kernels::cpu
