// Packed bf16, f16 and f32 weights (packed_weights.h) on AVX-512: bf16 against x rounded to bf16,
// by vdpbf16ps where a.xb holds it (the avx512bf16 level; amx, which keeps bf16 rows for its tiles,
// takes it at every batch for a weight packed elsewhere), else by FMAs on a.x, rounded and widened
// to f32 (avx512, avx512vnni); f16 and f32 by FMAs on a.x as it is. The matmul_packed of the
// avx512 level (the float types only) and part of avx512_dot.cpp's; a.xb set only on a CPU with
// AVX512_BF16.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/isa.h"

namespace ferry::kernels::cpu {

// Each output is one f32 lane: acc = 0, then per unit u in increasing order (elements 2u, 2u + 1),
// then acc + bias:
//   bf16: acc += the pair (2u + 1, 2u) of x times w's (vdpbf16ps; the FMA loops do its two steps,
//     acc = fma(x[2u + 1], w[2u + 1], acc) then the same for 2u, each product of bf16 exact in f32,
//     so both ways agree bit for bit but where vdpbf16ps flushes denormals to zero);
//   f16, f32: acc = fma(x[2u], w[2u], acc), then the same for 2u + 1.
// The same operations for every M, split and slice of K, so the bits depend only on K.
void matmul_packed_float(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace ferry::kernels::cpu
