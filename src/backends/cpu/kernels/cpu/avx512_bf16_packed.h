// Packed bf16 weights (packed_weights.h) against x rounded to bf16, by vdpbf16ps: the avx512bf16
// level's matmul_packed for them (avx512_dot.cpp calls it; amx, which keeps bf16 rows for its
// tiles, takes it at every batch for a weight packed elsewhere). Defined only where avx512_dot.cpp
// is (FERRY_HAVE_AVX512_DOT), and called only with a.xb set: on a CPU with AVX512_BF16.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"

namespace ferry::kernels::cpu {

// Each output is one f32 lane: acc = 0, then acc += the pair (2u + 1, 2u) of x times w's, u in
// increasing order (vdpbf16ps), then acc + bias. The same operations for every M, split and
// slice of K, so the bits depend only on K.
void matmul_packed_bf16(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace ferry::kernels::cpu
