// Packed q8_0 and q4_0 (packed_weights.h) on 256-bit vectors, written once over B, for the avx2
// level (vpmaddubsw: avx2_packed.cpp) and avxvnni (vpdpbusd: avx_vnni.cpp); include inside the
// file's target region, after <cstdint>, <cstring>, packed_weights.h and x86_intrinsics.h. A group's
// 16 rows are two vectors (rows 0-7 and 8-15), x in rows (a.xq), each output's operations those of
// isa.h's contract: per block the exact integer dot product, then acc = fma(f32(dot), weight scale *
// x scale, acc) in increasing k, then acc + bias; so every level gives the same bits.
//   B::kVnni false (AVX2: no byte dot product into int32), per 4-byte unit of the rows vpmaddubsw
//     (unsigned by signed bytes, pairs summed into int16, saturating), then:
//       q8_0: |w| against x with w's signs moved onto it (vpsignb): pairs at most 2 * 128 * 127, no
//             saturation; widened to int32 by vpmaddwd against ones each unit, as a block's 8 units
//             could reach 2^18;
//       q4_0: the stored nibbles (q + 8) against x: pairs at most 2 * 15 * 127, so a block's 8 pair
//             sums stay in int16 (at most 30480) and are widened once per block.
//   B::kVnni true (B::dot: vpdpbusd, unsigned by signed bytes summed in fours into int32):
//       q8_0: x + 128 (a.xq_unsigned) against the signed weights, less 128 * (each row's block sum:
//             vpdpbusd of 128s against the weights, once per unit for every row of x);
//       q4_0: the stored nibbles against x.
//   q4_0 either way started from -8 * (x's block sum, a.xq_block_sum).
// Tiles of 4 rows of x by one group: the block's integer sums in registers, the f32 sums in the
// tile's memory (L1), one fma per block, row and vector.
#pragma once

namespace ferry::kernels::cpu {
namespace {
namespace packed_blocks_256 {

// Four bytes of x in every 32-bit lane.
inline __m256i broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Keeps v in a register as computed: GCC would otherwise reassociate a block's integer sums (plain
// vector adds to it) into a tree and keep the partial products on the stack.
inline void keep_order(__m256i& v) {
  __asm__("" : "+x"(v));
}

// G groups of 16 weight rows (group[g], outputs from n0[g]) against MR rows of x from m0, x in rows.
template <class B, DType T, int MR, int G>
void block_tile(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  const int64_t blocks = a.K / 32;
  constexpr int64_t kUnits = T == DType::Q8_0 ? 8 : 4;  // 64-byte units of quants per block
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(15);
  const __m256i bytes128 = _mm256_set1_epi8(static_cast<char>(0x80));
  // The f32 sums, in memory: the registers hold the block's integer ones.
  alignas(32) float acc[MR][G][16] = {};
  const int8_t* x = a.xq + m0 * a.K;
  [[maybe_unused]] const uint8_t* x_unsigned = B::kVnni && T == DType::Q8_0 ? a.xq_unsigned + m0 * a.K : nullptr;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int g = 0; g < G; ++g) {
      const uint8_t* unit = group[g] + packed_block_quants_at(T, blocks, b);
      __m256i dot[MR][2];
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) dot[m][0] = dot[m][1] = _mm256_setzero_si256();
      [[maybe_unused]] __m256i w_offset[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      auto unit_products = [&](int64_t c) {
        if (G > 1 && a.prefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(unit + c * 64 + kDecodePrefetchBytes), _MM_HINT_T0);
        }
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + c * 64 + v * 32));
          if constexpr (T == DType::Q8_0 && B::kVnni) {
            w_offset[v] = B::dot(w_offset[v], bytes128, w);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              dot[m][v] = B::dot(dot[m][v], broadcast4(x_unsigned + m * a.K + b * 32 + c * 4), w);
            }
          } else if constexpr (T == DType::Q8_0) {
            const __m256i magnitude = _mm256_abs_epi8(w);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const __m256i signed_x = _mm256_sign_epi8(broadcast4(x + m * a.K + b * 32 + c * 4), w);
              dot[m][v] =
                  _mm256_add_epi32(dot[m][v], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), ones16));
              keep_order(dot[m][v]);
            }
          } else {
            const __m256i low = _mm256_and_si256(w, low4);
            const __m256i high = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
#pragma GCC unroll 8
            for (int m = 0; m < MR; ++m) {
              const int8_t* xb = x + m * a.K + b * 32 + c * 4;
              if constexpr (B::kVnni) {
                dot[m][v] = B::dot(dot[m][v], low, broadcast4(xb));
                dot[m][v] = B::dot(dot[m][v], high, broadcast4(xb + 16));
              } else {
                dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(low, broadcast4(xb)));
                dot[m][v] = _mm256_add_epi16(dot[m][v], _mm256_maddubs_epi16(high, broadcast4(xb + 16)));
                keep_order(dot[m][v]);
              }
            }
          }
        }
      };
#pragma GCC unroll 8
      for (int64_t c = 0; c < kUnits; ++c) unit_products(c);
      const __m128i* scale_bits = reinterpret_cast<const __m128i*>(group[g] + b * 32);
      const __m256 w_scale[2] = {_mm256_cvtph_ps(_mm_loadu_si128(scale_bits)),
                                 _mm256_cvtph_ps(_mm_loadu_si128(scale_bits + 1))};
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const __m256 x_scale = _mm256_set1_ps(a.xq_scale[(m0 + m) * blocks + b]);
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
          __m256i sum = dot[m][v];
          if constexpr (T == DType::Q4_0) {
            if constexpr (!B::kVnni) sum = _mm256_madd_epi16(sum, ones16);
            sum = _mm256_add_epi32(_mm256_set1_epi32(-8 * a.xq_block_sum[(m0 + m) * blocks + b]), sum);
          } else if constexpr (B::kVnni) {
            sum = _mm256_sub_epi32(sum, w_offset[v]);
          }
          float* out = acc[m][g] + 8 * v;
          _mm256_store_ps(
              out, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(w_scale[v], x_scale), _mm256_load_ps(out)));
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int v = 0; v < 2; ++v) {
      const __m256 bias = a.bias != nullptr ? _mm256_loadu_ps(a.bias + n0[g] + 8 * v) : _mm256_setzero_ps();
      for (int m = 0; m < MR; ++m) {
        _mm256_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g] + 8 * v,
                         _mm256_add_ps(_mm256_load_ps(acc[m][g] + 8 * v), bias));
      }
    }
  }
}

// One row of x (decode): kStreams groups at once from kStreams equal parts of the range, as many
// sequential streams in flight, then the rest one group at a time. Batches: tiles of kTileRows
// rows against each group, the rows' rest in a smaller tile.
template <class B, DType T>
void packed_blocks(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  auto group_at = [&](int64_t n) { return a.w + static_cast<size_t>(n / kPackedRows) * group_bytes; };
  int64_t n = n_begin;
  if (a.M == 1) {
    constexpr int kStreams = 2;
    const int64_t part = (n_end - n_begin) / kPackedRows / kStreams * kPackedRows;
    for (int64_t i = 0; i < part; i += kPackedRows) {
      const int64_t n0[kStreams] = {n_begin + i, n_begin + part + i};
      const uint8_t* const group[kStreams] = {group_at(n0[0]), group_at(n0[1])};
      block_tile<B, T, 1, kStreams>(a, 0, group, n0);
    }
    n = n_begin + kStreams * part;
  }
  constexpr int64_t kTileRows = 4;
  for (; n < n_end; n += kPackedRows) {
    const int64_t n0[1] = {n};
    const uint8_t* const group[1] = {group_at(n)};
    int64_t m = 0;
    for (; m + kTileRows <= a.M; m += kTileRows) block_tile<B, T, kTileRows, 1>(a, m, group, n0);
    switch (a.M - m) {
      case 3:
        block_tile<B, T, 3, 1>(a, m, group, n0);
        break;
      case 2:
        block_tile<B, T, 2, 1>(a, m, group, n0);
        break;
      case 1:
        block_tile<B, T, 1, 1>(a, m, group, n0);
        break;
      default:
        break;
    }
  }
}

}  // namespace packed_blocks_256
}  // namespace
}  // namespace ferry::kernels::cpu
