// A block type's bytes to its quants in 256-bit registers, 32 at a time: the pieces the matmul
// loops of simd_blocks.h and the AMX unpackers (amx.cpp) share. Include only from inside an ISA
// file's target region; templates on the ISA's traits type S, so each ISA gets its own
// instantiation compiled for its instruction set.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"  // kIq4NlValues

namespace ferry::kernels::cpu::blocks {

template <class S>
inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

template <class S>
inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

template <class S>
inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 bytes of nibbles to 32 bytes: the low nibbles (elements 0..15), then the high ones (16..31).
template <class S>
inline __m256i nibbles(const uint8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

// Byte i = 0x10 where bit i of the 32 bits is set, else 0 (q5_0 / q5_1's fifth bits).
template <class S>
inline __m256i fifth_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}

// iq4_nl / iq4_xs indices (bytes 0..15) to their signed values.
template <class S>
inline __m256i iq4_values(__m256i indices) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
  return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), indices);
}

}  // namespace ferry::kernels::cpu::blocks
