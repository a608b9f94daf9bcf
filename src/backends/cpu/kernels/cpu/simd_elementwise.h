// Elementwise loops of the prompt's hot path over the vector traits S of simd_kernels.h (include
// it first, from inside an ISA file's target region, with core/half.h included before the region).
// Every element takes the same operations whatever its position, so a row's results do not depend
// on how the rows are split.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/cpu/simd_kernels.h"

namespace ferry::kernels::cpu::simd {

// out = silu(gate) * up, silu(g) = g * sigmoid(g), sigmoid from e = exp(-|g|) (never overflows):
// 1 / (1 + e) for g >= 0, e / (1 + e) below.
template <class S>
typename S::V swiglu_vector(typename S::V g, typename S::V u) {
  using V = typename S::V;
  const V abs = S::max(g, S::sub(S::zero(), g));
  const V e = exp<S>(S::sub(S::zero(), abs));
  const V positive = S::div(S::set1(1.0f), S::add(S::set1(1.0f), e));
  const V sigmoid = S::select_negative(g, positive, S::mul(e, positive));
  return S::mul(S::mul(g, sigmoid), u);
}

template <class S>
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + S::W <= n; i += S::W) S::store(out + i, swiglu_vector<S>(S::load_x(gate + i), S::load_x(up + i)));
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    S::store_partial(out + i, swiglu_vector<S>(S::load_x_partial(gate + i, rest), S::load_x_partial(up + i, rest)),
                     rest);
  }
}

// n floats to f16 as core/half.h f32_to_f16 rounds them, bit for bit: the conversion instruction
// rounds to nearest even as it does, and a vector holding a NaN (whose payload the instruction
// keeps and f32_to_f16 does not) goes one element at a time.
template <class S>
void round_row_f16(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + S::W <= n; i += S::W) {
    const typename S::V v = S::load_x(x + i);
    if (S::any_nan(v)) {
      for (int j = 0; j < S::W; ++j) out[i + j] = f32_to_f16(x[i + j]);
    } else {
      S::store_f16(out + i, v);
    }
  }
  for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

}  // namespace ferry::kernels::cpu::simd
