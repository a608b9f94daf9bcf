#include "backends/cpu/kernels/cpu/packed_weights.h"

#include <cstring>

namespace ferry::kernels::cpu {

namespace {

// Block b of a standard row: its f16 scale's bytes, then its quant bytes.
const uint8_t* row_block(DType type, const uint8_t* row, int64_t b) {
  return row + b * (2 + packed_block_quant_bytes(type));
}

}  // namespace

void pack_group(DType type, const uint8_t* rows, size_t row_bytes, int64_t K, uint8_t* group) {
  const int64_t blocks = K / 32;
  const int64_t quant_bytes = packed_block_quant_bytes(type);
  uint8_t* quants = group + blocks * kPackedRows * 2;
  for (int64_t r = 0; r < kPackedRows; ++r) {
    const uint8_t* row = rows + static_cast<size_t>(r) * row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row_block(type, row, b);
      std::memcpy(group + (b * kPackedRows + r) * 2, block, 2);
      for (int64_t i = 0; i < quant_bytes; ++i) {
        const int64_t unit = (b * quant_bytes + i) / 4;
        quants[(unit * kPackedRows + r) * 4 + i % 4] = block[2 + i];
      }
    }
  }
}

void unpack_group_row(DType type, const uint8_t* group, int64_t K, int64_t r, uint8_t* row) {
  const int64_t blocks = K / 32;
  const int64_t quant_bytes = packed_block_quant_bytes(type);
  const uint8_t* quants = group + blocks * kPackedRows * 2;
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* block = row + b * (2 + quant_bytes);
    std::memcpy(block, group + (b * kPackedRows + r) * 2, 2);
    for (int64_t i = 0; i < quant_bytes; ++i) {
      const int64_t unit = (b * quant_bytes + i) / 4;
      block[2 + i] = quants[(unit * kPackedRows + r) * 4 + i % 4];
    }
  }
}

}  // namespace ferry::kernels::cpu
