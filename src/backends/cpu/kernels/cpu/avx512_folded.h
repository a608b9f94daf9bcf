// Batches against the packed k-quants at the AVX-512 VNNI levels from per-batch panels of their
// unpacked quants (q2_k, q3_k, q6_k: each sub-block's scale folded in; avx512_folded.cpp): what
// avx512_dot.cpp's packed matmul takes from kFoldedMinRows rows of x.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"

namespace ferry::kernels::cpu {

// Below this many rows of x, folding a panel costs about what it saves (measured: at 16 rows q2_k
// and q3_k level with the packed loops or ahead, at 64 and more 1.5-2x).
inline constexpr int64_t kFoldedMinRows = 16;

// a: packed q2_k, q3_k, q4_k, q5_k or q6_k against x rounded to q8_K, M >= kFoldedMinRows; outputs n_begin..
// n_end (multiples of 16). The same exact int32 sums per super-block and the same f32 steps as the
// packed loops, so the same bits.
void matmul_folded(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace ferry::kernels::cpu
