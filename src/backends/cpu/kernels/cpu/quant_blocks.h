// The GGUF block types past q8_0 and q4_0 (q4_1, q5_0, q5_1, iq4_nl and the 256-element k-quants
// q2_k..q6_k, iq4_xs; layouts in core/dtype.h): dequantization exactly as ggml's dequantize_row_*,
// and the rounding llama.cpp gives activations before it multiplies them with each type (ggml-cpu's
// vec_dot_type), so that ferry's products are llama.cpp's products. Scalar code: the dequantization
// serves conversions and embedding rows, the dot products the scalar ISA; the SIMD matmuls
// (simd_blocks.h) compute the same integer sums.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ferry::kernels::cpu {

// What llama.cpp rounds a row of activations to before its product with weights of a type:
// q8_0 (blocks of 32: int8 quants, fp16 scale) for q8_0, q4_0, q5_0, iq4_nl; q8_1 (q8_0 plus
// s = fp16(d * sum of the quants) per block, which meets the weights' min) for q4_1, q5_1; q8_K
// (blocks of 256: an f32 scale, int8 quants, the sums of each 16 quants) for the k-quants and iq4_xs.
enum class ActivationQuant { None, Q8_0, Q8_1, Q8_K };
ActivationQuant activation_quant(DType weight_type);
// Elements per scale of the activation rounding: 32 (q8_0, q8_1) or 256 (q8_K).
inline int activation_block(ActivationQuant a) {
  return a == ActivationQuant::Q8_K ? kQK_K : 32;
}

// q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs: the types of this file.
bool is_block_type(DType type);

// n elements (a multiple of the type's block) of a block type to f32, bit for bit as ggml.
void dequantize_row_blocks(DType type, const uint8_t* src, float* dst, int64_t n);

// q8_1's sums for n floats (a multiple of 32) already rounded to q8_0 (quantize_row_q8_0_split,
// whose quants are q8_1's): s[b] = fp16(d * sum of block b's quants) as f32, d = amax / 127 unrounded.
void q8_1_sums(const float* x, const int8_t* q, int64_t n, float* s);
// n floats (a multiple of 256) rounded as ggml's quantize_row_q8_K_ref: per 256, the value of largest
// magnitude m maps to -127, q = min(127, round-half-even(x * (-127 / m))), scale = 1 / (-127 / m);
// bsum holds the sum of each 16 quants (n / 16 of them).
void quantize_row_q8_K_split(const float* x, int64_t n, int8_t* q, float* scale, int16_t* bsum);

// One row of activations rounded for a weight type (MatmulArgs::xq and the rest, at one row).
struct RoundedRow {
  const int8_t* q = nullptr;      // [K]
  const float* scale = nullptr;   // [K / activation_block]
  const float* sum = nullptr;     // q8_1: [K / 32]
  const int16_t* bsum = nullptr;  // q8_K: [K / 16]
};
// The dot product of K weights of a block type with a row rounded for it: per block the exact
// integer sums, combined as llama.cpp combines them (the scalar ISA's kernel).
float dot_row_blocks_scalar(DType type, const uint8_t* w, const RoundedRow& x, int64_t K);

// This thread's scratch row of at least n floats (valid until its next call on the thread).
float* row_scratch(int64_t n);

// The 8 scales and 8 mins of a q4_k / q5_k super-block from its 12 packed bytes.
void unpack_scales_k4(const uint8_t* packed, uint8_t sc[8], uint8_t m[8]);
// The 16 scales of a q3_k super-block from its 12 packed bytes, as stored (subtract 32 to use).
void unpack_scales_q3_k(const uint8_t* packed, uint8_t sc[16]);

}  // namespace ferry::kernels::cpu
