// Reading weights of any stored type from the word array `w` (declared by the includer) at byte
// offsets. The type codes (lowering.cpp's weight_code) follow core/dtype.h, whose comments give each
// block layout: 0 f32, 1 f16, 2 bf16, then the block types of 32 elements 3 q8_0, 4 q4_0, 5 q4_1,
// 6 q5_0, 7 q5_1, 8 iq4_nl, and of 256 elements 9 q2_k, 10 q3_k, 11 q4_k, 12 q5_k, 13 q6_k,
// 14 iq4_xs. Byte addressing keeps rows of 18-, 34-, 110-byte ... blocks readable without 8- or
// 16-bit storage. A value is d * q (+ m) for the 32-element types and d * sc * q - dmin * m for the
// 256-element ones, q an integer quant and sc, m small integer scales and mins per 16 elements.
const uint kQ8_0 = 3u, kQ4_0 = 4u, kQ4_1 = 5u, kQ5_0 = 6u, kQ5_1 = 7u, kIQ4_NL = 8u;
const uint kQ2_K = 9u, kQ3_K = 10u, kQ4_K = 11u, kQ5_K = 12u, kQ6_K = 13u, kIQ4_XS = 14u;

// The 16 values of iq4_nl and iq4_xs quants (core/dtype.h's kIq4NlValues: -127, -104, -83, -65,
// -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113), four int8 to a word.
const uint kIq4Nl[4] = uint[4](0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
int iq4_value(uint n) { return bitfieldExtract(int(kIq4Nl[n >> 2]), int((n & 3u) * 8u), 8); }

uint w_byte(uint byte_index) { return (w[byte_index >> 2] >> ((byte_index & 3u) * 8u)) & 0xffu; }
uint w_u16(uint byte_index) {
  if ((byte_index & 3u) == 0u) return w[byte_index >> 2] & 0xffffu;
  if ((byte_index & 3u) == 2u) return w[byte_index >> 2] >> 16;
  return w_byte(byte_index) | (w_byte(byte_index + 1u) << 8);
}
float w_f16(uint byte_index) { return unpackHalf2x16(w_u16(byte_index)).x; }
float w_bf16(uint byte_index) { return uintBitsToFloat(w_u16(byte_index) << 16); }
int w_s8(uint byte_index) { return bitfieldExtract(int(w_byte(byte_index)), 0, 8); }

// Elements and bytes of one block of a block type (3 and up).
uint w_block_size(uint type) { return type >= kQ2_K ? 256u : 32u; }
uint w_block_bytes(uint type) {
  switch (type) {
    case kQ8_0: return 34u;
    case kQ4_1: return 20u;
    case kQ5_0: return 22u;
    case kQ5_1: return 24u;
    case kQ2_K: return 84u;
    case kQ3_K: return 110u;
    case kQ4_K: return 144u;
    case kQ5_K: return 176u;
    case kQ6_K: return 210u;
    case kIQ4_XS: return 136u;
    default: return 18u;  // q4_0, iq4_nl
  }
}

// Bytes of one row of k elements.
uint w_row_bytes(uint type, uint k) {
  if (type == 0u) return k * 4u;
  if (type == 1u || type == 2u) return k * 2u;
  return k / w_block_size(type) * w_block_bytes(type);
}

// Quant e of the block at byte b, as the integer its value multiplies: q4_0 less 8, q5_0 less 16,
// q3_k less 4 where its high bit is clear, q6_k less 32, iq4 from the table.
int w_quant(uint type, uint b, uint e) {
  // The 256-element types: half h of 128, chunk c of 32 in it, l in the chunk.
  const uint h = e / 128u, c = (e % 128u) / 32u, l = e % 32u;
  switch (type) {
    case kQ8_0: return w_s8(b + 2u + e);
    case kQ4_0:
    case kQ4_1:
    case kIQ4_NL: {
      // Element j < 16 is the low nibble of byte j, j + 16 its high nibble.
      const uint n = (w_byte(b + (type == kQ4_1 ? 4u : 2u) + (e & 15u)) >> ((e >> 4) * 4u)) & 15u;
      if (type == kIQ4_NL) return iq4_value(n);
      return int(n) - (type == kQ4_0 ? 8 : 0);
    }
    case kQ5_0:
    case kQ5_1: {
      const uint qh = type == kQ5_0 ? b + 2u : b + 4u;  // bit e of the little-endian u32 there
      const uint n = (w_byte(qh + 4u + (e & 15u)) >> ((e >> 4) * 4u)) & 15u;
      const uint high = (w_byte(qh + e / 8u) >> (e % 8u)) & 1u;
      return int(n | (high << 4)) - (type == kQ5_0 ? 16 : 0);
    }
    case kQ2_K: return int((w_byte(b + 16u + 32u * h + l) >> (2u * c)) & 3u);
    case kQ3_K: {
      const uint low = (w_byte(b + 32u + 32u * h + l) >> (2u * c)) & 3u;
      const uint high = (w_byte(b + l) >> (4u * h + c)) & 1u;
      return int(low) - (high != 0u ? 0 : 4);
    }
    case kQ4_K:
    case kQ5_K: {
      // Sub-block j = e / 32: the low nibble of qs[32 (j / 2) + l] for even j, the high for odd.
      const uint j = e / 32u;
      const uint byte = w_byte(b + (type == kQ5_K ? 48u : 16u) + 32u * (j / 2u) + l);
      uint q = (j & 1u) == 0u ? byte & 15u : byte >> 4;
      if (type == kQ5_K) q |= ((w_byte(b + 16u + l) >> j) & 1u) << 4;
      return int(q);
    }
    case kQ6_K: {
      const uint low_byte = w_byte(b + 64u * h + 32u * (c % 2u) + l);
      const uint low = c < 2u ? low_byte & 15u : low_byte >> 4;
      const uint high = (w_byte(b + 128u + 32u * h + l) >> (2u * c)) & 3u;
      return int(low | (high << 4)) - 32;
    }
    case kIQ4_XS: {
      return iq4_value((w_byte(b + 8u + 16u * (e / 32u) + (l & 15u)) >> ((l >> 4) * 4u)) & 15u);
    }
    default: return 0;
  }
}

// (d, m) of a 32-element block (m 0 for the types without a min); (d, dmin) of a super-block (dmin
// 0 for the types without mins).
vec2 w_scales(uint type, uint b) {
  switch (type) {
    case kQ4_1:
    case kQ5_1:
    case kQ4_K:
    case kQ5_K: return vec2(w_f16(b), w_f16(b + 2u));
    case kQ2_K: return vec2(w_f16(b + 80u), w_f16(b + 82u));
    case kQ3_K: return vec2(w_f16(b + 108u), 0.0);
    case kQ6_K: return vec2(w_f16(b + 208u), 0.0);
    default: return vec2(w_f16(b), 0.0);  // q8_0, q4_0, q5_0, iq4_nl, iq4_xs
  }
}

// (sc, m) of the 16-element sub-block s of a super-block at byte b: the integers d and dmin
// multiply (the 32-element sub-block types repeat theirs over both halves).
ivec2 w_scale_min(uint type, uint b, uint s) {
  switch (type) {
    case kQ2_K: {
      const uint v = w_byte(b + s);
      return ivec2(int(v & 15u), int(v >> 4));
    }
    case kQ3_K: {
      // 6-bit scales: low 4 bits in the nibbles of bytes [0, 8), high 2 bits in bytes [8, 12).
      const uint low = s < 8u ? w_byte(b + 96u + s) & 15u : w_byte(b + 88u + s) >> 4;
      const uint high = (w_byte(b + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
      return ivec2(int(low | (high << 4)) - 32, 0);
    }
    case kQ4_K:
    case kQ5_K: {
      // ggml's get_scale_min_k4 of sub-block j from the 12 bytes at b + 4.
      const uint j = s / 2u, p = b + 4u;
      if (j < 4u) return ivec2(int(w_byte(p + j) & 63u), int(w_byte(p + j + 4u) & 63u));
      const uint mid = w_byte(p + j + 4u);
      const uint sc = (mid & 15u) | ((w_byte(p + j - 4u) >> 6) << 4);
      const uint m = (mid >> 4) | ((w_byte(p + j) >> 6) << 4);
      return ivec2(int(sc), int(m));
    }
    case kQ6_K: return ivec2(w_s8(b + 192u + s), 0);
    case kIQ4_XS: {
      const uint j = s / 2u;
      const uint low = (w_byte(b + 4u + j / 2u) >> (4u * (j % 2u))) & 15u;
      const uint high = (w_u16(b + 2u) >> (2u * j)) & 3u;
      return ivec2(int(low | (high << 4)) - 32, 0);
    }
    default: return ivec2(1, 0);
  }
}

// Element i of the row starting at byte `row` of f32, f16 or bf16.
float w_at_plain(uint type, uint row, uint i) {
  if (type == 0u) return uintBitsToFloat(w[(row >> 2) + i]);
  if (type == 1u) return w_f16(row + i * 2u);
  return w_bf16(row + i * 2u);
}

// Element i of the row starting at byte `row` (any type): the float operations of the CPU's
// dequantization in its order (quant_blocks.cpp), uncontracted, so every value is bit-identical.
float w_at(uint type, uint row, uint i) {
  if (type <= 2u) return w_at_plain(type, row, i);
  const uint size = w_block_size(type);
  const uint b = row + (i / size) * w_block_bytes(type);
  const uint e = i % size;
  const float q = float(w_quant(type, b, e));
  const vec2 d = w_scales(type, b);
  if (size == 32u) {
    if (type == kQ4_1 || type == kQ5_1) {
      precise float v = q * d.x + d.y;
      return v;
    }
    return q * d.x;
  }
  const ivec2 sm = w_scale_min(type, b, e / 16u);
  precise float dl = d.x * float(sm.x);
  precise float ml = d.y * float(sm.y);
  precise float v = dl * q - ml;
  return v;
}

// Decoding a group of 32 quants at once, for the matmul: the bytes it needs as words (a word read
// holds four of them), then integer operations. Kept beside w_quant, which reads one element;
// tests/vulkan compare both with the CPU on every bit pattern.

// The word of bytes [p, p + 4), and the 4 or 8 words from p: aligned word reads, shifted together
// where p is not a multiple of 4 (a word is read only when it holds wanted bytes).
uint w_u32(uint p) {
  const uint i = p >> 2, s = (p & 3u) * 8u;
  if (s == 0u) return w[i];
  return (w[i] >> s) | (w[i + 1u] << (32u - s));
}
void w_words4(uint p, out uint v[4]) {
  const uint i = p >> 2, s = (p & 3u) * 8u;
  if (s == 0u) {
    for (uint k = 0u; k < 4u; ++k) v[k] = w[i + k];
    return;
  }
  uint lo = w[i];
  for (uint k = 0u; k < 4u; ++k) {
    const uint hi = w[i + k + 1u];
    v[k] = (lo >> s) | (hi << (32u - s));
    lo = hi;
  }
}
void w_words8(uint p, out uint v[8]) {
  const uint i = p >> 2, s = (p & 3u) * 8u;
  if (s == 0u) {
    for (uint k = 0u; k < 8u; ++k) v[k] = w[i + k];
    return;
  }
  uint lo = w[i];
  for (uint k = 0u; k < 8u; ++k) {
    const uint hi = w[i + k + 1u];
    v[k] = (lo >> s) | (hi << (32u - s));
    lo = hi;
  }
}
uint byte4(uint v[4], uint j) { return (v[j >> 2] >> ((j & 3u) * 8u)) & 0xffu; }
uint byte8(uint v[8], uint j) { return (v[j >> 2] >> ((j & 3u) * 8u)) & 0xffu; }

// The 32 quants of a block of a 32-element type at byte b, as w_quant gives them.
void w_group32(uint type, uint b, out int q[32]) {
  if (type == kQ8_0) {
    uint v[8];
    w_words8(b + 2u, v);
    for (uint j = 0u; j < 32u; ++j) q[j] = bitfieldExtract(int(v[j >> 2]), int((j & 3u) * 8u), 8);
    return;
  }
  // qs at b + 2 (q4_0, iq4_nl), b + 4 (q4_1), b + 6 (q5_0), b + 8 (q5_1); q5's qh just before.
  const bool five = type == kQ5_0 || type == kQ5_1;
  const uint qs = b + (type == kQ4_1 ? 4u : type == kQ5_0 ? 6u : type == kQ5_1 ? 8u : 2u);
  const uint qh = five ? w_u32(qs - 4u) : 0u;
  uint v[4];
  w_words4(qs, v);
  for (uint j = 0u; j < 16u; ++j) {
    const uint byte = byte4(v, j);
    uint lo = byte & 15u, hi = byte >> 4;
    if (five) {
      lo |= ((qh >> j) & 1u) << 4;
      hi |= ((qh >> (j + 16u)) & 1u) << 4;
    }
    if (type == kIQ4_NL) {
      q[j] = iq4_value(lo);
      q[j + 16u] = iq4_value(hi);
    } else {
      const int offset = type == kQ4_0 ? 8 : type == kQ5_0 ? 16 : 0;
      q[j] = int(lo) - offset;
      q[j + 16u] = int(hi) - offset;
    }
  }
}

// The 32 quants of elements [32 g, 32 g + 32) of a super-block of a 256-element type at byte b,
// as w_quant gives them.
void w_group256(uint type, uint b, uint g, out int q[32]) {
  const uint h = g / 4u, c = g % 4u;  // half of 128, chunk of 32 in it
  uint v[8];
  if (type == kIQ4_XS) {
    uint u[4];
    w_words4(b + 8u + 16u * g, u);
    for (uint j = 0u; j < 16u; ++j) {
      const uint byte = byte4(u, j);
      q[j] = iq4_value(byte & 15u);
      q[j + 16u] = iq4_value(byte >> 4);
    }
    return;
  }
  if (type == kQ2_K || type == kQ3_K) {
    w_words8(b + (type == kQ2_K ? 16u : 32u) + 32u * h, v);
    for (uint l = 0u; l < 32u; ++l) q[l] = int((byte8(v, l) >> (2u * c)) & 3u);
    if (type == kQ3_K) {
      w_words8(b, v);  // hmask: bit 4 h + c of byte l
      for (uint l = 0u; l < 32u; ++l) q[l] -= ((byte8(v, l) >> (4u * h + c)) & 1u) != 0u ? 0 : 4;
    }
    return;
  }
  if (type == kQ4_K || type == kQ5_K) {
    w_words8(b + (type == kQ5_K ? 48u : 16u) + 32u * (g / 2u), v);
    for (uint l = 0u; l < 32u; ++l) q[l] = int((byte8(v, l) >> (4u * (g & 1u))) & 15u);
    if (type == kQ5_K) {
      w_words8(b + 16u, v);  // qh: bit g of byte l
      for (uint l = 0u; l < 32u; ++l) q[l] |= int((byte8(v, l) >> g) & 1u) << 4;
    }
    return;
  }
  // q6_k: low 4 bits from ql (low nibbles for chunks 0, 1, high for 2, 3), high 2 from qh.
  w_words8(b + 64u * h + 32u * (c % 2u), v);
  for (uint l = 0u; l < 32u; ++l) q[l] = int((byte8(v, l) >> (4u * (c / 2u))) & 15u);
  w_words8(b + 128u + 32u * h, v);
  for (uint l = 0u; l < 32u; ++l) q[l] = (q[l] | int(((byte8(v, l) >> (2u * c)) & 3u) << 4)) - 32;
}
