// The CPU backend's repacked weight layout (Layout::Packed): q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl,
// q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs, bf16, f16 and f32 matrices with N a multiple of 16, reordered at load so that
// dot products read sixteen rows at once. The bits are the rows' own, only moved (bytes, except q5_0 / q5_1's fifth
// bits and q6_k's quants): a group of 16 rows takes 16 * row_bytes, as the rows did.
//
// bf16: a group is units of 4 bytes, [K / 2][16][4]: unit u of row r at (u * 16 + r) * 4, the
//   row's elements 2u and 2u + 1 (what one lane of vdpbf16ps takes, the rows in its 16 lanes).
// f16 and f32: a group is the rows' elements, [K][16]: element k of row r at (k * 16 + r) * 2 (f32:
//   * 4), so 64 bytes (f32: 128) are elements 2u and 2u + 1 of the 16 rows (f16: each half what one
//   vcvtph2ps widens).
//
// q8_0, q4_0 and iq4_nl: a group is
//   scales: [K / 32][16] f16, block b's scale of row r at b * 16 + r;
//   quants: units of 4 bytes, [K / 4 (q8_0) or K / 8 (q4_0, iq4_nl)][16][4]: unit u of row r at
//           (u * 16 + r) * 4, the row's block bytes 4u..4u+3 in order.
//     q8_0: unit u holds quants 4u..4u+3 of the row (signed, as stored).
//     q4_0, iq4_nl: unit u = 4b + c holds bytes 4c..4c+3 of block b's nibbles: elements 32b + 4c + i
//           in the low nibbles and 32b + 16 + 4c + i in the high ones (q + 8, or iq4_nl's table
//           index, as stored).
// q4_1, q5_0 and q5_1: q4_0's, with
//   mins (q4_1, q5_1): [K / 32][16] f16, block b's m of row r at K / 32 * 32 + (b * 16 + r) * 2;
//   quants: per block (at K / 32 * (32 or 64) + b * (256 or 320)), q5_0 / q5_1 first a unit of the
//           block's fifth bits, [16][4]: bit 2c + h of byte i of row r's four is the fifth bit of
//           its element 4c + i + 16h (the element in byte i of its unit c, low (h = 0) or high
//           nibble); then q4_0's 4 units of the block (the low four bits of q + 16, or of q).
// q2_k: a group is its super-blocks' sections, [K / 256][kPackedQ2KSection], each
//   d:      [16] f16 at 0;
//   dmin:   [16] f16 at 32;
//   scales: the 16 scale bytes as 16 planes of 16 at 64: byte j of row r at 64 + 16 j + r (sub-block
//           j's sc in the low nibble, m in the high one);
//   quants: [16][16][4] at 320: unit u = 8n + c of row r at 320 + (u * 16 + r) * 4, the row's qs
//           bytes 32n + 4c..+3, whose bits 2t, 2t + 1 are element 128n + 32t + 4c + i (sub-block
//           8n + 2t + c / 4).
// q3_k: a group is its super-blocks' sections, [K / 256][kPackedQ3KSection], each
//   d:      [16] f16 at 0;
//   scales: the 12 packed scale bytes as 12 planes of 16 at 32: byte i of row r at 32 + 16 i + r;
//   hmask:  [8][16][4] at 224: unit c of row r at 224 + (c * 16 + r) * 4, the row's hmask bytes
//           4c..4c+3, whose bit 4n + t is the third bit of element 128n + 32t + 4c + i (ggml);
//   quants: [16][16][4] at 736: unit u = 8n + c of row r at 736 + (u * 16 + r) * 4, the row's qs
//           bytes 32n + 4c..+3, whose bits 2t, 2t + 1 are the low two of element 128n + 32t + 4c + i
//           (sub-block 8n + 2t + c / 4).
// q4_k: a group is its super-blocks' sections, [K / 256][kPackedQ4KSection], each
//   d:      [16] f16 at 0, row r's at 2r;
//   dmin:   [16] f16 at 32;
//   scales: the 12 packed scale bytes as 12 planes of 16 at 64: byte i of row r at 64 + 16 i + r;
//   quants: [32][16][4] at 256: unit u of row r at 256 + (u * 16 + r) * 4, the row's qs bytes
//           4u..4u+3: unit u = 8p + c holds elements 64p + 4c + i in the low nibbles (sub-block
//           2p) and 64p + 32 + 4c + i in the high ones (sub-block 2p + 1).
// q5_k: sections of kPackedQ5KSection: d, dmin and the scale planes as q4_k's, then
//   qh:     [8][16][4] at 256: unit c of row r at 256 + (c * 16 + r) * 4, the row's qh bytes
//           4c..4c+3, whose bits 2p and 2p + 1 are the fifth bits of quant unit 8p + c's low and
//           high nibbles (ggml: qh[l] bit 2p of element 64p + l, bit 2p + 1 of 64p + 32 + l);
//   quants: q4_k's units at 768, so a section is read in order.
// q6_k: a group is its super-blocks' sections, [K / 256][kPackedQ6KSection], each
//   d:      [16] f16 at 0;
//   scales: the 16 int8 scales as 16 planes of 16 at 32, in the order the quads below take them:
//           scale j = 8n + 2t + h of row r at 32 + 64 (2n + h) + 16 t + r;
//   quants: 4 quads (q = 2n + h) of 768 bytes at 288 + 768 q, each 4 units of three 64-byte
//           pieces A, B, C [4][3][16][4]: piece p of unit i of row r at 192 i + 64 p + 4 r. With
//           c = 4h + i and e_t(k) the 6-bit stored value (q + 32: ggml's ql nibble | qh bits << 4)
//           of element 128n + 32t + 4c + k (sub-block 8n + 2t + h), byte k of row r's four holds
//             A: e_0(k) | (e_3(k) & 3) << 6,  B: e_1(k) | (e_3(k) >> 2 & 3) << 6,
//             C: e_2(k) | (e_3(k) >> 4) << 6,
//           so that three of the four values are a mask away and the fourth a few shifts.
//   Decode reads a section's quads in order, each unit's three pieces one after another.
// iq4_xs: a group is its super-blocks' sections, [K / 256][kPackedIQ4XSSection], each
//   d:        [16] f16 at 0;
//   scales_h: the 2 bytes of scales_h as 2 planes of 16 at 32: byte i of row r at 32 + 16 i + r
//             (chunks 4i..4i+3's top 2 bits, chunk j's at bits 2 (j % 4));
//   scales_l: the 4 bytes as 4 planes of 16 at 64: byte i of row r at 64 + 16 i + r (chunk 2i's
//             low 4 bits in the low nibble, chunk 2i + 1's in the high one);
//   quants:   [32][16][4] at 128: unit u of row r at 128 + (u * 16 + r) * 4, the row's qs bytes
//             4u..4u+3: unit u = 4j + c holds chunk j's elements 32j + 4c + i in the low nibbles
//             and 32j + 16 + 4c + i in the high ones (iq4_nl's units, the chunk as the block).
// So 64 bytes of quants are one 4-byte unit of each of the 16 rows: what vpdpbusd takes with the
// rows in its 16 lanes, and (nibbles split) a row of an AMX B tile (amx.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ferry::kernels::cpu {

inline constexpr int64_t kPackedRows = 16;
// One q2_k super-block of a group's 16 rows: d, dmin, the scale planes, the qs units.
inline constexpr int64_t kPackedQ2KSection = 16 * sizeof(BlockQ2_K);
inline constexpr int64_t kPackedQ2KScales = 64;
inline constexpr int64_t kPackedQ2KQuants = kPackedQ2KScales + 16 * 16;
static_assert(kPackedQ2KQuants + 16 * 64 == kPackedQ2KSection, "d, dmin, 16 scale planes, 16 qs units");
// One q3_k super-block of a group's 16 rows: d, the scale planes, the hmask units, the qs units.
inline constexpr int64_t kPackedQ3KSection = 16 * sizeof(BlockQ3_K);
inline constexpr int64_t kPackedQ3KScales = 32;
inline constexpr int64_t kPackedQ3KHigh = 224;
inline constexpr int64_t kPackedQ3KQuants = kPackedQ3KHigh + 8 * 64;
static_assert(kPackedQ3KQuants + 16 * 64 == kPackedQ3KSection, "d, 12 scale planes, 8 hmask units, 16 qs units");
// One q4_k super-block of a group's 16 rows: d, dmin, the scale planes, the quant units.
inline constexpr int64_t kPackedQ4KSection = 16 * sizeof(BlockQ4_K);
inline constexpr int64_t kPackedQ4KScales = 64;
inline constexpr int64_t kPackedQ4KQuants = 256;
// One q6_k super-block of a group's 16 rows: d, the scale planes, four quads of quant units.
inline constexpr int64_t kPackedQ6KSection = 16 * sizeof(BlockQ6_K);
inline constexpr int64_t kPackedQ6KScales = 32;
inline constexpr int64_t kPackedQ6KQuants = 288;
inline constexpr int64_t kPackedQ6KQuad = 768;
static_assert(kPackedQ6KQuants + 4 * kPackedQ6KQuad == kPackedQ6KSection, "d, scale planes, 4 quads");
// One q5_k super-block of a group's 16 rows: q4_k's factors, the qh units, q4_k's quant units.
inline constexpr int64_t kPackedQ5KSection = 16 * sizeof(BlockQ5_K);
inline constexpr int64_t kPackedQ5KHigh = kPackedQ4KQuants;
inline constexpr int64_t kPackedQ5KQuants = kPackedQ5KHigh + 8 * 64;
static_assert(kPackedQ5KQuants + 32 * 64 == kPackedQ5KSection, "factors, 8 qh units, 32 quant units");
// One iq4_xs super-block of a group's 16 rows: d, the scale planes, the quant units.
inline constexpr int64_t kPackedIQ4XSSection = 16 * sizeof(BlockIQ4_XS);
inline constexpr int64_t kPackedIQ4XSScalesHigh = 32;
inline constexpr int64_t kPackedIQ4XSScalesLow = 64;
inline constexpr int64_t kPackedIQ4XSQuants = 128;
static_assert(kPackedIQ4XSQuants + 32 * 64 == kPackedIQ4XSSection, "d, scale planes, 32 quant units");

// The types in blocks of 32 with an f16 scale first: q8_0, q4_0, q4_1, q5_0, q5_1 and iq4_nl.
constexpr bool is_packed_block_of_32(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::IQ4_NL;
}
// The super-blocks of 256 packed as sections of 16 rows: q2_k, q3_k, q4_k, q5_k, q6_k and iq4_xs.
constexpr bool is_packed_super_block(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ||
         t == DType::IQ4_XS;
}
// bf16, f16 and f32: the float types packed, in units of two elements of the 16 rows.
constexpr bool is_packed_float(DType t) {
  return t == DType::BF16 || t == DType::F16 || t == DType::F32;
}
constexpr bool is_packable_type(DType t) {
  return is_packed_block_of_32(t) || is_packed_super_block(t) || is_packed_float(t);
}
// The elements of K a packed row must come in: a block (32), a super-block (256) or a float unit's 2.
constexpr int64_t packed_k_multiple(DType t) {
  if (is_packed_float(t)) return 2;
  return is_packed_super_block(t) ? kQK_K : 32;
}
// The blocks of 32, per block of one row: the f16 factors (d; q4_1 and q5_1: d, m), the fifth bits
// (q5_0, q5_1: 4 bytes), the quant bytes (q8_0: 32, the others' nibbles 16); as stored and as the
// packed group's regions hold them.
constexpr int64_t packed_block_factor_bytes(DType t) {
  return t == DType::Q4_1 || t == DType::Q5_1 ? 4 : 2;
}
constexpr int64_t packed_block_high_bytes(DType t) {
  return t == DType::Q5_0 || t == DType::Q5_1 ? 4 : 0;
}
constexpr int64_t packed_block_quant_bytes(DType t) {
  return t == DType::Q8_0 ? 32 : 16;
}
// Where block b's quants (q5: its fifth bits' masks first) start in a group of `blocks` blocks.
constexpr int64_t packed_block_quants_at(DType t, int64_t blocks, int64_t b) {
  return blocks * kPackedRows * packed_block_factor_bytes(t) +
         b * kPackedRows * (packed_block_high_bytes(t) + packed_block_quant_bytes(t));
}

// The 16 rows at `rows` (row_bytes apart, standard rows of K elements of a packable type) into
// `group` (16 * row_bytes bytes, another buffer).
void pack_group(DType type, const uint8_t* rows, size_t row_bytes, int64_t K, uint8_t* group);
// Row r (0-15) of a packed group back to a standard row of K elements.
void unpack_group_row(DType type, const uint8_t* group, int64_t K, int64_t r, uint8_t* row);

}  // namespace ferry::kernels::cpu
