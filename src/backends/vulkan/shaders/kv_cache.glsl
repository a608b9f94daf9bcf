// The KV cache's element types, as kv_store.comp writes them and attention.comp reads them: type
// codes 0 f32, 1 f16, 2 bf16, 3 q8_0 (blocks of 32 along each row: an f16 scale d, then 32 int8 q;
// the value is d * q). The caches are bound as 32-bit words and addressed by byte, as quant.glsl
// reads weights, so no 8- or 16-bit storage is needed. The conversions are integer arithmetic,
// bit for bit core/half.h's and ggml's (round to nearest even; no denormal flushing).

// Bytes of a cache row of w elements.
uint kv_row_bytes(uint type, uint w) {
  if (type == 0u) return w * 4u;
  if (type == 3u) return w / 32u * 34u;
  return w * 2u;
}

// f16 bits (low 16) to f32, exactly (f16 subnormals are normal f32 values).
float kv_f16_to_f32(uint h) {
  const uint sgn = (h & 0x8000u) << 16;
  uint e = (h >> 10) & 0x1fu;
  uint m = h & 0x3ffu;
  if (e == 0u) {
    if (m == 0u) return uintBitsToFloat(sgn);
    e = 113u;  // 127 - 15 + 1, then normalised
    while ((m & 0x400u) == 0u) {
      m <<= 1;
      e -= 1u;
    }
    return uintBitsToFloat(sgn | (e << 23) | ((m & 0x3ffu) << 13));
  }
  if (e == 0x1fu) return uintBitsToFloat(sgn | 0x7f800000u | (m << 13));
  return uintBitsToFloat(sgn | ((e + 112u) << 23) | (m << 13));
}

// f32 to f16 bits, round to nearest even, overflow to inf (core/half.h f32_to_f16).
uint kv_f32_to_f16(float f) {
  const uint bits = floatBitsToUint(f);
  const uint sgn = (bits >> 16) & 0x8000u;
  const uint a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return sgn | 0x7e00u;
  if (a >= 0x477ff000u) return sgn | 0x7c00u;
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return sgn;
    const uint shift = 126u - (a >> 23);
    const uint m = (a & 0x7fffffu) | 0x800000u;
    uint h = m >> shift;
    const uint rest = m & ((1u << shift) - 1u);
    const uint halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (h & 1u) != 0u)) h += 1u;
    return sgn | h;
  }
  uint h = (a >> 13) - (112u << 10);
  const uint rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0u)) h += 1u;
  return sgn | h;
}

// Half away from zero, as C's roundf (ggml's quantize_row_q8_0_ref).
float kv_round(float x) {
  const float t = trunc(x);
  return abs(x - t) >= 0.5 ? t + sign(x) : t;
}

// A cache reader over the word array BUF: NAME(type, row_byte, row_word, i) is element i of the
// row that starts at byte row_byte (row_word: the same row in words, for f32).
#define KV_READER(NAME, BUF)                                                  \
  uint NAME##_u16(uint b) {                                                   \
    const uint word = BUF[b >> 2];                                            \
    return (b & 2u) != 0u ? word >> 16 : word & 0xffffu;                      \
  }                                                                           \
  float NAME(uint type, uint row_byte, uint row_word, uint i) {               \
    if (type == 0u) return uintBitsToFloat(BUF[row_word + i]);                \
    if (type == 1u) return kv_f16_to_f32(NAME##_u16(row_byte + i * 2u));      \
    if (type == 2u) return uintBitsToFloat(NAME##_u16(row_byte + i * 2u) << 16); \
    const uint block = row_byte + (i / 32u) * 34u;                            \
    const uint qb = block + 2u + i % 32u;                                     \
    int q = int((BUF[qb >> 2] >> ((qb & 3u) * 8u)) & 0xffu);                  \
    q = q >= 128 ? q - 256 : q;                                               \
    return kv_f16_to_f32(NAME##_u16(block)) * float(q);                       \
  }
