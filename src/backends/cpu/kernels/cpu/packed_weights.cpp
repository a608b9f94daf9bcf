#include "backends/cpu/kernels/cpu/packed_weights.h"

#include <cstring>

namespace ferry::kernels::cpu {

namespace {

// Block b of a standard q8_0 / q4_0 row: its f16 scale's bytes, then its quant bytes.
const uint8_t* row_block(DType type, const uint8_t* row, int64_t b) {
  return row + b * (2 + packed_block_quant_bytes(type));
}

// Where each byte of row r's q4_k super-block (BlockQ4_K: d, dmin, scales[12], qs[128]) sits in
// its group's section: pack and unpack are the same walk in opposite directions.
int64_t q4_k_section_offset(int64_t byte, int64_t r) {
  if (byte < 4) return (byte / 2) * 32 + r * 2 + byte % 2;                // d, dmin
  if (byte < 16) return kPackedQ4KScales + (byte - 4) * kPackedRows + r;  // scale planes
  const int64_t q = byte - 16;
  return kPackedQ4KQuants + ((q / 4) * kPackedRows + r) * 4 + q % 4;
}

}  // namespace

void pack_group(DType type, const uint8_t* rows, size_t row_bytes, int64_t K, uint8_t* group) {
  if (type == DType::Q4_K) {
    for (int64_t r = 0; r < kPackedRows; ++r) {
      const uint8_t* row = rows + static_cast<size_t>(r) * row_bytes;
      for (int64_t g = 0; g < K / 256; ++g) {
        for (int64_t i = 0; i < 144; ++i) group[g * kPackedQ4KSection + q4_k_section_offset(i, r)] = row[g * 144 + i];
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
      for (int64_t i = 0; i < 144; ++i) row[g * 144 + i] = group[g * kPackedQ4KSection + q4_k_section_offset(i, r)];
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
