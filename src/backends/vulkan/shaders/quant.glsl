// Reading weights of any stored type from the word array `w` (declared by the includer) at byte
// offsets: types 0 f32, 1 f16, 2 bf16, 3 q8_0 (blocks of 32: f16 scale, 32 int8), 4 q4_0 (blocks
// of 32: f16 scale, 16 bytes of nibbles; element j is the low nibble of byte j, j + 16 the high).
// Byte addressing keeps rows of 34- and 18-byte blocks readable without 8- or 16-bit storage.
uint w_byte(uint byte_index) { return (w[byte_index >> 2] >> ((byte_index & 3u) * 8u)) & 0xffu; }
uint w_u16(uint byte_index) {
  if ((byte_index & 3u) == 0u) return w[byte_index >> 2] & 0xffffu;
  if ((byte_index & 3u) == 2u) return w[byte_index >> 2] >> 16;
  return w_byte(byte_index) | (w_byte(byte_index + 1u) << 8);
}
float w_f16(uint byte_index) { return unpackHalf2x16(w_u16(byte_index)).x; }
float w_bf16(uint byte_index) { return uintBitsToFloat(w_u16(byte_index) << 16); }
float w_i8(uint byte_index) {
  int v = int(w_byte(byte_index));
  return float(v >= 128 ? v - 256 : v);
}

// Bytes of one row of k elements.
uint w_row_bytes(uint type, uint k) {
  if (type == 0u) return k * 4u;
  if (type == 1u || type == 2u) return k * 2u;
  if (type == 3u) return k / 32u * 34u;
  return k / 32u * 18u;
}

// Element i of the row starting at byte `row` (any type).
float w_at(uint type, uint row, uint i) {
  if (type == 0u) return uintBitsToFloat(w[(row >> 2) + i]);
  if (type == 1u) return w_f16(row + i * 2u);
  if (type == 2u) return w_bf16(row + i * 2u);
  const uint block = row + (i / 32u) * (type == 3u ? 34u : 18u);
  const float d = w_f16(block);
  const uint j = i % 32u;
  if (type == 3u) return d * w_i8(block + 2u + j);
  const uint b = w_byte(block + 2u + (j & 15u));
  return d * (float(j < 16u ? (b & 15u) : (b >> 4)) - 8.0);
}
