// Scalar conversions of GGUF blocks and 16-bit floats: the reference every SIMD path must match,
// and the quantizers from_f32 uses (GGUF's reference rounding, so files we write match llama.cpp's).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ferry::kernels::cpu {

// f16 bits -> f32 for all 65536 values (256 KiB, built on first use). The SIMD matmuls read block
// scales through it: one load instead of a conversion on the vector ports they are short of.
const float* f16_table();

// 32 values of one block, in element order.
void dequantize_block(const BlockQ8_0& block, float* out);
void dequantize_block(const BlockQ4_0& block, float* out);

// 32 floats to one block, exactly as ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref.
BlockQ8_0 quantize_block_q8_0(const float* x);
BlockQ4_0 quantize_block_q4_0(const float* x);

// n floats (a multiple of 32) rounded to q8_0 exactly as quantize_block_q8_0, split in two arrays:
// the quants in q[0, n) and each block's scale (the f16 value) as f32 in scale[0, n / 32).
void quantize_row_q8_0_split(const float* x, int64_t n, int8_t* q, float* scale);
// The scale a q8_0 block with largest magnitude amax gets, as f32: amax / 127 rounded to f16.
// (A function, not inline: the SIMD files must not compile half.h's inline code for their ISA.)
float q8_0_scale(float amax);

// n elements of `type` (plain or quantized, the block types of quant_blocks.h included) to f32, one
// element at a time.
void row_to_f32_scalar(DType type, const void* src, float* dst, int64_t n);
// n floats to `type`: f32, f16, bf16, q8_0, q4_0 here, the other block types through
// quantize_row_blocks (quantize_blocks.h), all as llama-quantize writes them without an importance
// matrix; n a multiple of the block size. i32 is left unwritten: from_f32 refuses it first.
void row_from_f32(DType type, const float* src, void* dst, int64_t n);

}  // namespace ferry::kernels::cpu
