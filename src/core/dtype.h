// Element types as a table: size, block size, name, indexed by DType.
// Quantized types use GGUF's exact block layouts, so pre-quantized GGUF
// tensors are used as they are on disk.
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
  I32,   // token ids, positions
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

struct BlockQ8_0 {
  uint16_t d;  // fp16 bits
  int8_t qs[kQK8_0];
};
struct BlockQ4_0 {
  uint16_t d;  // fp16 bits
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ8_0) == 34, "GGUF Q8_0 block is 34 bytes");
static_assert(sizeof(BlockQ4_0) == 18, "GGUF Q4_0 block is 18 bytes");

}  // namespace ferry
