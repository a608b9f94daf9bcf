// The avx2 level's loops for packed weights (packed_weights.h): the float types, q8_0, q4_0, q4_k, q5_k
// and q6_k.
// Defined where avx2.cpp's level is (x86-64 with GCC or Clang), which calls it.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"
#include "core/dtype.h"

namespace ferry::kernels::cpu {

// The packed types matmul_packed_avx2 takes (Isa::packed_types): bf16, f16, f32, q8_0, q4_0, q4_k, q5_k,
// q6_k.
bool avx2_packed_type(DType type);

// Isa::matmul_packed for those types, each output's operations those of isa.h's contract, so
// the bits are every packed level's: bf16 (x rounded and widened to f32), f16 and f32 by
// simd_float_packed.h's loops; q8_0 and q4_0 against x rounded to q8_0 in rows (a.xq; q4_0 also
// a.xq_block_sum), each block's exact integer dot product, then acc = fma(f32(dot), weight scale *
// x scale, acc), then acc + bias; q4_k against x rounded to q8_K, add_super_block's steps.
void matmul_packed_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace ferry::kernels::cpu
