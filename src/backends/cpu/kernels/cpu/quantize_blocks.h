// Quantizers for the block types of quant_blocks.h (q4_1, q5_0, q5_1, iq4_nl, q2_k..q6_k, iq4_xs):
// f32 to blocks byte for byte as llama.cpp's llama-quantize writes them without an importance
// matrix (ggml's quantize_row_*_ref, and quantize_iq4_nl / quantize_iq4_xs with no weights), so a
// GGUF ferry writes is the one llama.cpp would. Bit-exactness rests on doing ggml's float
// operations in ggml's order, with no FMA contraction: this file is compiled for the generic ISA.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ferry::kernels::cpu {

// n floats into blocks of `type`, one of the types of is_block_type. Throws Error(Shape) when n is
// not a whole number of the type's blocks and Error(Unsupported) for any other type.
void quantize_row_blocks(DType type, const float* src, void* dst, int64_t n);

// One block each, from its 32 (q4_1 .. iq4_nl) or 256 (q2_k .. iq4_xs) floats.
BlockQ4_1 quantize_block_q4_1(const float* x);      // quantize_row_q4_1_ref
BlockQ5_0 quantize_block_q5_0(const float* x);      // quantize_row_q5_0_ref
BlockQ5_1 quantize_block_q5_1(const float* x);      // quantize_row_q5_1_ref
BlockIQ4_NL quantize_block_iq4_nl(const float* x);  // quantize_iq4_nl, no weights
BlockQ2_K quantize_block_q2_k(const float* x);      // quantize_row_q2_K_ref
BlockQ3_K quantize_block_q3_k(const float* x);      // quantize_row_q3_K_ref
BlockQ4_K quantize_block_q4_k(const float* x);      // quantize_row_q4_K_ref
BlockQ5_K quantize_block_q5_k(const float* x);      // quantize_row_q5_K_ref
BlockQ6_K quantize_block_q6_k(const float* x);      // quantize_row_q6_K_ref
BlockIQ4_XS quantize_block_iq4_xs(const float* x);  // quantize_iq4_xs, no weights

}  // namespace ferry::kernels::cpu
