// Packed bf16 weights (packed_weights.h) against x rounded to bf16: by vdpbf16ps where a.xb holds
// it (the avx512bf16 level; amx, which keeps bf16 rows for its tiles, takes it at every batch for
// a weight packed elsewhere), else by FMAs on a.x, rounded and widened to f32 (avx512vnni).
// Defined only where avx512_dot.cpp is (FERRY_HAVE_AVX512_DOT), which calls it; a.xb set only on a
// CPU with AVX512_BF16.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"

namespace ferry::kernels::cpu {

// Each output is one f32 lane: acc = 0, then acc += the pair (2u + 1, 2u) of x times w's, u in
// increasing order (vdpbf16ps; the FMA loops do its two steps, acc = fma(x[2u + 1], w[2u + 1], acc)
// then the same for 2u, each product of bf16 exact in f32), then acc + bias. The same operations for
// every M, split and slice of K, so the bits depend only on K; both ways agree bit for bit but where
// vdpbf16ps flushes denormals to zero.
void matmul_packed_bf16(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace ferry::kernels::cpu
