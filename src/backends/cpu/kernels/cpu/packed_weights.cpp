#include "backends/cpu/kernels/cpu/packed_weights.h"

#include <cstring>

namespace ferry::kernels::cpu {

namespace {

// Block b of a standard q8_0 / q4_0 row: its f16 scale's bytes, then its quant bytes.
const uint8_t* row_block(DType type, const uint8_t* row, int64_t b) {
  return row + b * (2 + packed_block_quant_bytes(type));
}

// The pieces of row r's q4_k super-block (BlockQ4_K: d, dmin, scales[12], qs[128]) and where its
// group's section holds them: f(offset in the block, offset in the section, bytes).
template <class F>
void for_each_q4_k_piece(int64_t r, F&& f) {
  f(0, 2 * r, 2);       // d
  f(2, 32 + 2 * r, 2);  // dmin
  for (int64_t i = 0; i < 12; ++i) f(4 + i, kPackedQ4KScales + 16 * i + r, 1);
  for (int64_t u = 0; u < 32; ++u) f(16 + 4 * u, kPackedQ4KQuants + (u * 16 + r) * 4, 4);
}

}  // namespace

void pack_group(DType type, const uint8_t* rows, size_t row_bytes, int64_t K, uint8_t* group) {
  if (type == DType::Q4_K) {
    for (int64_t r = 0; r < kPackedRows; ++r) {
      for (int64_t g = 0; g < K / 256; ++g) {
        const uint8_t* block = rows + static_cast<size_t>(r) * row_bytes + g * 144;
        uint8_t* section = group + g * kPackedQ4KSection;
        for_each_q4_k_piece(r, [&](int64_t at, int64_t to, size_t n) { std::memcpy(section + to, block + at, n); });
      }
    }
    return;
  }
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
  if (type == DType::Q4_K) {
    for (int64_t g = 0; g < K / 256; ++g) {
      uint8_t* block = row + g * 144;
      const uint8_t* section = group + g * kPackedQ4KSection;
      for_each_q4_k_piece(r, [&](int64_t at, int64_t from, size_t n) { std::memcpy(block + at, section + from, n); });
    }
    return;
  }
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
