// Element types as a table: size, block size, name, indexed by DType.
// Quantized types use GGUF's exact block layouts (ggml's ggml-common.h), so pre-quantized GGUF
// tensors are used as they are on disk. Every block starts at a byte offset that is a multiple of
// 2 only: read blocks with memcpy, never through a typed pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  Q8_0,  // blocks of 32: fp16 scale d, int8 q[32];          x = d * q
  Q4_0,  // blocks of 32: fp16 scale d, uint8 nibbles[16];   x[j] = d * ((nib[j] & 15) - 8),
         //                                                  x[j+16] = d * ((nib[j] >> 4) - 8)
  // The other GGUF weight types (layouts in the Block* structs below). In a block of 32, element
  // j < 16 is the low nibble of qs[j] and element j + 16 its high nibble.
  Q4_1,    // blocks of 32: x = d * q + m, q in [0, 15]
  Q5_0,    // blocks of 32: x = d * (q - 16), q in [0, 31]: nibble | bit j of qh << 4
  Q5_1,    // blocks of 32: x = d * q + m, q as in q5_0
  IQ4_NL,  // blocks of 32: x = d * kIq4NlValues[nibble]
  Q2_K,    // super-blocks of 256: 16 sub-blocks of 16, x = d * sc * q - dmin * m, q in [0, 3]
  Q3_K,    // super-blocks of 256: 16 sub-blocks of 16, x = d * (sc - 32) * (q - 4), q in [0, 7]
  Q4_K,    // super-blocks of 256: 8 sub-blocks of 32, x = d * sc * q - dmin * m, q in [0, 15]
  Q5_K,    // super-blocks of 256: 8 sub-blocks of 32, x = d * sc * q - dmin * m, q in [0, 31]
  Q6_K,    // super-blocks of 256: 16 sub-blocks of 16, x = d * sc * (q - 32), q in [0, 63]
  IQ4_XS,  // super-blocks of 256: 8 sub-blocks of 32, x = d * (sc - 32) * kIq4NlValues[nibble]
  I32,     // token ids, positions
  Count,
};

struct DTypeTraits {
  std::string_view name;  // "f32", "q8_0", ...
  int block_size;         // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool is_quantized;
  bool is_float;  // f32/f16/bf16: plain floating types
};

const DTypeTraits& dtype_traits(DType dtype);
inline std::string_view dtype_name(DType dtype) {
  return dtype_traits(dtype).name;
}
std::optional<DType> dtype_from_name(std::string_view name);  // accepts "f32", "F32", "bf16", "q8_0", ...

// Bytes of `count` elements (count must be a multiple of the block size; returns nullopt otherwise
// or on overflow).
std::optional<size_t> dtype_bytes(DType dtype, uint64_t count);

inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK_K = 256;  // the super-block of the k-quants and iq4_xs

// The 16 values of iq4_nl and iq4_xs quants (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

struct BlockQ8_0 {
  uint16_t d;  // fp16 bits
  int8_t qs[kQK8_0];
};
struct BlockQ4_0 {
  uint16_t d;  // fp16 bits
  uint8_t qs[kQK4_0 / 2];
};
struct BlockQ4_1 {
  uint16_t d, m;  // fp16 bits
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j (little-endian u32) is the fifth bit of element j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];  // indices into kIq4NlValues
};
// Element e of a k-quant super-block is in 128-element half h = e / 128, 32-element chunk
// c = (e % 128) / 32 of it, at l = e % 32. The 2-bit planes (q2_k, q3_k's low bits) hold chunk c of
// half h in bits 2c..2c+1 of qs[32 h + l]; q3_k's high bit is bit 4h + c of hmask[l].
struct BlockQ2_K {
  uint8_t scales[16];  // sub-block s: sc = scales[s] & 15, m = scales[s] >> 4
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // 16 6-bit scales: low 4 bits in nibbles of [0, 8), high 2 bits in [8, 12)
  uint16_t d;
};
// q4_k / q5_k: element e is in 32-element sub-block j = e / 32, at l = e % 32; its low 4 bits are the
// low nibble of qs[32 (j / 2) + l] for even j, the high nibble for odd j; q5_k's fifth bit is bit j
// of qh[l]. The 8 6-bit scales and 8 6-bit mins are packed in scales[12] (ggml's get_scale_min_k4).
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// q6_k: element e in half h = e / 128, chunk c = (e % 128) / 32, l = e % 32: low 4 bits are the low
// (c < 2) or high (c >= 2) nibble of ql[64 h + 32 (c % 2) + l], high 2 bits are bits 2c..2c+1 of
// qh[32 h + l]; sub-block of 16 e / 16 has the signed scale scales[e / 16].
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// iq4_xs: sub-block j of 32 has scale (scales_l[j / 2] >> 4 (j % 2) & 15) | (scales_h >> 2 j & 3) << 4,
// its 32 indices in qs[16 j, 16 j + 16) as in iq4_nl.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ8_0) == 34, "GGUF Q8_0 block is 34 bytes");
static_assert(sizeof(BlockQ4_0) == 18, "GGUF Q4_0 block is 18 bytes");
static_assert(sizeof(BlockQ4_1) == 20, "GGUF Q4_1 block is 20 bytes");
static_assert(sizeof(BlockQ5_0) == 22, "GGUF Q5_0 block is 22 bytes");
static_assert(sizeof(BlockQ5_1) == 24, "GGUF Q5_1 block is 24 bytes");
static_assert(sizeof(BlockIQ4_NL) == 18, "GGUF IQ4_NL block is 18 bytes");
static_assert(sizeof(BlockQ2_K) == 84, "GGUF Q2_K block is 84 bytes");
static_assert(sizeof(BlockQ3_K) == 110, "GGUF Q3_K block is 110 bytes");
static_assert(sizeof(BlockQ4_K) == 144, "GGUF Q4_K block is 144 bytes");
static_assert(sizeof(BlockQ5_K) == 176, "GGUF Q5_K block is 176 bytes");
static_assert(sizeof(BlockQ6_K) == 210, "GGUF Q6_K block is 210 bytes");
static_assert(sizeof(BlockIQ4_XS) == 136, "GGUF IQ4_XS block is 136 bytes");

}  // namespace ferry
