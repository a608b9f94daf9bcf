// Batches against the packed k-quants at the avxvnni level from per-batch panels of their unpacked
// quants (avx_vnni_folded.cpp: avx512_folded.cpp's panels in 256-bit form): what avx_vnni.cpp's
// packed matmul takes from kFolded256MinRows rows of x.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"

namespace ferry::kernels::cpu {

// Below this many rows of x, folding a panel costs about what it saves.
inline constexpr int64_t kFolded256MinRows = 16;

// a: packed q2_k, q3_k, q4_k, q5_k or q6_k against x rounded to q8_K, M >= kFolded256MinRows;
// outputs n_begin..n_end (multiples of 16). False, and nothing done, for any other type. The same
// exact int32 sums per super-block and the same f32 steps as avx2_packed_blocks.h's loops, so the
// same bits.
bool matmul_folded_avx_vnni(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace ferry::kernels::cpu
