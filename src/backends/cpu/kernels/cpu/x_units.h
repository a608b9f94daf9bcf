// x's rows cut into the folded panels' 4-byte units (avx512_folded.cpp, avx_vnni_folded.cpp): 8
// units of up to 8 rows at once, by a transpose of 8 x 8 int32 (24 shuffles where a gather per unit
// took 8 loads and its own micro-ops). Include only from inside a target region with AVX2, after
// x86_intrinsics.h; the function is in an unnamed namespace, so each including file gets its own
// copy compiled for its target.
#pragma once

#include <cstdint>

namespace ferry::kernels::cpu {
namespace {  // NOLINT(google-build-namespaces): one copy per target, as said above

// units[k] = bytes 4k..4k + 3 of x's rows 0..rows - 1 (K apart, 32 bytes each read) in int32 lanes
// 0..rows - 1, lanes from rows on zero.
inline void x_units_8x8(const int8_t* x, int64_t K, int64_t rows, __m256i (&units)[8]) {
  __m256i row[8];
  for (int r = 0; r < 8; ++r) {
    row[r] = r < rows ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * K)) : _mm256_setzero_si256();
  }
  __m256i pair[8];  // rows 2i, 2i + 1 interleaved: units 0, 1 | 4, 5 (even i) and 2, 3 | 6, 7
  for (int i = 0; i < 4; ++i) {
    pair[2 * i] = _mm256_unpacklo_epi32(row[2 * i], row[2 * i + 1]);
    pair[2 * i + 1] = _mm256_unpackhi_epi32(row[2 * i], row[2 * i + 1]);
  }
  __m256i quad[8];  // rows 0-3 (q < 4) or 4-7 of unit q % 4 | q % 4 + 4
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 2; ++i) {
      quad[4 * h + 2 * i] = _mm256_unpacklo_epi64(pair[4 * h + i], pair[4 * h + 2 + i]);
      quad[4 * h + 2 * i + 1] = _mm256_unpackhi_epi64(pair[4 * h + i], pair[4 * h + 2 + i]);
    }
  }
  for (int k = 0; k < 4; ++k) {
    units[k] = _mm256_permute2x128_si256(quad[k], quad[4 + k], 0x20);
    units[k + 4] = _mm256_permute2x128_si256(quad[k], quad[4 + k], 0x31);
  }
}

}  // namespace
}  // namespace ferry::kernels::cpu
