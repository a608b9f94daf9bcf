#include "backends/cpu/kernels/cpu/packed_weights.h"

#include <cstddef>
#include <cstring>

namespace ferry::kernels::cpu {

namespace {

// The bytes of one block of 32 of one row as stored: factors, fifth bits, quants.
int64_t row_block_bytes(DType type) {
  return packed_block_factor_bytes(type) + packed_block_high_bytes(type) + packed_block_quant_bytes(type);
}

// A q5_0 / q5_1 block's 32 fifth bits (bit j: element j) and row r's 4 bytes of the block's fifth
// bits unit (packed_weights.h): bit 4c + i + 16h of `bits` is bit 2c + h of byte i.
void pack_fifth_bits(uint32_t bits, int64_t r, uint8_t* unit) {
  for (int64_t i = 0; i < 4; ++i) {
    uint8_t byte = 0;
    for (int64_t c = 0; c < 4; ++c) {
      for (int64_t h = 0; h < 2; ++h)
        byte = static_cast<uint8_t>(byte | (bits >> (4 * c + i + 16 * h) & 1) << (2 * c + h));
    }
    unit[r * 4 + i] = byte;
  }
}
uint32_t unpack_fifth_bits(const uint8_t* unit, int64_t r) {
  uint32_t bits = 0;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t c = 0; c < 4; ++c) {
      for (int64_t h = 0; h < 2; ++h)
        bits |= static_cast<uint32_t>(unit[r * 4 + i] >> (2 * c + h) & 1) << (4 * c + i + 16 * h);
    }
  }
  return bits;
}

// The pieces of row r's q2_k, q3_k, q4_k, q5_k or iq4_xs super-block and where its group's
// section holds them: f(offset in the block, offset in the section, bytes). As stored: BlockQ2_K
// scales[16], qs[64], d, dmin; BlockQ3_K hmask[32], qs[64], scales[12], d; BlockQ4_K d, dmin,
// scales[12], qs[128]; BlockQ5_K qh[32] before qs; BlockIQ4_XS d, scales_h, scales_l[4], qs[128].
template <class F>
void for_each_section_piece(DType type, int64_t r, F&& f) {
  if (type == DType::Q2_K) {
    f(offsetof(BlockQ2_K, d), 2 * r, 2);
    f(offsetof(BlockQ2_K, dmin), 32 + 2 * r, 2);
    for (int64_t j = 0; j < 16; ++j) f(offsetof(BlockQ2_K, scales) + j, kPackedQ2KScales + 16 * j + r, 1);
    for (int64_t u = 0; u < 16; ++u) f(offsetof(BlockQ2_K, qs) + 4 * u, kPackedQ2KQuants + (u * 16 + r) * 4, 4);
    return;
  }
  if (type == DType::Q3_K) {
    f(offsetof(BlockQ3_K, d), 2 * r, 2);
    for (int64_t i = 0; i < 12; ++i) f(offsetof(BlockQ3_K, scales) + i, kPackedQ3KScales + 16 * i + r, 1);
    for (int64_t c = 0; c < 8; ++c) f(offsetof(BlockQ3_K, hmask) + 4 * c, kPackedQ3KHigh + (c * 16 + r) * 4, 4);
    for (int64_t u = 0; u < 16; ++u) f(offsetof(BlockQ3_K, qs) + 4 * u, kPackedQ3KQuants + (u * 16 + r) * 4, 4);
    return;
  }
  f(0, 2 * r, 2);  // d
  if (type == DType::IQ4_XS) {
    for (int64_t i = 0; i < 2; ++i) f(2 + i, kPackedIQ4XSScalesHigh + 16 * i + r, 1);
    for (int64_t i = 0; i < 4; ++i) f(4 + i, kPackedIQ4XSScalesLow + 16 * i + r, 1);
    for (int64_t u = 0; u < 32; ++u) f(8 + 4 * u, kPackedIQ4XSQuants + (u * 16 + r) * 4, 4);
    return;
  }
  f(2, 32 + 2 * r, 2);  // dmin
  for (int64_t i = 0; i < 12; ++i) f(4 + i, kPackedQ4KScales + 16 * i + r, 1);
  const int64_t qs = type == DType::Q5_K ? 48 : 16;
  const int64_t quants = type == DType::Q5_K ? kPackedQ5KQuants : kPackedQ4KQuants;
  for (int64_t u = 0; u < 32; ++u) f(qs + 4 * u, quants + (u * 16 + r) * 4, 4);
  if (type == DType::Q5_K) {
    for (int64_t c = 0; c < 8; ++c) f(16 + 4 * c, kPackedQ5KHigh + (c * 16 + r) * 4, 4);
  }
}

// The bytes of one section (a super-block of 16 rows) of the types for_each_section_piece moves.
size_t section_bytes(DType type) {
  switch (type) {
    case DType::Q2_K:
      return kPackedQ2KSection;
    case DType::Q3_K:
      return kPackedQ3KSection;
    case DType::Q5_K:
      return kPackedQ5KSection;
    case DType::IQ4_XS:
      return kPackedIQ4XSSection;
    default:
      return kPackedQ4KSection;
  }
}

// The 256 6-bit stored values (q + 32) of a q6_k block, in element order (quant_blocks.h):
// element 128n + 32t + l takes the low (t < 2) or high nibble of ql[64n + 32 (t % 2) + l] and bits
// 2t of qh[32n + l].
void q6_k_values(const BlockQ6_K& block, uint8_t* values) {
  for (int n = 0; n < 2; ++n) {
    for (int t = 0; t < 4; ++t) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t ql = block.ql[64 * n + 32 * (t % 2) + l];
        const int low = t < 2 ? ql & 15 : ql >> 4;
        const int top = block.qh[32 * n + l] >> (2 * t) & 3;
        values[128 * n + 32 * t + l] = static_cast<uint8_t>(low | top << 4);
      }
    }
  }
}
void set_q6_k_values(const uint8_t* values, BlockQ6_K& block) {
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = values + 128 * n + l;  // v[32 t]: element 128n + 32t + l
      block.ql[64 * n + l] = static_cast<uint8_t>((v[0] & 15) | (v[64] & 15) << 4);
      block.ql[64 * n + 32 + l] = static_cast<uint8_t>((v[32] & 15) | (v[96] & 15) << 4);
      block.qh[32 * n + l] =
          static_cast<uint8_t>(v[0] >> 4 | (v[32] >> 4) << 2 | (v[64] >> 4) << 4 | (v[96] >> 4) << 6);
    }
  }
}

// Row r's places in a q6_k section: f(at, element) for each quant byte, with at[p] its offset in
// piece p (A, B, C) and element[t] the element of its e_t; g(j, at) for each scale j.
template <class F, class G>
void for_each_q6_k_place(int64_t r, F&& f, G&& g) {
  for (int64_t q = 0; q < 4; ++q) {
    const int64_t n = q / 2, h = q % 2;
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t k = 0; k < 4; ++k) {
        int64_t at[3], element[4];
        for (int64_t p = 0; p < 3; ++p) at[p] = kPackedQ6KQuants + q * kPackedQ6KQuad + 192 * i + 64 * p + 4 * r + k;
        for (int64_t t = 0; t < 4; ++t) element[t] = 128 * n + 32 * t + 4 * (4 * h + i) + k;
        f(at, element);
      }
    }
  }
  for (int64_t j = 0; j < 16; ++j) {
    const int64_t n = j / 8, t = j % 8 / 2, h = j % 2;
    g(j, kPackedQ6KScales + 64 * (2 * n + h) + 16 * t + r);
  }
}

// Row r's q6_k block (standard bytes) into its group's section, and back.
void pack_q6_k_block(int64_t r, const uint8_t* block_bytes, uint8_t* section) {
  BlockQ6_K block;
  std::memcpy(&block, block_bytes, sizeof block);
  uint8_t values[kQK_K];
  q6_k_values(block, values);
  for_each_q6_k_place(
      r,
      [&](const int64_t(&at)[3], const int64_t(&element)[4]) {
        const int e3 = values[element[3]];
        for (int p = 0; p < 3; ++p)
          section[at[p]] = static_cast<uint8_t>(values[element[p]] | (e3 >> (2 * p) & 3) << 6);
      },
      [&](int64_t j, int64_t at) { section[at] = static_cast<uint8_t>(block.scales[j]); });
  std::memcpy(section + 2 * r, &block.d, 2);
}
void unpack_q6_k_block(int64_t r, const uint8_t* section, uint8_t* block_bytes) {
  BlockQ6_K block;
  uint8_t values[kQK_K];
  for_each_q6_k_place(
      r,
      [&](const int64_t(&at)[3], const int64_t(&element)[4]) {
        for (int p = 0; p < 3; ++p) values[element[p]] = section[at[p]] & 0x3F;
        values[element[3]] =
            static_cast<uint8_t>(section[at[0]] >> 6 | (section[at[1]] >> 6) << 2 | (section[at[2]] >> 6) << 4);
      },
      [&](int64_t j, int64_t at) { block.scales[j] = static_cast<int8_t>(section[at]); });
  set_q6_k_values(values, block);
  std::memcpy(&block.d, section + 2 * r, 2);
  std::memcpy(block_bytes, &block, sizeof block);
}

// The float types' groups are their rows' units side by side, [K / per unit][16][unit bytes]: bf16
// a pair of elements (4 bytes, what one vdpbf16ps lane takes), f16 and f32 one element.
size_t float_unit_bytes(DType type) {
  return type == DType::F16 ? 2 : 4;
}
int64_t float_units(DType type, int64_t K) {
  return type == DType::BF16 ? K / 2 : K;
}

}  // namespace

void pack_group(DType type, const uint8_t* rows, size_t row_bytes, int64_t K, uint8_t* group) {
  if (is_packed_float(type)) {
    const size_t bytes = float_unit_bytes(type);
    for (int64_t r = 0; r < kPackedRows; ++r) {
      for (int64_t u = 0; u < float_units(type, K); ++u) {
        std::memcpy(group + static_cast<size_t>(u * kPackedRows + r) * bytes,
                    rows + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(u) * bytes, bytes);
      }
    }
    return;
  }
  if (is_packed_super_block(type)) {
    for (int64_t r = 0; r < kPackedRows; ++r) {
      for (int64_t g = 0; g < K / kQK_K; ++g) {
        if (type != DType::Q6_K) {
          const size_t bytes = section_bytes(type);
          const uint8_t* block = rows + static_cast<size_t>(r) * row_bytes + g * bytes / kPackedRows;
          uint8_t* section = group + g * bytes;
          for_each_section_piece(type, r,
                                 [&](int64_t at, int64_t to, size_t n) { std::memcpy(section + to, block + at, n); });
        } else {
          pack_q6_k_block(r, rows + static_cast<size_t>(r) * row_bytes + g * sizeof(BlockQ6_K),
                          group + g * kPackedQ6KSection);
        }
      }
    }
    return;
  }
  const int64_t blocks = K / 32;
  const int64_t factor_bytes = packed_block_factor_bytes(type), high_bytes = packed_block_high_bytes(type);
  const int64_t quant_bytes = packed_block_quant_bytes(type);
  for (int64_t r = 0; r < kPackedRows; ++r) {
    const uint8_t* row = rows + static_cast<size_t>(r) * row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * row_block_bytes(type);
      for (int64_t f = 0; f < factor_bytes / 2; ++f)  // d, then m in the mins' region
        std::memcpy(group + ((f * blocks + b) * kPackedRows + r) * 2, block + 2 * f, 2);
      uint8_t* quants = group + packed_block_quants_at(type, blocks, b);
      if (high_bytes != 0) {
        uint32_t bits = 0;
        std::memcpy(&bits, block + factor_bytes, 4);
        pack_fifth_bits(bits, r, quants);
      }
      for (int64_t i = 0; i < quant_bytes; ++i) {
        quants[kPackedRows * high_bytes + (i / 4 * kPackedRows + r) * 4 + i % 4] = block[factor_bytes + high_bytes + i];
      }
    }
  }
}

void unpack_group_row(DType type, const uint8_t* group, int64_t K, int64_t r, uint8_t* row) {
  if (is_packed_float(type)) {
    const size_t bytes = float_unit_bytes(type);
    for (int64_t u = 0; u < float_units(type, K); ++u)
      std::memcpy(row + static_cast<size_t>(u) * bytes, group + static_cast<size_t>(u * kPackedRows + r) * bytes,
                  bytes);
    return;
  }
  if (is_packed_super_block(type) && type != DType::Q6_K) {
    const size_t bytes = section_bytes(type);
    for (int64_t g = 0; g < K / kQK_K; ++g) {
      uint8_t* block = row + g * bytes / kPackedRows;
      const uint8_t* section = group + g * bytes;
      for_each_section_piece(type, r,
                             [&](int64_t at, int64_t from, size_t n) { std::memcpy(block + at, section + from, n); });
    }
    return;
  }
  if (type == DType::Q6_K) {
    for (int64_t g = 0; g < K / kQK_K; ++g)
      unpack_q6_k_block(r, group + g * kPackedQ6KSection, row + g * sizeof(BlockQ6_K));
    return;
  }
  const int64_t blocks = K / 32;
  const int64_t factor_bytes = packed_block_factor_bytes(type), high_bytes = packed_block_high_bytes(type);
  const int64_t quant_bytes = packed_block_quant_bytes(type);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* block = row + b * row_block_bytes(type);
    for (int64_t f = 0; f < factor_bytes / 2; ++f)
      std::memcpy(block + 2 * f, group + ((f * blocks + b) * kPackedRows + r) * 2, 2);
    const uint8_t* quants = group + packed_block_quants_at(type, blocks, b);
    if (high_bytes != 0) {
      const uint32_t bits = unpack_fifth_bits(quants, r);
      std::memcpy(block + factor_bytes, &bits, 4);
    }
    for (int64_t i = 0; i < quant_bytes; ++i)
      block[factor_bytes + high_bytes + i] = quants[kPackedRows * high_bytes + (i / 4 * kPackedRows + r) * 4 + i % 4];
  }
}

}  // namespace ferry::kernels::cpu
