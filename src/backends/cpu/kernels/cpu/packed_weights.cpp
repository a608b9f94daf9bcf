#include "backends/cpu/kernels/cpu/packed_weights.h"

#include <cstddef>
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

// The same for q6_k (BlockQ6_K: ql[128], qh[64], scales[16], d): scale j = 8n + 2t + h in quad
// 2n + h's plane t; ql bytes 64n + 32 b + 4c.. in run b of quad 2n + c / 4, qh bytes 32n + 4c.. in
// its run 2, as unit c % 4.
template <class F>
void for_each_q6_k_piece(int64_t r, F&& f) {
  auto unit_at = [r](int64_t quad, int64_t run, int64_t unit) {
    return kPackedQ6KQuants + quad * kPackedQ6KQuad + ((run * 4 + unit) * 16 + r) * 4;
  };
  for (int64_t u = 0; u < 32; ++u) {  // ql: half n, run b, c
    const int64_t n = u / 16, b = u % 16 / 8, c = u % 8;
    f(4 * u, unit_at(2 * n + c / 4, b, c % 4), 4);
  }
  for (int64_t v = 0; v < 16; ++v) {  // qh
    const int64_t n = v / 8, c = v % 8;
    f(offsetof(BlockQ6_K, qh) + 4 * v, unit_at(2 * n + c / 4, 2, c % 4), 4);
  }
  for (int64_t j = 0; j < 16; ++j) {
    const int64_t n = j / 8, t = j % 8 / 2, h = j % 2;
    f(offsetof(BlockQ6_K, scales) + j, kPackedQ6KScales + 64 * (2 * n + h) + 16 * t + r, 1);
  }
  f(offsetof(BlockQ6_K, d), 2 * r, 2);
}

// A super-block type's (q4_k, q6_k) standard block and packed section sizes.
struct SuperBlockSizes {
  size_t block;
  int64_t section;
};
SuperBlockSizes super_block_sizes(DType type) {
  return type == DType::Q4_K ? SuperBlockSizes{sizeof(BlockQ4_K), kPackedQ4KSection}
                             : SuperBlockSizes{sizeof(BlockQ6_K), kPackedQ6KSection};
}
template <class F>
void for_each_super_block_piece(DType type, int64_t r, F&& f) {
  if (type == DType::Q4_K) {
    for_each_q4_k_piece(r, f);
  } else {
    for_each_q6_k_piece(r, f);
  }
}

}  // namespace

void pack_group(DType type, const uint8_t* rows, size_t row_bytes, int64_t K, uint8_t* group) {
  if (packed_k_multiple(type) == kQK_K) {
    const SuperBlockSizes size = super_block_sizes(type);
    for (int64_t r = 0; r < kPackedRows; ++r) {
      for (int64_t g = 0; g < K / kQK_K; ++g) {
        const uint8_t* block = rows + static_cast<size_t>(r) * row_bytes + g * size.block;
        uint8_t* section = group + g * size.section;
        for_each_super_block_piece(type, r,
                                   [&](int64_t at, int64_t to, size_t n) { std::memcpy(section + to, block + at, n); });
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
  if (packed_k_multiple(type) == kQK_K) {
    const SuperBlockSizes size = super_block_sizes(type);
    for (int64_t g = 0; g < K / kQK_K; ++g) {
      uint8_t* block = row + g * size.block;
      const uint8_t* section = group + g * size.section;
      for_each_super_block_piece(
          type, r, [&](int64_t at, int64_t from, size_t n) { std::memcpy(block + at, section + from, n); });
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
