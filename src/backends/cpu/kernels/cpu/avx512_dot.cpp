// The AVX-512 levels with dot-product instructions, each the avx512 level plus its own matmuls:
//   avx512vnni: the blocks of 32 (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, and iq4_xs's chunks)
//               against x rounded to q8_0 (q8_K) by vpdpbusd, two blocks per instruction (64 byte
//               products summed in fours, exact), where avx512 widens the bytes to int16 first and
//               takes one block per instruction; the k-quants by simd_blocks.h's code with the
//               scale products summed by vpdpwssd; the packed layouts' own loops, and batches of
//               packed k-quants by avx512_folded.cpp's panels;
//   avx512bf16: also bf16 weights against x rounded to bf16 by vdpbf16ps (32 products per
//               instruction, no widening), as llama.cpp multiplies bf16 weights on every CPU.
// Everything else (f32 activations, attention, conversions) is the avx512 level's own code (its
// table's functions).
#include <cmath>  // before the target region: std headers must not be compiled for AVX-512
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/cpu/avx512_float_packed.h"
#include "backends/cpu/kernels/cpu/avx512_folded.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_blocks_of_32.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

namespace ferry::kernels::cpu {
namespace {

// This thread's buffer of at least n int32, here before the target region: std:: templates
// instantiated in it would be compiled for AVX-512, and the linker may keep that copy for other
// files too.
[[maybe_unused]] int32_t* int32_scratch(size_t n) {
  thread_local std::vector<int32_t> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}
[[maybe_unused]] float* float_scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace
}  // namespace ferry::kernels::cpu

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AVX512_DOT 1

// Both extensions for the whole file: the avx512vnni table's code has no BF16 intrinsic, and no
// compiler makes vdpbf16ps from plain C++, so that level runs on a CPU with VNNI alone.
#if defined(__clang__)
#pragma clang attribute push(                                                                          \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c")
#endif

#include "backends/cpu/kernels/cpu/simd_kernels.h"
// After simd_kernels.h: the block types' matmul uses its f32 dot product.
#include "backends/cpu/kernels/cpu/simd_blocks.h"
// After both: the traits use their helpers.
#include "backends/cpu/kernels/cpu/avx512_k_units.h"
#include "backends/cpu/kernels/cpu/avx512_traits.h"
#include "backends/cpu/kernels/cpu/packed_q4_k.h"

namespace ferry::kernels::cpu {
namespace {

// Two f32 values, each in 8 lanes: a in lanes 0-7, b in 8-15 (a pair of blocks' scales).
inline __m512 two_scales(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

// Two blocks' 16 bytes of nibbles (the first in the low 128 bits of `both`, the second above) as
// 64 bytes in element order: each block's low nibbles (its elements 0-15), then its high ones.
inline __m512i nibbles_in_order(__m256i both) {
  const __m512i wide = _mm512_castsi256_si512(both);
  const __m512i spread = _mm512_shuffle_i64x2(wide, wide, 0x50);  // 128-bit lanes 0, 0, 1, 1
  const __m512i shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi64(spread, shifts), _mm512_set1_epi8(0x0F));
}

// The iq4_nl / iq4_xs values + 128 (1..241: unsigned bytes for vpdpbusd) in every 128-bit lane.
inline __m512i iq4_unsigned_values() {
  alignas(16) uint8_t shifted[16];
  for (int i = 0; i < 16; ++i) shifted[i] = static_cast<uint8_t>(kIq4NlValues[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(shifted)));
}

// Weights in blocks of 32 with an f16 scale first (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) against x
// rounded to q8_0 (a.xq, a.xq_scale; q4_1 and q5_1 also read q8_1's block sums, a.xq_sum), blocks
// 2p and 2p + 1 in one 512-bit vector: block 2p's 32 quants in bytes 0-31, block 2p + 1's in 32-63
// (an odd last block alone, the upper half zero). vpdpbusd multiplies unsigned by signed bytes and
// sums them in fours into int32 lanes: lanes 0-7 hold block 2p's dot product in 8 parts, lanes 8-15
// block 2p + 1's.
//   q8_0:   x + 128 (x ^ 0x80: x is in [-127, 127]) against the signed weights, started from
//           -128 * (the weights' sums of four): exactly sum x w.
//   others: the weights as unsigned bytes u = q + kOffset (q4_0's stored nibble is q + 8, q5_0's
//           five bits q + 16, iq4_nl's table value + 128; q4_1 and q5_1 are unsigned already)
//           against signed x, started from -kOffset * (x's sums of four): exactly sum x q.
// Then, per output, acc += f32(dot parts) * (weight scale * x scale) lane by lane (q4_1 and q5_1:
// then lanes 0 and 8 += m * (x's block sum)), pairs of blocks in increasing k, and one horizontal
// sum at the end: an order that depends only on K, so results do not depend on M, the tile or the
// thread count.
template <DType T>
struct VnniTile {
  static constexpr int64_t kXBytes = 1;
  static constexpr size_t kBlockBytes = T == DType::Q8_0   ? sizeof(BlockQ8_0)
                                        : T == DType::Q4_1 ? sizeof(BlockQ4_1)
                                        : T == DType::Q5_0 ? sizeof(BlockQ5_0)
                                        : T == DType::Q5_1 ? sizeof(BlockQ5_1)
                                                           : sizeof(BlockQ4_0);  // q4_0, iq4_nl
  static_assert(sizeof(BlockQ4_0) == sizeof(BlockIQ4_NL), "iq4_nl: a scale and 16 bytes, as q4_0");
  static constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;
  // Where the 16 bytes of nibbles start, and (q5_0, q5_1) the 32 fifth bits.
  static constexpr size_t kNibblesAt = T == DType::Q4_1 ? 4 : T == DType::Q5_0 ? 6 : T == DType::Q5_1 ? 8 : 2;
  static constexpr size_t kHighBitsAt = T == DType::Q5_0 ? 2 : 4;
  static constexpr int kOffset = T == DType::Q4_0 ? 8 : T == DType::Q5_0 ? 16 : T == DType::IQ4_NL ? 128 : 0;

  // The scales of blocks b and b + 1 (zero when !pair) in the lanes of their dot parts: d in
  // `scale`, and (q4_1, q5_1) m in `min`'s lanes 0 and 8 (the lanes the min term joins). The f16
  // pairs (d, m) of both blocks converted at once (exact, as the f16 table).
  static void scales(const uint8_t* block, bool pair, __m512* scale, [[maybe_unused]] __m512* min) {
    uint32_t first = 0, second = 0;  // the other types: quant bytes in m's place, unused
    std::memcpy(&first, block, 4);
    if (pair) std::memcpy(&second, block + kBlockBytes, 4);
    const __m512 both = _mm512_castps128_ps512(
        _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(first | static_cast<uint64_t>(second) << 32))));
    *scale = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), both);
    if constexpr (kMin) {
      *min = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0), both);
    }
  }

  // The weight quants of blocks b (and b + 1 when `pair`) as vpdpbusd wants them.
  static __m512i weights(const uint8_t* block, bool pair) {
    if constexpr (T == DType::Q8_0) {
      const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
      const __m256i second =
          pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kBlockBytes + 2)) : _mm256_setzero_si256();
      return _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1);
    } else {
      const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kNibblesAt));
      const __m128i second = pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kBlockBytes + kNibblesAt))
                                  : _mm_setzero_si128();
      __m512i q = nibbles_in_order(_mm256_set_m128i(second, first));
      if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
        // Bit j of the block's 32 high bits is element j's fifth bit: one mask bit per byte.
        uint32_t low = 0, high = 0;
        std::memcpy(&low, block + kHighBitsAt, 4);
        if (pair) std::memcpy(&high, block + kBlockBytes + kHighBitsAt, 4);
        const auto fifth = static_cast<__mmask64>(low | static_cast<uint64_t>(high) << 32);
        q = _mm512_mask_add_epi8(q, fifth, q, _mm512_set1_epi8(16));
      } else if constexpr (T == DType::IQ4_NL) {
        // Zero nibbles past a last odd block look up 1, against x's zeros.
        q = _mm512_shuffle_epi8(iq4_unsigned_values(), q);
      }
      return q;
    }
  }

  template <int MR, int NR>
  static void run(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
    __m512 acc[MR][NR];
    for (int m = 0; m < MR; ++m) {
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
    }
    const uint8_t* w[NR];
    for (int n = 0; n < NR; ++n) w[n] = a.w + static_cast<size_t>(n0 + n * row_step) * a.w_row_bytes;
    const int8_t* xq[MR];
    const float* xs[MR];
    [[maybe_unused]] const float* xsum[MR];
    for (int m = 0; m < MR; ++m) {
      xq[m] = a.xq + (m0 + m) * a.K;
      xs[m] = a.xq_scale + (m0 + m) * (a.K / 32);
      if constexpr (kMin) xsum[m] = a.xq_sum + (m0 + m) * (a.K / 32);
    }
    const int64_t blocks = a.K / 32;
    for (int64_t b = 0; b < blocks; b += 2) {
      const bool pair = b + 1 < blocks;
      if (prefetch_offset != 0) {
        for (int n = 0; n < NR; ++n) {
          const uint8_t* ahead = w[n] + prefetch_offset + b * kBlockBytes;
          simd::prefetch_line<Avx512>(ahead);
          simd::prefetch_line<Avx512>(ahead + 2 * kBlockBytes - 1);
        }
      }
      // x's two blocks, read once for all NR rows.
      __m512i xv[MR];
      __m512 x_scale[MR];
      [[maybe_unused]] __m512 x_sum[MR];
      [[maybe_unused]] __m512i x_start[MR];
      for (int m = 0; m < MR; ++m) {
        xv[m] = pair ? _mm512_loadu_si512(xq[m] + b * 32) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xq[m] + b * 32);
        x_scale[m] = two_scales(xs[m][b], pair ? xs[m][b + 1] : 0.0f);
        if constexpr (kMin) x_sum[m] = two_scales(xsum[m][b], pair ? xsum[m][b + 1] : 0.0f);
        if constexpr (T == DType::Q8_0) {
          xv[m] = _mm512_xor_si512(xv[m], _mm512_set1_epi8(static_cast<char>(0x80)));
        } else if constexpr (kOffset != 0) {
          const __m512i offsets =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(kOffset)), xv[m]);
          x_start[m] = _mm512_sub_epi32(_mm512_setzero_si512(), offsets);
        }
      }
      for (int n = 0; n < NR; ++n) {
        const uint8_t* block = w[n] + b * kBlockBytes;
        const __m512i wv = weights(block, pair);
        __m512 w_scale, w_min;
        scales(block, pair, &w_scale, &w_min);
        [[maybe_unused]] __m512i w_start;
        if constexpr (T == DType::Q8_0) {
          const __m512i offsets =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), wv);
          w_start = _mm512_sub_epi32(_mm512_setzero_si512(), offsets);
        }
        for (int m = 0; m < MR; ++m) {
          __m512i dot;
          if constexpr (T == DType::Q8_0) {
            dot = _mm512_dpbusd_epi32(w_start, xv[m], wv);
          } else if constexpr (kOffset != 0) {
            dot = _mm512_dpbusd_epi32(x_start[m], wv, xv[m]);
          } else {
            dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv[m]);
          }
          acc[m][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w_scale, x_scale[m]), acc[m][n]);
          if constexpr (kMin) acc[m][n] = _mm512_mask3_fmadd_ps(w_min, x_sum[m], acc[m][n], 0x0101);
        }
      }
    }
    simd::store_tile<Avx512, MR, NR>(a, acc, m0, n0, row_step);
  }
};

// iq4_xs weights against x rounded to q8_K (a.xq, a.xq_scale per 256): each super-block's 8 chunks
// of 32 two at a time as VnniTile takes iq4_nl blocks (table values + 128 against x, started from
// -128 * x's sums of four), each pair's dot parts then scaled in f32 by their chunks' d * (scale -
// 32) * x's scale: acc += f32(dot parts) * scale lane by lane, pairs in increasing k, one
// horizontal sum at the end (an order that depends only on K).
struct VnniIq4XsTile {
  static constexpr int64_t kXBytes = 1;
  static constexpr size_t kBytes = sizeof(BlockIQ4_XS);

  // d * (scale - 32) of the 8 chunks: scale j's low 4 bits are nibble j of scales_l (byte 4), its
  // top 2 bits bits 2j of scales_h (byte 2).
  static __m256 chunk_scales(const uint8_t* block) {
    uint32_t low = 0;
    uint16_t high = 0;
    std::memcpy(&low, block + 4, 4);
    std::memcpy(&high, block + 2, 2);
    const __m256i low4 = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(low)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        _mm256_set1_epi32(15));
    const __m256i high2 = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(high), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), _mm256_set1_epi32(3));
    const __m256i scale = _mm256_sub_epi32(_mm256_or_si256(low4, _mm256_slli_epi32(high2, 4)), _mm256_set1_epi32(32));
    uint16_t d = 0;
    std::memcpy(&d, block, 2);
    const __m256 d_f32 = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(scale), d_f32);
  }

  template <int MR, int NR>
  static void run(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
    __m512 acc[MR][NR];
    for (int m = 0; m < MR; ++m) {
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
    }
    const uint8_t* w[NR];
    for (int n = 0; n < NR; ++n) w[n] = a.w + static_cast<size_t>(n0 + n * row_step) * a.w_row_bytes;
    const int8_t* xq[MR];
    const float* xs[MR];
    for (int m = 0; m < MR; ++m) {
      xq[m] = a.xq + (m0 + m) * a.K;
      xs[m] = a.xq_scale + (m0 + m) * (a.K / kQK_K);
    }
    const __m512i table = iq4_unsigned_values();
    for (int64_t g = 0; g < a.K / kQK_K; ++g) {
      if (prefetch_offset != 0) {
        for (int n = 0; n < NR; ++n) {
          const uint8_t* ahead = w[n] + prefetch_offset + g * kBytes;
          simd::prefetch_line<Avx512>(ahead);
          simd::prefetch_line<Avx512>(ahead + 64);
          simd::prefetch_line<Avx512>(ahead + kBytes - 1);
        }
      }
      // x's chunk pairs, and their starts, read once for all NR rows.
      __m512i xv[MR][4], x_start[MR][4];
      __m256 x_scale[MR];
      for (int m = 0; m < MR; ++m) {
        x_scale[m] = _mm256_set1_ps(xs[m][g]);
        for (int p = 0; p < 4; ++p) {
          xv[m][p] = _mm512_loadu_si512(xq[m] + g * kQK_K + 64 * p);
          const __m512i offsets =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), xv[m][p]);
          x_start[m][p] = _mm512_sub_epi32(_mm512_setzero_si512(), offsets);
        }
      }
#pragma GCC unroll 8
      for (int n = 0; n < NR; ++n) {
        const uint8_t* block = w[n] + g * kBytes;
        // Chunks 2p and 2p + 1: 32 bytes of nibbles at 8 + 32 p.
        __m512i q[4];
        for (int p = 0; p < 4; ++p) {
          const __m256i both = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 8 + 32 * p));
          q[p] = _mm512_shuffle_epi8(table, nibbles_in_order(both));
        }
        const __m256 scales = chunk_scales(block);
        for (int m = 0; m < MR; ++m) {
          const __m512 s = _mm512_castps256_ps512(_mm256_mul_ps(scales, x_scale[m]));
          for (int p = 0; p < 4; ++p) {
            const __m512i lanes = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                                   _mm512_set1_epi32(2 * p));
            const __m512i dot = _mm512_dpbusd_epi32(x_start[m][p], q[p], xv[m][p]);
            acc[m][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(lanes, s), acc[m][n]);
          }
        }
      }
    }
    simd::store_tile<Avx512, MR, NR>(a, acc, m0, n0, row_step);
  }
};

// bf16 weights against x rounded to bf16 (a.xb): 32 products per vdpbf16ps, each lane summing
// its pairs in increasing k; a last partial chunk is loaded masked (zeros add nothing). One
// accumulator per output and one horizontal sum: the order depends only on K.
struct Bf16DotTile {
  static constexpr int64_t kXBytes = 2;

  template <int MR, int NR>
  static void run(const MatmulArgs& a, int64_t m0, int64_t n0, int64_t row_step, size_t prefetch_offset) {
    __m512 acc[MR][NR];
    for (int m = 0; m < MR; ++m) {
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
    }
    const uint8_t* w[NR];
    for (int n = 0; n < NR; ++n) w[n] = a.w + static_cast<size_t>(n0 + n * row_step) * a.w_row_bytes;
    const uint16_t* x[MR];
    for (int m = 0; m < MR; ++m) x[m] = a.xb + (m0 + m) * a.K;
    const int64_t full = a.K / 32;
    for (int64_t c = 0; c < full; ++c) {
      if (prefetch_offset != 0) {
        for (int n = 0; n < NR; ++n) simd::prefetch_line<Avx512>(w[n] + prefetch_offset + c * 64);
      }
      __m512i wv[NR];
      for (int n = 0; n < NR; ++n) wv[n] = _mm512_loadu_si512(w[n] + c * 64);
      for (int m = 0; m < MR; ++m) {
        const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x[m] + c * 32));
        for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, reinterpret_cast<__m512bh>(wv[n]));
      }
    }
    const int rest = static_cast<int>(a.K - full * 32);
    if (rest != 0) {
      const auto mask = static_cast<__mmask32>((uint64_t{1} << rest) - 1);
      __m512i wv[NR];
      for (int n = 0; n < NR; ++n) wv[n] = _mm512_maskz_loadu_epi16(mask, w[n] + full * 64);
      for (int m = 0; m < MR; ++m) {
        const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, x[m] + full * 32));
        for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, reinterpret_cast<__m512bh>(wv[n]));
      }
    }
    simd::store_tile<Avx512, MR, NR>(a, acc, m0, n0, row_step);
  }
};

// As core/half.h f32_to_bf16, 16 at a time: round to nearest even on the bits; NaN stays a quiet NaN.
void round_row_bf16_avx512(const float* x, int64_t n, uint16_t* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  int64_t i = 0;
  auto round16 = [&](__m512i bits) {
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), inf);
    const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_mask_mov_epi32(rounded, nan, quiet), 16));
  };
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), round16(_mm512_loadu_si512(x + i)));
  }
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(out + i, mask, round16(_mm512_maskz_loadu_epi32(mask, x + i)));
  }
}

// Packed blocks of 32 (packed_weights.h) against x rounded to q8_0 (q4_1, q5_1: q8_1), and packed
// iq4_xs's chunks of 32 against x rounded to q8_K: the 16 rows of a group in the 16 lanes, each
// vpdpbusd adding 4 products per row. Per block, each row's exact integer dot product, from 8
// vpdpbusd:
//   q8_0:   x + 128 (a.xq_unsigned, or the panels' copy: x is in [-127, 127]) against the signed
//           weights, less 128 * (the row's block sum, from 8 vpdpbusd of 128 against the weights:
//           per group for a batch in panels, q8_0_group_offsets, else alongside);
//   q4_0:   the stored nibbles (q + 8, unsigned) against signed x, started from -8 * (x's block sum);
//   iq4_nl, iq4_xs: the nibbles looked up (vpshufb) as their table values + 128 (unsigned) against
//           signed x, started from -128 * (x's block sum);
//   q5_0:   the nibbles with their fifth bits (q + 16) as q4_0's, started from -16 * (x's block sum);
//   q4_1, q5_1: the nibbles (with q5_1's fifth bits: q, unsigned) against signed x, from 0;
// then acc += f32(dot) * (weight scales * x scale) (q4_1, q5_1: then acc += m * x's block sum s;
// iq4_xs: the chunk's scale d * (ls - 32), exact in f32, x's the q8_K scale of its super-block):
// the order amx.cpp's tiles keep too (isa.h).

// A packed iq4_xs section's 16 rows' chunk scales d * (ls_j - 32), [chunk j][row] (exact in f32:
// an f16 times a 6-bit integer). The 8 chunks' ls as bytes in two vectors, chunk 2i's (even) and
// 2i + 1's (odd) in 128-bit lane i: the low 4 bits from scales_l plane i's nibbles, the top 2 from
// scales_h plane i / 2 shifted down by 4 (i % 2) (16-bit shifts: the bits they carry across bytes
// are masked off).
inline void iq4_xs_chunk_scales(const uint8_t* section, float* out) {
  const __m512i low = _mm512_loadu_si512(section + kPackedIQ4XSScalesLow);
  const __m512i planes =
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(section + kPackedIQ4XSScalesHigh)));
  const __m512i shifts =
      _mm512_set_epi32(0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0);
  const __m512i high = _mm512_srlv_epi16(_mm512_shuffle_i32x4(planes, planes, 0x50), shifts);  // planes 0, 0, 1, 1
  const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30), bias = _mm512_set1_epi8(32);
  const __m512i even = _mm512_sub_epi8(
      _mm512_or_si512(_mm512_and_si512(low, low4), _mm512_and_si512(_mm512_slli_epi16(high, 4), top2)), bias);
  const __m512i odd = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), low4),
                                                      _mm512_and_si512(_mm512_slli_epi16(high, 2), top2)),
                                      bias);
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(section)));
  auto chunk = [&](auto J) {
    constexpr int kJ = decltype(J)::value;
    const __m128i ls = _mm512_extracti32x4_epi32(kJ % 2 == 0 ? even : odd, kJ / 2);
    _mm512_storeu_ps(out + 16 * kJ, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ls)), d));
  };
  blocks::unroll<0, 8>(chunk);
}

// The 64-byte quant unit c of a packed block of nibbles (w: the 16 rows' 4 bytes each) as
// vpdpbusd's unsigned bytes: the low nibbles (elements 4c + i) and the high ones (16 + 4c + i),
// iq4_nl's looked up as table values + 128, q5_0 / q5_1's fifth bits put in above them from the
// block's unit of them (fifth: bits 2c and 2c + 1 of each byte, packed_weights.h).
template <DType T>
inline void unit_values(__m512i w, [[maybe_unused]] __m512i fifth, [[maybe_unused]] int64_t c,
                        [[maybe_unused]] __m512i table, __m512i* low, __m512i* high) {
  *low = _mm512_and_si512(w, _mm512_set1_epi8(0x0F));
  *high = _mm512_and_si512(_mm512_srli_epi16(w, 4), _mm512_set1_epi8(0x0F));
  if constexpr (has_table(T)) {
    *low = _mm512_shuffle_epi8(table, *low);
    *high = _mm512_shuffle_epi8(table, *high);
  } else if constexpr (packed_block_high_bytes(T) != 0) {
    // + 16 where the byte's fifth bit is set (masks: the compiler keeps vectors' registers free)
    const __mmask64 low_fifth = _mm512_test_epi8_mask(fifth, _mm512_set1_epi8(static_cast<char>(1 << (2 * c))));
    const __mmask64 high_fifth = _mm512_test_epi8_mask(fifth, _mm512_set1_epi8(static_cast<char>(2 << (2 * c))));
    *low = _mm512_mask_add_epi8(*low, low_fifth, *low, _mm512_set1_epi8(16));
    *high = _mm512_mask_add_epi8(*high, high_fifth, *high, _mm512_set1_epi8(16));
  }
}

// q4_1 / q5_1: block b's m of the group's 16 rows (the mins' region), as f32; else unused.
template <DType T>
inline __m512 block_mins([[maybe_unused]] const uint8_t* group, [[maybe_unused]] int64_t blocks,
                         [[maybe_unused]] int64_t b) {
  if constexpr (has_mins(T)) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + blocks * kPackedRows * 2) + b));
  } else {
    return _mm512_setzero_ps();
  }
}

// q8_0: -128 * (each row's block sum) of the group's 16 weight rows, [block][16]: what every row of
// x subtracts, computed once per group for a batch's rows instead of once per few rows.
void q8_0_group_offsets(const uint8_t* group, int64_t blocks, int32_t* out) {
  const uint8_t* units = group + blocks * kPackedRows * 2;
  const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i sum = _mm512_setzero_si512();
    for (int64_t c = 0; c < 8; ++c) sum = _mm512_dpbusd_epi32(sum, x80, _mm512_loadu_si512(units + (b * 8 + c) * 64));
    _mm512_storeu_si512(out + b * kPackedRows, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
  }
}

// G groups of 16 weight rows (group[g], outputs from n0[g]) against MR rows of x from m0, x in
// rows (decode, and batches on a level that gave x no panels).
template <DType T, int MR, int G>
void packed_rows(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  const int64_t blocks = a.K / 32;
  constexpr int64_t kUnits = T == DType::Q8_0 ? 8 : 4;  // 64-byte units of quants per block
  constexpr int32_t kNibbleOffset = nibble_offset(T);
  [[maybe_unused]] const __m512i table = has_table(T) ? iq4_unsigned_values() : _mm512_setzero_si512();
  // iq4_xs: each group's chunk scales of the current super-block (iq4_xs_chunk_scales)
  [[maybe_unused]] alignas(64) float chunk_scale[G][T == DType::IQ4_XS ? 8 * kPackedRows : 1];
  __m512 acc[G][MR];
  const int8_t* x[MR];  // q8_0: x + 128 (a.xq_unsigned)
  const auto* x_all = T == DType::Q8_0 ? reinterpret_cast<const int8_t*>(a.xq_unsigned) : a.xq;
  for (int m = 0; m < MR; ++m) x[m] = x_all + (m0 + m) * a.K;
  for (int g = 0; g < G; ++g) {
    for (int m = 0; m < MR; ++m) acc[g][m] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512 x_scale[MR];
    __m512i start[MR];  // -kNibbleOffset * (the sum of x's block)
    for (int m = 0; m < MR; ++m) {
      x_scale[m] = _mm512_set1_ps(a.xq_scale[x_scale_at(T, blocks, m0 + m, b)]);
      start[m] = kNibbleOffset == 0 ? _mm512_setzero_si512()
                                    : _mm512_set1_epi32(-kNibbleOffset * x_block_sum<T>(a, blocks, m0 + m, b));
    }
    if constexpr (T == DType::IQ4_XS) {
      if (b % 8 == 0) {
        for (int g = 0; g < G; ++g) iq4_xs_chunk_scales(group[g] + b / 8 * kPackedIQ4XSSection, chunk_scale[g]);
      }
    }
    for (int g = 0; g < G; ++g) {
      __m512 w_scale;
      if constexpr (T == DType::IQ4_XS) {
        w_scale = _mm512_load_ps(chunk_scale[g] + b % 8 * kPackedRows);
      } else {
        w_scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group[g]) + b));
      }
      const uint8_t* unit = block_units<T>(group[g], blocks, b);
      __m512i fifth = _mm512_setzero_si512();  // q5_0, q5_1: the block's unit of fifth bits
      if constexpr (packed_block_high_bytes(T) != 0) {
        const uint8_t* quants = group[g] + packed_block_quants_at(T, blocks, b);
        // The stream's line the units' prefetches below skip.
        if (G > 1 && a.prefetch)
          _mm_prefetch(reinterpret_cast<const char*>(quants + kDecodePrefetchBytes), _MM_HINT_T0);
        fifth = _mm512_loadu_si512(quants);
      }
      // Each row's sums in two chains (even and odd units, or low and high nibbles), added at the
      // end: vpdpbusd's latency is several cycles, and one chain per row would leave the unit
      // waiting with few rows. Integer sums: exact in any order.
      __m512i dot[MR][2];
      for (int m = 0; m < MR; ++m) {
        dot[m][0] = start[m];
        dot[m][1] = _mm512_setzero_si512();
      }
      // q8_0: 128 * (the rows' block sums), in two chains as well.
      [[maybe_unused]] __m512i w_offset[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      for (int64_t c = 0; c < kUnits; ++c) {
        if (G > 1 && a.prefetch)
          _mm_prefetch(reinterpret_cast<const char*>(unit + c * 64 + kDecodePrefetchBytes), _MM_HINT_T0);
        const __m512i w = _mm512_loadu_si512(unit + c * 64);
        if constexpr (T == DType::Q8_0) {
          // x + 128 (unsigned) against the signed weights; 128 * sum w taken off below. Units in
          // pairs, one per chain (the chain a compile-time index, so the sums stay in registers).
          if (G > 1 && a.prefetch)
            _mm_prefetch(reinterpret_cast<const char*>(unit + (c + 1) * 64 + kDecodePrefetchBytes), _MM_HINT_T0);
          const __m512i w_odd = _mm512_loadu_si512(unit + (c + 1) * 64);
          const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
          w_offset[0] = _mm512_dpbusd_epi32(w_offset[0], x80, w);
          w_offset[1] = _mm512_dpbusd_epi32(w_offset[1], x80, w_odd);
          for (int m = 0; m < MR; ++m) {
            dot[m][0] = _mm512_dpbusd_epi32(dot[m][0], broadcast4(x[m] + b * 32 + c * 4), w);
            dot[m][1] = _mm512_dpbusd_epi32(dot[m][1], broadcast4(x[m] + b * 32 + c * 4 + 4), w_odd);
          }
          ++c;
        } else {
          __m512i low, high;
          unit_values<T>(w, fifth, c, table, &low, &high);
          for (int m = 0; m < MR; ++m) {
            dot[m][0] = _mm512_dpbusd_epi32(dot[m][0], low, broadcast4(x[m] + b * 32 + c * 4));
            dot[m][1] = _mm512_dpbusd_epi32(dot[m][1], high, broadcast4(x[m] + b * 32 + 16 + c * 4));
          }
        }
      }
      [[maybe_unused]] const __m512 w_min = block_mins<T>(group[g], blocks, b);
      for (int m = 0; m < MR; ++m) {
        __m512i sum = _mm512_add_epi32(dot[m][0], dot[m][1]);
        if (T == DType::Q8_0) sum = _mm512_sub_epi32(sum, _mm512_add_epi32(w_offset[0], w_offset[1]));
        acc[g][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w_scale, x_scale[m]), acc[g][m]);
        if constexpr (has_mins(T))
          acc[g][m] = _mm512_fmadd_ps(w_min, _mm512_set1_ps(a.xq_sum[(m0 + m) * blocks + b]), acc[g][m]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m512 bias = a.bias != nullptr ? _mm512_loadu_ps(a.bias + n0[g]) : _mm512_setzero_ps();
    for (int m = 0; m < MR; ++m) {
      _mm512_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g], _mm512_add_ps(acc[g][m], bias));
    }
  }
}

// x's copy for batches against the packed blocks of 32 (the level's pack_x), in panels of
// kPanelRows rows: per panel and block of 32, the rows' 32 quants one after another (q8_0: + 128,
// unsigned, the weights being the signed side), [panel][block][row][32 bytes]; after all panels'
// quants, each row's start for each block (-nibble_offset * the block's quant sum: q4_0 -8, q5_0
// -16, iq4_nl / iq4_xs -128, the others 0) as int32, [panel][block][row]; the scales in
// x_packed_scale likewise (iq4_xs: q8_K's per 256, for each of its 8 blocks), then (q4_1, q5_1)
// q8_1's block sums s as the scales. Rows past M are zero. A tile of rows is then one
// pointer and constant offsets: with a pointer per row, GCC kept them on the stack and reloaded them every block (the
// batches ran at half the peak).
constexpr int64_t kPanelRows = 16;  // matmul.cpp's tile of pack_x work

// The packed types read a block of 32 at a time: the blocks of 32, and iq4_xs's chunks of 32 (its
// super-block's d * (ls - 32) as the chunk's scale, x's q8_K scale per 256 for each of its chunks).
constexpr bool takes_panels(DType t) {
  return is_packed_block_of_32(t) || t == DType::IQ4_XS;
}

int64_t panel_count(const MatmulArgs& a) {
  return (a.M + kPanelRows - 1) / kPanelRows;
}

// The starts of panel `panel`'s rows for block 0 (then kPanelRows apart per block).
const uint8_t* panel_starts(const MatmulArgs& a, int64_t panel) {
  const int64_t blocks = a.K / 32;
  return a.x_packed + panel_count(a) * kPanelRows * a.K + panel * blocks * kPanelRows * 4;
}
// q4_1 / q5_1: q8_1's block sums s of panel `panel`'s rows, after all panels' scales, as those.
const float* panel_sums(const MatmulArgs& a, int64_t panel) {
  const int64_t blocks = a.K / 32;
  return a.x_packed_scale + (panel_count(a) + panel) * blocks * kPanelRows;
}

// What panel_groups works out once per group of weights for every row of x: q8_0's offsets
// (q8_0_group_offsets), iq4_xs's chunk scales, [block][16] (iq4_xs_chunk_scales of each section).
struct GroupFactors {
  const int32_t* offsets = nullptr;
  const float* chunk_scales = nullptr;
};

// G groups of 16 weight rows against MR rows of x's panels from row m0 (m0 % kPanelRows + MR <=
// kPanelRows: rows past M are the panel's zeros, their outputs not stored), every product of
// the tile from one load of the weights and one broadcast of x: per block and row one chain of
// vpdpbusd per group, started from q8_0's offsets (GroupFactors) or x's start, then
// acc += f32(dot) * (weight scales * x scale) as packed_rows does.
template <DType T, int MR, int G>
void panel_rows(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G],
                const GroupFactors (&factors)[G]) {
  const int64_t blocks = a.K / 32;
  constexpr int64_t kUnits = T == DType::Q8_0 ? 8 : 4;
  const int64_t panel = m0 / kPanelRows, r0 = m0 % kPanelRows;
  const uint8_t* xq = a.x_packed + panel * kPanelRows * a.K + r0 * 32;
  const uint8_t* starts = panel_starts(a, panel) + r0 * 4;
  const float* scales = a.x_packed_scale + panel * blocks * kPanelRows + r0;
  [[maybe_unused]] const float* sums = panel_sums(a, panel) + r0;
  [[maybe_unused]] const __m512i table = has_table(T) ? iq4_unsigned_values() : _mm512_setzero_si512();
  __m512 acc[G][MR];
  for (int g = 0; g < G; ++g) {
    for (int m = 0; m < MR; ++m) acc[g][m] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* xb = xq + b * kPanelRows * 32;
    __m512i dot[G][MR];
    for (int m = 0; m < MR; ++m) {
      for (int g = 0; g < G; ++g) {
        dot[g][m] = T == DType::Q8_0 ? _mm512_loadu_si512(factors[g].offsets + b * kPackedRows)
                                     : broadcast4(reinterpret_cast<const int8_t*>(starts + (b * kPanelRows + m) * 4));
      }
    }
    for (int64_t c = 0; c < kUnits; ++c) {
      if constexpr (T == DType::Q8_0) {
        __m512i w[G];
        for (int g = 0; g < G; ++g)
          w[g] = _mm512_loadu_si512(group[g] + blocks * kPackedRows * 2 + (b * kUnits + c) * 64);
        for (int m = 0; m < MR; ++m) {
          const __m512i xv = broadcast4(reinterpret_cast<const int8_t*>(xb + m * 32 + c * 4));
          for (int g = 0; g < G; ++g) dot[g][m] = _mm512_dpbusd_epi32(dot[g][m], xv, w[g]);
        }
      } else {
        __m512i low[G], high[G];
        for (int g = 0; g < G; ++g) {
          const __m512i w = _mm512_loadu_si512(block_units<T>(group[g], blocks, b) + c * 64);
          // q5_0, q5_1: the block's unit of fifth bits (loaded again per unit: registers are full)
          const __m512i fifth = packed_block_high_bytes(T) != 0
                                    ? _mm512_loadu_si512(group[g] + packed_block_quants_at(T, blocks, b))
                                    : _mm512_setzero_si512();
          unit_values<T>(w, fifth, c, table, &low[g], &high[g]);
        }
        for (int m = 0; m < MR; ++m) {
          const __m512i x_low = broadcast4(reinterpret_cast<const int8_t*>(xb + m * 32 + c * 4));
          const __m512i x_high = broadcast4(reinterpret_cast<const int8_t*>(xb + m * 32 + 16 + c * 4));
          for (int g = 0; g < G; ++g) {
            dot[g][m] = _mm512_dpbusd_epi32(dot[g][m], low[g], x_low);
            dot[g][m] = _mm512_dpbusd_epi32(dot[g][m], high[g], x_high);
          }
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m512 w_scale = T == DType::IQ4_XS
                                 ? _mm512_loadu_ps(factors[g].chunk_scales + b * kPackedRows)
                                 : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group[g]) + b));
      [[maybe_unused]] const __m512 w_min = block_mins<T>(group[g], blocks, b);
      for (int m = 0; m < MR; ++m) {
        const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(scales[b * kPanelRows + m]));
        acc[g][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][m]), scale, acc[g][m]);
        if constexpr (has_mins(T))
          acc[g][m] = _mm512_fmadd_ps(w_min, _mm512_set1_ps(sums[b * kPanelRows + m]), acc[g][m]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m512 bias = a.bias != nullptr ? _mm512_loadu_ps(a.bias + n0[g]) : _mm512_setzero_ps();
    for (int m = 0; m < MR && m0 + m < a.M; ++m) {
      _mm512_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g], _mm512_add_ps(acc[g][m], bias));
    }
  }
}

// G groups from n0[0], n0[1], ... against every row of x's panels: each panel's rows six at a
// time (12 chains and 12 accumulators for two groups fit the 32 registers), the last four or two
// (a panel's zero rows fill a tile's rest).
template <DType T, int G>
void panel_groups(const MatmulArgs& a, const int64_t (&n0)[G], int32_t* offset_scratch, float* scale_scratch) {
  const int64_t blocks = a.K / 32;
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  const uint8_t* group[G];
  GroupFactors factors[G];
  for (int g = 0; g < G; ++g) {
    group[g] = a.w + static_cast<size_t>(n0[g] / kPackedRows) * group_bytes;
    if constexpr (T == DType::Q8_0) {
      int32_t* out = offset_scratch + g * blocks * kPackedRows;
      q8_0_group_offsets(group[g], blocks, out);
      factors[g].offsets = out;
    } else if constexpr (T == DType::IQ4_XS) {
      float* out = scale_scratch + g * blocks * kPackedRows;
      for (int64_t s = 0; s < blocks / 8; ++s)
        iq4_xs_chunk_scales(group[g] + s * kPackedIQ4XSSection, out + s * 8 * kPackedRows);
      factors[g].chunk_scales = out;
    }
  }
  for (int64_t p0 = 0; p0 < a.M; p0 += kPanelRows) {
    const int64_t end = a.M < p0 + kPanelRows ? a.M : p0 + kPanelRows;  // no std:: template in here
    int64_t m = p0;
    for (; end - m > 4; m += 6) panel_rows<T, 6, G>(a, m, group, n0, factors);
    if (end - m > 2) {
      panel_rows<T, 4, G>(a, m, group, n0, factors);
    } else if (end - m > 0) {
      panel_rows<T, 2, G>(a, m, group, n0, factors);
    }
  }
}

// A batch against the packed blocks of 32 with x in panels: two groups of 16 weight rows at a
// time, so each broadcast of x serves 32 outputs.
template <DType T>
void panel_matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const size_t scratch = static_cast<size_t>(2 * a.K / 32 * kPackedRows);
  int32_t* offset_scratch = T == DType::Q8_0 ? int32_scratch(scratch) : nullptr;
  float* scale_scratch = T == DType::IQ4_XS ? float_scratch(scratch) : nullptr;
  int64_t n0 = n_begin;
  for (; n0 + 2 * kPackedRows <= n_end; n0 += 2 * kPackedRows) {
    const int64_t starts[2] = {n0, n0 + kPackedRows};
    panel_groups<T, 2>(a, starts, offset_scratch, scale_scratch);
  }
  if (n0 < n_end) {
    const int64_t starts[1] = {n0};
    panel_groups<T, 1>(a, starts, offset_scratch, scale_scratch);
  }
}

// The instantiation tag of packed_q4_k.h's helpers in this file.
struct Avx512Dot {};

// x's four sub-block sum pairs (packed_q4_k::x_sum_pair) of row m, super-block s, [4].
inline void k4_x_pairs(const MatmulArgs& a, int64_t m, int64_t s, int32_t* out) {
  const int16_t* bsum = a.xq_bsum + m * (a.K / 16) + s * 16;
  for (int k = 0; k < 4; ++k) out[k] = packed_q4_k::x_sum_pair<Avx512Dot>(bsum, k);
}

// One super-block of MR rows of x (from m0) as packed_k4_rows and packed_k4_batch read it: each
// row's quants, q8_K scale and sub-block sum pairs (k4_x_pairs: [row][supers][4] in pairs, made
// once per batch, or here).
template <int MR>
struct K4Rows {
  const int8_t* q[MR];
  float scale[MR];
  const int32_t* pair[MR];
  int32_t own_pair[MR][4];

  K4Rows(const MatmulArgs& a, int64_t m0, int64_t s) {
    const int64_t supers = a.K / kQK_K;
    for (int m = 0; m < MR; ++m) {
      q[m] = a.xq + (m0 + m) * a.K + s * kQK_K;
      scale[m] = a.xq_scale[(m0 + m) * supers + s];
      k4_x_pairs(a, m0 + m, s, own_pair[m]);
      pair[m] = own_pair[m];
    }
  }
  K4Rows(const MatmulArgs& a, int64_t m0, int64_t s, const int32_t* pairs) {
    const int64_t supers = a.K / kQK_K;
    for (int m = 0; m < MR; ++m) {
      q[m] = a.xq + (m0 + m) * a.K + s * kQK_K;
      scale[m] = a.xq_scale[(m0 + m) * supers + s];
      pair[m] = pairs + ((m0 + m) * supers + s) * 4;
    }
  }
};

// One section's factors decoded on the stack (decode: each section is read once).
struct K4Factors {
  alignas(64) int32_t v[kK4FactorRows * kPackedRows];
  void load(const uint8_t* section) { k4_factors(section, v); }
  const int32_t* scale(int j) const { return v + j * kPackedRows; }
};

// The end of a super-block for one group (its factors f, k4_factors' [12][16]): per row of x, the
// mins' int32 sum (vpdpwssd) and add_super_block's two f32 steps from the scaled sums.
template <int MR>
inline void k4_finish(const uint8_t* section, const int32_t* f, const K4Rows<MR>& x, const __m512i (&sum)[MR],
                      __m512 (&acc)[MR]) {
  using S = Avx512Dot;
  const __m512 d = packed_q4_k::d<S>(section);
  const __m512 dmin_neg = packed_q4_k::dmin_neg<S>(section);
  for (int m = 0; m < MR; ++m) {
    __m512i mins = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k)
      mins = _mm512_dpwssd_epi32(mins, _mm512_loadu_si512(f + (8 + k) * kPackedRows), _mm512_set1_epi32(x.pair[m][k]));
    acc[m] = packed_q4_k::add_super_block<S>(acc[m], sum[m], mins, d, dmin_neg, x.scale[m]);
  }
}

// Packed q4_k or q5_k (packed_weights.h) against x rounded to q8_K, the 16 rows of a group in the
// 16 lanes (decode: G streams, one row of x). Per sub-block j, each row's exact integer dot product
// with x, (w_j . x_j): the low nibbles (sub-block 2p) by 8 vpdpbusd, the high ones (2p + 1) by 8
// more (q4_k: kept in place, 16 q, the sum shifted back down by 4: exact; q5_k: k4_values'); per
// super-block the exact int32 sums sum_j sc_j * (w_j . x_j) (vpmulld) and sum_j m_j * (x's sum over
// sub-block j) (vpdpwssd), then add_super_block's two f32 steps (packed_q4_k.h): the same as
// packed_k4_batch and amx.cpp's tiles, so every kernel gives the same bits.
template <DType T, int MR, int G>
void packed_k4_rows(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  static_assert(T == DType::Q4_K || T == DType::Q5_K, "q4_k's factors");
  constexpr int64_t kSection = T == DType::Q5_K ? kPackedQ5KSection : kPackedQ4KSection;
  constexpr int64_t kQuants = T == DType::Q5_K ? kPackedQ5KQuants : kPackedQ4KQuants;
  const int64_t supers = a.K / kQK_K;
  __m512 acc[G][MR];
  for (int g = 0; g < G; ++g) {
    for (int m = 0; m < MR; ++m) acc[g][m] = _mm512_setzero_ps();
  }
  for (int64_t s = 0; s < supers; ++s) {
    const K4Rows<MR> x(a, m0, s);
    // Each group's factors first, then the sub-block pairs with the groups interleaved, so decode's
    // streams advance together, 64 bytes at a time: a whole 2304-byte section per stream at a time
    // read the weights about 10% slower from memory (bench_decode's q4_k shapes), in bursts the
    // prefetchers fell behind; a pair's 512 bytes per stream at a time kept x's broadcasts for
    // all of them in registers, and GCC spilled (q5_k 41-43 GB/s in L2, against 57 then).
    const uint8_t* section[G];
    for (int g = 0; g < G; ++g) {
      section[g] = group[g] + s * kSection;
      if (G > 1 && a.prefetch) {
        for (int64_t off = 0; off < kQuants; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(section[g] + off + kDecodePrefetchBytes), _MM_HINT_T0);
      }
    }
    K4Factors f[G];
    for (int g = 0; g < G; ++g) f[g].load(section[g]);
    __m512i sum[G][MR];
    for (int g = 0; g < G; ++g) {
      for (int m = 0; m < MR; ++m) sum[g][m] = _mm512_setzero_si512();
    }
    auto pair = [&](auto P) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high)
      constexpr int kP = decltype(P)::value;
      __m512i low[G][MR], high[G][MR];
      for (int g = 0; g < G; ++g) {
        for (int m = 0; m < MR; ++m) low[g][m] = high[g][m] = _mm512_setzero_si512();
      }
      // Each unit of x's against every group (decode: G streams, 2G chains), so x's broadcasts
      // are made once and the chains stay in registers.
      for (int c = 0; c < 8; ++c) {
        __m512i x_low[MR], x_high[MR];
        for (int m = 0; m < MR; ++m) {
          x_low[m] = broadcast4(x.q[m] + 64 * kP + 4 * c);
          x_high[m] = broadcast4(x.q[m] + 64 * kP + 32 + 4 * c);
        }
        for (int g = 0; g < G; ++g) {
          if (G > 1 && a.prefetch) {
            _mm_prefetch(reinterpret_cast<const char*>(section[g] + kQuants + (8 * kP + c) * 64 + kDecodePrefetchBytes),
                         _MM_HINT_T0);
          }
          const __m512i w_low = k4_values<T, 2 * kP>(section[g], c);
          const __m512i w_high = k4_values<T, 2 * kP + 1>(section[g], c);
          for (int m = 0; m < MR; ++m) {
            low[g][m] = _mm512_dpbusd_epi32(low[g][m], w_low, x_low[m]);
            high[g][m] = _mm512_dpbusd_epi32(high[g][m], w_high, x_high[m]);
          }
        }
      }
      for (int g = 0; g < G; ++g) {
        const __m512i sc_low = _mm512_load_si512(f[g].scale(2 * kP));
        const __m512i sc_high = _mm512_load_si512(f[g].scale(2 * kP + 1));
        for (int m = 0; m < MR; ++m) {
          const __m512i high_dot = T == DType::Q5_K ? high[g][m] : _mm512_srai_epi32(high[g][m], 4);
          sum[g][m] = _mm512_add_epi32(sum[g][m], _mm512_add_epi32(_mm512_mullo_epi32(low[g][m], sc_low),
                                                                   _mm512_mullo_epi32(high_dot, sc_high)));
        }
      }
    };
    blocks::unroll<0, 4>(pair);
    for (int g = 0; g < G; ++g) k4_finish(section[g], f[g].v, x, sum[g], acc[g]);
  }
  for (int g = 0; g < G; ++g) {
    const __m512 bias = a.bias != nullptr ? _mm512_loadu_ps(a.bias + n0[g]) : _mm512_setzero_ps();
    for (int m = 0; m < MR; ++m) {
      _mm512_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g], _mm512_add_ps(acc[g][m], bias));
    }
  }
}

// A batch's MR rows of x (from m0) against G groups of packed q4_k or q5_k, a sub-block at a time:
// per unit of each group, its values for the sub-block (k4_values) against every row's broadcast,
// one chain per row and group, so each broadcast of x serves G groups. Then packed_k4_rows' exact
// int32 sums per super-block and add_super_block's two f32 steps, so decode, batches and amx.cpp's
// tiles give the same bits. At 512 rows (AMD Zen 5, of the vnni_dot peak): f32 steps per sub-block
// as the tiles took them (four per 8 vpdpbusd) ran q4_k at 0.44-0.46 and q5_k at 0.38-0.40, the
// int32 sums (a vpmulld and an add per sub-block) at 0.44-0.53 and 0.39-0.43; on a Sapphire Rapids
// Xeon's avx512bf16 level (one run each) q4_k 2.0x, q5_k 1.2x faster so. The groups' factors
// (k4_factors, [super-block][12][16] each) and x's sum pairs ([row][super-block][4]) come made
// once per batch: made per tile of 4 rows, their decoding took 0.10-0.15 of the time (Intel Xeon,
// q4_k at 512 rows: 250-276 GFLOP/s so, 280-300 from the tables).
template <DType T, int MR, int G>
void packed_k4_batch(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G],
                     const int32_t* const (&factors)[G], const int32_t* x_pairs) {
  static_assert(T == DType::Q4_K || T == DType::Q5_K, "q4_k's factors");
  constexpr int64_t kSection = T == DType::Q5_K ? kPackedQ5KSection : kPackedQ4KSection;
  const int64_t supers = a.K / kQK_K;
  __m512 acc[G][MR];
  for (int g = 0; g < G; ++g) {
    for (int m = 0; m < MR; ++m) acc[g][m] = _mm512_setzero_ps();
  }
  for (int64_t s = 0; s < supers; ++s) {
    const K4Rows<MR> x(a, m0, s, x_pairs);
    const uint8_t* section[G];
    const int32_t* f[G];
    for (int g = 0; g < G; ++g) {
      section[g] = group[g] + s * kSection;
      f[g] = factors[g] + s * kK4FactorRows * kPackedRows;
    }
    __m512i sum[G][MR];
    for (int g = 0; g < G; ++g) {
      for (int m = 0; m < MR; ++m) sum[g][m] = _mm512_setzero_si512();
    }
    auto sub_block = [&](auto J) {
      constexpr int kJ = decltype(J)::value;
      __m512i dot[G][MR];
      for (int g = 0; g < G; ++g) {
        for (int m = 0; m < MR; ++m) dot[g][m] = _mm512_setzero_si512();
      }
      for (int c = 0; c < 8; ++c) {
        __m512i w[G];
        for (int g = 0; g < G; ++g) w[g] = k4_values<T, kJ>(section[g], c);
        for (int m = 0; m < MR; ++m) {
          const __m512i xv = broadcast4(x.q[m] + 32 * kJ + 4 * c);
          for (int g = 0; g < G; ++g) dot[g][m] = _mm512_dpbusd_epi32(dot[g][m], w[g], xv);
        }
      }
      for (int g = 0; g < G; ++g) {
        const __m512i sc = _mm512_loadu_si512(f[g] + kJ * kPackedRows);
        for (int m = 0; m < MR; ++m) {
          const __m512i exact = T == DType::Q4_K && kJ % 2 == 1 ? _mm512_srai_epi32(dot[g][m], 4) : dot[g][m];
          sum[g][m] = _mm512_add_epi32(sum[g][m], _mm512_mullo_epi32(exact, sc));
        }
      }
    };
    blocks::unroll<0, 8>(sub_block);
    for (int g = 0; g < G; ++g) k4_finish(section[g], f[g], x, sum[g], acc[g]);
  }
  for (int g = 0; g < G; ++g) {
    const __m512 bias = a.bias != nullptr ? _mm512_loadu_ps(a.bias + n0[g]) : _mm512_setzero_ps();
    for (int m = 0; m < MR; ++m) {
      _mm512_storeu_ps(a.y + (m0 + m) * a.y_stride + n0[g], _mm512_add_ps(acc[g][m], bias));
    }
  }
}

// The loops that keep their accumulators in y (q2_k, q3_k, q6_k: the registers hold their chains
// and sums): the G x MR outputs' pointers, zeroed, and at the end the bias added.
template <int MR, int G>
inline void zeroed_y_accumulators(const MatmulArgs& a, int64_t m0, const int64_t (&n0)[G], float* (&y)[G][MR]) {
  for (int g = 0; g < G; ++g) {
    for (int m = 0; m < MR; ++m) {
      y[g][m] = a.y + (m0 + m) * a.y_stride + n0[g];
      _mm512_storeu_ps(y[g][m], _mm512_setzero_ps());
    }
  }
}
template <int MR, int G>
inline void add_bias_to_y(const MatmulArgs& a, const int64_t (&n0)[G], float* const (&y)[G][MR]) {
  if (a.bias == nullptr) return;
  for (int g = 0; g < G; ++g) {
    const __m512 bias = _mm512_loadu_ps(a.bias + n0[g]);
    for (int m = 0; m < MR; ++m) _mm512_storeu_ps(y[g][m], _mm512_add_ps(_mm512_loadu_ps(y[g][m]), bias));
  }
}

// Sub-block j's scales of a packed q2_k or q3_k section's 16 rows in each 32-bit lane's low int16,
// zero above (what vpdpwssd multiplies a dot product in the lane's low int16 by): q2_k's sc_j (the
// low nibbles of plane j), q3_k's sc_j - 32 (from q3_k_scales' bytes).
template <DType T>
inline __m512i k16_scale(const uint8_t* section, const int8_t* q3_k_scale, int j) {
  if constexpr (T == DType::Q2_K) {
    const __m128i plane = _mm_loadu_si128(reinterpret_cast<const __m128i*>(section + kPackedQ2KScales + 16 * j));
    return _mm512_and_si512(_mm512_cvtepu8_epi32(plane), _mm512_set1_epi32(0x0F));
  } else {
    const __m128i bytes = _mm_load_si128(reinterpret_cast<const __m128i*>(q3_k_scale + 16 * j));
    return _mm512_and_si512(_mm512_cvtepi8_epi32(bytes), _mm512_set1_epi32(0xFFFF));
  }
}

// q2_k: sum_j m_j * (x's sum over sub-block j) of a section's 16 rows for one row of x (bsum: its
// 16 sums of 16), by 8 vpdpwssd of q2_k_min_pair against x's pair of sums; exact.
inline __m512i q2_k_mins(const uint8_t* section, const int16_t* bsum) {
  __m512i mins = _mm512_setzero_si512();
  for (int p = 0; p < 8; ++p) {
    int32_t both;
    std::memcpy(&both, bsum + 2 * p, 4);
    mins = _mm512_dpwssd_epi32(mins, q2_k_min_pair(section, p), _mm512_set1_epi32(both));
  }
  return mins;
}

// Packed q2_k or q3_k (packed_weights.h: sub-blocks of 16, 2 or 3 bits) against x rounded to q8_K,
// the 16 rows of a group in the 16 lanes. Per sub-block j, each row's exact integer dot product
// with x by 4 vpdpbusd: q2_k's q (unsigned) from 0; q3_k's q + 4 (unsigned) started from -4 * (x's
// sum over sub-block j, q8_K's bsum), exactly sum q x. Either is at most 16 * 4 * 128 in size, so
// it is its own low int16: one vpdpwssd against the scale in each lane's low int16 (zero above,
// k16_scale) adds scale * dot to the super-block's exact int32 sum (|sum| < 2^23). Then per
// super-block y = fma(f32(sum), d * x's scale, y), and for q2_k y = fma(f32(mins), -dmin * x's
// scale, y) (q2_k_mins; packed_q4_k.h add_super_block's two steps), y's rows the accumulators, and
// the bias at the end. Decode (one row of x, G streams): a quarter's (n, c / 4) four sub-blocks at
// once, so each stream reads its qs units in order and each unit's four values are made once;
// batches (one group, eight rows of x): a sub-block at a time, the rows sharing each unit's values.
// The integer sums are exact, so both orders give the same bits.
template <DType T, int MR, int G>
void packed_k16_rows(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  static_assert(T == DType::Q2_K || T == DType::Q3_K, "sub-blocks of 16");
  constexpr int64_t kSection = T == DType::Q2_K ? kPackedQ2KSection : kPackedQ3KSection;
  constexpr int64_t kFactors = T == DType::Q2_K ? kPackedQ2KQuants : kPackedQ3KQuants;  // all but the qs units
  const int64_t supers = a.K / kQK_K;
  float* y[G][MR];
  zeroed_y_accumulators(a, m0, n0, y);
  for (int64_t s = 0; s < supers; ++s) {
    const int8_t* x[MR];
    const int16_t* bsum[MR];
    // q3_k: -4 * x's bsum, broadcast from memory (a load, no ALU)
    [[maybe_unused]] alignas(64) int32_t starts[MR][T == DType::Q3_K ? 16 : 1];
    for (int m = 0; m < MR; ++m) {
      x[m] = a.xq + (m0 + m) * a.K + s * kQK_K;
      bsum[m] = a.xq_bsum + (m0 + m) * (a.K / 16) + s * 16;
      if constexpr (T == DType::Q3_K) {
        const __m512i sums = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum[m])));
        _mm512_store_si512(starts[m], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 2)));
      }
    }
    auto start = [&](int m, int j) {
      if constexpr (T == DType::Q3_K) {
        return _mm512_set1_epi32(starts[m][j]);
      } else {
        return _mm512_setzero_si512();
      }
    };
    const uint8_t* section[G];
    [[maybe_unused]] alignas(64) int8_t q3_k_scale[G][T == DType::Q3_K ? 16 * kPackedRows : 1];
    __m512i sum[G][MR];
    for (int g = 0; g < G; ++g) {
      section[g] = group[g] + s * kSection;
      if (G > 1 && a.prefetch) {
        for (int64_t off = 0; off < kFactors; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(section[g] + off + kDecodePrefetchBytes), _MM_HINT_T0);
      }
      if constexpr (T == DType::Q3_K) q3_k_scales(section[g], q3_k_scale[g]);
      for (int m = 0; m < MR; ++m) sum[g][m] = _mm512_setzero_si512();
    }
    // Sub-block j's dot products ([g][m]) times its scales, into the sums.
    auto add_scaled = [&](int j, const __m512i(&dot)[G][MR]) {
      for (int g = 0; g < G; ++g) {
        const __m512i sc = k16_scale<T>(section[g], q3_k_scale[g], j);
        for (int m = 0; m < MR; ++m) sum[g][m] = _mm512_dpwssd_epi32(sum[g][m], dot[g][m], sc);
      }
    };
    if constexpr (MR == 1) {
      auto quarter = [&](auto Q) {  // elements 128n + 32t + 16h.. for t = 0..3: sub-blocks 8n + 2t + h
        constexpr int kN = decltype(Q)::value / 2, kH = decltype(Q)::value % 2;
        __m512i dot[4][G][MR];
        for (int t = 0; t < 4; ++t) {
          for (int g = 0; g < G; ++g) dot[t][g][0] = start(0, 8 * kN + 2 * t + kH);
        }
        for (int c = 4 * kH; c < 4 * kH + 4; ++c) {
          for (int g = 0; g < G; ++g) {
            const K16Unit<T> unit(section[g], kN, c, G > 1 && a.prefetch);
            auto value = [&](auto U) {
              constexpr int kT = decltype(U)::value;
              dot[kT][g][0] = _mm512_dpbusd_epi32(dot[kT][g][0], unit.template values<kN, kT>(),
                                                  broadcast4(x[0] + 128 * kN + 32 * kT + 4 * c));
            };
            blocks::unroll<0, 4>(value);
          }
        }
        for (int t = 0; t < 4; ++t) add_scaled(8 * kN + 2 * t + kH, dot[t]);
      };
      blocks::unroll<0, 4>(quarter);
    } else {
      auto sub_block = [&](auto J) {  // j = 8n + 2t + h: units c = 4h..4h + 3
        constexpr int kJ = decltype(J)::value, kN = kJ / 8, kT = kJ % 8 / 2, kH = kJ % 2;
        __m512i dot[G][MR];
        for (int g = 0; g < G; ++g) {
          for (int m = 0; m < MR; ++m) dot[g][m] = start(m, kJ);
        }
        for (int c = 4 * kH; c < 4 * kH + 4; ++c) {
          __m512i w[G];
          for (int g = 0; g < G; ++g) w[g] = K16Unit<T>(section[g], kN, c, false).template values<kN, kT>();
          for (int m = 0; m < MR; ++m) {
            const __m512i xv = broadcast4(x[m] + 128 * kN + 32 * kT + 4 * c);
            for (int g = 0; g < G; ++g) dot[g][m] = _mm512_dpbusd_epi32(dot[g][m], w[g], xv);
          }
        }
        add_scaled(kJ, dot);
      };
      blocks::unroll<0, 16>(sub_block);
    }
    for (int g = 0; g < G; ++g) {
      using S = Avx512Dot;
      const __m512 d = packed_q4_k::d<S>(section[g]);
      for (int m = 0; m < MR; ++m) {
        const float x_scale = a.xq_scale[(m0 + m) * supers + s];
        if constexpr (T == DType::Q2_K) {
          const __m512i mins = q2_k_mins(section[g], bsum[m]);
          _mm512_storeu_ps(y[g][m], packed_q4_k::add_super_block<S>(_mm512_loadu_ps(y[g][m]), sum[g][m], mins, d,
                                                                    packed_q4_k::dmin_neg<S>(section[g]), x_scale));
        } else {
          _mm512_storeu_ps(y[g][m],
                           _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[g][m]), _mm512_mul_ps(d, _mm512_set1_ps(x_scale)),
                                           _mm512_loadu_ps(y[g][m])));
        }
      }
    }
  }
  add_bias_to_y(a, n0, y);
}

// A batch against G groups of packed q4_k or q5_k (packed_k4_batch), four rows of x at a time,
// then the rest; each group's factors decoded once into `scratch` (k4_factors, [super-block][12][16]
// per group) rather than once per tile of rows.
template <DType T, int G>
void k4_batch_groups(const MatmulArgs& a, const uint8_t* const (&group)[G], const int64_t (&n0)[G], int32_t* scratch,
                     const int32_t* x_pairs) {
  constexpr int64_t kSection = T == DType::Q5_K ? kPackedQ5KSection : kPackedQ4KSection;
  const int64_t supers = a.K / kQK_K;
  const int32_t* factors[G];
  for (int g = 0; g < G; ++g) {
    int32_t* out = scratch + g * supers * kK4FactorRows * kPackedRows;
    for (int64_t s = 0; s < supers; ++s) k4_factors(group[g] + s * kSection, out + s * kK4FactorRows * kPackedRows);
    factors[g] = out;
  }
  int64_t m = 0;
  for (; m + 4 <= a.M; m += 4) packed_k4_batch<T, 4, G>(a, m, group, n0, factors, x_pairs);
  switch (a.M - m) {
    case 3:
      return packed_k4_batch<T, 3, G>(a, m, group, n0, factors, x_pairs);
    case 2:
      return packed_k4_batch<T, 2, G>(a, m, group, n0, factors, x_pairs);
    case 1:
      return packed_k4_batch<T, 1, G>(a, m, group, n0, factors, x_pairs);
    default:
      return;
  }
}

// Packed q6_k (packed_weights.h) against x rounded to q8_K, the 16 rows of a group in the 16
// lanes. Per sub-block j of 16 (a quad's e_t of its 4 units), each row's exact integer dot product
// of the signed quants with x: 4 vpdpbusd of the 6-bit values q + 32 (unsigned) with x, started
// from -32 * (x's sum over sub-block j, q8_K's bsum); times the row's scale sc_j (vpmulld), summed
// over the super-block into an exact int32 (|terms| < 2^25); then y = fma(f32(sum), d * x's scale, y),
// super-block after super-block, y's rows the accumulators (the registers hold the chains and sums
// of eight rows of x), and the bias added at the end.
template <int MR, int G>
void packed_q6_k_rows(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  const int64_t supers = a.K / kQK_K;
  float* y[G][MR];
  zeroed_y_accumulators(a, m0, n0, y);
  for (int64_t s = 0; s < supers; ++s) {
    const int8_t* x[MR];
    for (int m = 0; m < MR; ++m) x[m] = a.xq + (m0 + m) * a.K + s * kQK_K;
    const uint8_t* section[G];
    __m512i sum[G][MR];
    for (int g = 0; g < G; ++g) {
      section[g] = group[g] + s * kPackedQ6KSection;
      if (G > 1 && a.prefetch) {
        for (int64_t off = 0; off < kPackedQ6KQuants; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(section[g] + off + kDecodePrefetchBytes), _MM_HINT_T0);
      }
      for (int m = 0; m < MR; ++m) sum[g][m] = _mm512_setzero_si512();
    }
    // Each row's -32 * (x's sum over sub-block j), [m][j]: where sub-block j's chains start, so
    // they sum the signed quants' products (broadcast from memory, a load: the 8 vpdpwssd per row
    // and super-block of a correction on the scales took 0.09 of the loop's operations).
    alignas(64) int32_t start[MR][16];
    for (int m = 0; m < MR; ++m) {
      const __m256i bsum =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq_bsum + (m0 + m) * (a.K / 16) + s * 16));
      _mm512_store_si512(start[m],
                         _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi16_epi32(bsum), 5)));
    }
    // A sub-block's dot products (chains of 4 vpdpbusd, [g][m]) times its scales, into the sums.
    auto add_scaled = [&](auto Q, auto T, const __m512i(&dot)[G][MR]) {
      constexpr int kQ = decltype(Q)::value, kT = decltype(T)::value;
      for (int g = 0; g < G; ++g) {
        const __m512i planes = _mm512_loadu_si512(section[g] + kPackedQ6KScales + 64 * kQ);
        const __m512i scale = _mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(planes, kT));
        for (int m = 0; m < MR; ++m) sum[g][m] = _mm512_add_epi32(sum[g][m], _mm512_mullo_epi32(dot[g][m], scale));
      }
    };
    auto unit_at = [&](int g, int q, int i) { return section[g] + kPackedQ6KQuants + q * kPackedQ6KQuad + 192 * i; };
    // x's 4 bytes of element 128n + 32t + 4c, c = 4h + i, for row m.
    auto x_at = [&](int m, int q, int t, int i) { return x[m] + 128 * (q / 2) + 32 * t + 4 * (4 * (q % 2) + i); };
    // Decode (G streams, one row of x): a quad's units one after another, all four sub-blocks at
    // once, the groups interleaved, so each stream is read strictly in order (the prefetches
    // written out here: moved into a helper lambda, they were dropped by GCC 12). Batches: a quad's sub-blocks two at a
    // time, eight rows of x sharing each unit, 16 chains and 8 sums in registers (one sub-block at a time left the
    // chains' latency showing: 8% slower). The integer sums are exact, so both orders give the same bits.
    auto quad = [&](auto Q) {
      constexpr int kQ = decltype(Q)::value;
      if constexpr (G > 1) {
        __m512i dot[4][G][MR];
        for (int t = 0; t < 4; ++t) {
          for (int g = 0; g < G; ++g) {
            for (int m = 0; m < MR; ++m) dot[t][g][m] = _mm512_set1_epi32(start[m][8 * (kQ / 2) + 2 * t + kQ % 2]);
          }
        }
        for (int i = 0; i < 4; ++i) {
          for (int g = 0; g < G; ++g) {
            const uint8_t* unit = unit_at(g, kQ, i);
            if (a.prefetch) {
              for (int piece = 0; piece < 3; ++piece)
                _mm_prefetch(reinterpret_cast<const char*>(unit + 64 * piece + kDecodePrefetchBytes), _MM_HINT_T0);
            }
            const __m512i e[4] = {q6_k_values<0>(unit), q6_k_values<1>(unit), q6_k_values<2>(unit),
                                  q6_k_values<3>(unit)};
            for (int t = 0; t < 4; ++t) {
              for (int m = 0; m < MR; ++m)
                dot[t][g][m] = _mm512_dpbusd_epi32(dot[t][g][m], e[t], broadcast4(x_at(m, kQ, t, i)));
            }
          }
        }
        auto scaled = [&](auto T) { add_scaled(Q, T, dot[decltype(T)::value]); };
        blocks::unroll<0, 4>(scaled);
      }
    };
    if constexpr (G > 1) {
      blocks::unroll<0, 4>(quad);
    } else {
      // A runtime loop over the quads: unrolled, GCC hoisted loads across them and spilled the
      // chains to the stack (about 360 stores a super-block).
#pragma GCC unroll 1
      for (int q = 0; q < 4; ++q) {
        const __m512i planes = _mm512_loadu_si512(section[0] + kPackedQ6KScales + 64 * q);
        auto sub_block_pair = [&](auto P) {
          constexpr int kT0 = 2 * decltype(P)::value, kT1 = kT0 + 1;
          __m512i dot[2][MR];
          const int j0 = 8 * (q / 2) + 2 * kT0 + q % 2;  // kT1's: j0 + 2
          for (int m = 0; m < MR; ++m) {
            dot[0][m] = _mm512_set1_epi32(start[m][j0]);
            dot[1][m] = _mm512_set1_epi32(start[m][j0 + 2]);
          }
          for (int i = 0; i < 4; ++i) {
            const __m512i e0 = q6_k_values<kT0>(unit_at(0, q, i));
            const __m512i e1 = q6_k_values<kT1>(unit_at(0, q, i));
            for (int m = 0; m < MR; ++m) {
              dot[0][m] = _mm512_dpbusd_epi32(dot[0][m], e0, broadcast4(x_at(m, q, kT0, i)));
              dot[1][m] = _mm512_dpbusd_epi32(dot[1][m], e1, broadcast4(x_at(m, q, kT1, i)));
            }
          }
          const __m512i scale0 = _mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(planes, kT0));
          const __m512i scale1 = _mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(planes, kT1));
          for (int m = 0; m < MR; ++m) {
            sum[0][m] = _mm512_add_epi32(sum[0][m], _mm512_mullo_epi32(dot[0][m], scale0));
            sum[0][m] = _mm512_add_epi32(sum[0][m], _mm512_mullo_epi32(dot[1][m], scale1));
          }
        };
        blocks::unroll<0, 2>(sub_block_pair);
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(section[g])));
      for (int m = 0; m < MR; ++m) {
        const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(a.xq_scale[(m0 + m) * supers + s]));
        _mm512_storeu_ps(y[g][m], _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[g][m]), scale, _mm512_loadu_ps(y[g][m])));
      }
    }
  }
  add_bias_to_y(a, n0, y);
}

// One packed layout's loop for G groups of weight rows and MR rows of x in rows.
template <DType T, int MR, int G>
void packed_type_rows(const MatmulArgs& a, int64_t m0, const uint8_t* const (&group)[G], const int64_t (&n0)[G]) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    packed_k4_rows<T, MR, G>(a, m0, group, n0);
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    packed_k16_rows<T, MR, G>(a, m0, group, n0);
  } else if constexpr (T == DType::Q6_K) {
    packed_q6_k_rows<MR, G>(a, m0, group, n0);
  } else {
    packed_rows<T, MR, G>(a, m0, group, n0);
  }
}

template <DType T, int MR>
void packed_group(const MatmulArgs& a, int64_t m0, const uint8_t* group, int64_t n0) {
  const uint8_t* const groups[1] = {group};
  const int64_t starts[1] = {n0};
  packed_type_rows<T, MR, 1>(a, m0, groups, starts);
}

// One row of x (decode) reads every weight once and is bound by memory: it takes kStreams groups
// at once from kStreams equal parts of the range, so as many sequential streams are in flight.
// More rows: the blocks of 32 and iq4_xs by x's panels (panel_matmul; the level packs x into them for
// every batch, pack_x), else a row at a time; the k-quants from kFoldedMinRows rows by the folded
// panels (avx512_folded.cpp), below that q4_k and q5_k two groups and four rows of x at a time
// (k4_batch_groups), q2_k, q3_k and q6_k one group at a time, eight rows of x at a time (then four,
// then the rest), so each 64 bytes of weights loaded serve eight rows, and eight rows' sums
// (sixteen chains for q6_k) hide vpdpbusd's latency.
template <DType T>
void packed_matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if constexpr (takes_panels(T)) {
    if (a.M > 1 && a.x_packed != nullptr) return panel_matmul<T>(a, n_begin, n_end);
  }
  const size_t group_bytes = a.w_row_bytes * kPackedRows;
  const auto group_at = [&](int64_t n0) { return a.w + static_cast<size_t>(n0 / kPackedRows) * group_bytes; };
  int64_t n_rest = n_begin;
  if (a.M == 1) {
    // q5_0 / q5_1: two (measured on Zen 5: four streams of their blocks, a unit of fifth bits and
    // four of nibbles, ran at 0.60 of read bandwidth, two at 0.78, the rows as stored at 0.79).
    constexpr int kStreams = packed_block_high_bytes(T) != 0 ? 2 : 4;
    const int64_t part = (n_end - n_begin) / kPackedRows / kStreams * kPackedRows;
    for (int64_t i = 0; i < part; i += kPackedRows) {
      int64_t n0[kStreams];
      const uint8_t* groups[kStreams];
      for (int s = 0; s < kStreams; ++s) {
        n0[s] = n_begin + s * part + i;
        groups[s] = group_at(n0[s]);
      }
      packed_type_rows<T, 1, kStreams>(a, 0, groups, n0);
    }
    n_rest = n_begin + kStreams * part;
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K || T == DType::Q6_K) {
    if (a.M >= kFoldedMinRows) return matmul_folded(a, n_begin, n_end);
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    if (a.M >= kFoldedMinRows) return matmul_folded(a, n_begin, n_end);
    // Scratch: two groups' factors, then x's sub-block sum pairs for every row, made once here.
    const int64_t supers = a.K / kQK_K;
    const int64_t factor_ints = 2 * supers * kK4FactorRows * kPackedRows;
    int32_t* scratch = int32_scratch(static_cast<size_t>(factor_ints + a.M * supers * 4));
    int32_t* x_pairs = scratch + factor_ints;
    for (int64_t m = 0; m < a.M; ++m) {
      for (int64_t s = 0; s < supers; ++s) k4_x_pairs(a, m, s, x_pairs + (m * supers + s) * 4);
    }
    int64_t n0 = n_begin;
    for (; n0 + 2 * kPackedRows <= n_end; n0 += 2 * kPackedRows) {
      const uint8_t* const groups[2] = {group_at(n0), group_at(n0) + group_bytes};
      const int64_t starts[2] = {n0, n0 + kPackedRows};
      k4_batch_groups<T, 2>(a, groups, starts, scratch, x_pairs);
    }
    if (n0 < n_end) {
      const uint8_t* const groups[1] = {group_at(n0)};
      const int64_t starts[1] = {n0};
      k4_batch_groups<T, 1>(a, groups, starts, scratch, x_pairs);
    }
    return;
  }
  for (int64_t n0 = n_rest; n0 < n_end; n0 += kPackedRows) {
    const uint8_t* group = group_at(n0);
    if constexpr (takes_panels(T) || T == DType::Q4_K || T == DType::Q5_K) {  // q4_k, q5_k: M is 1 here
      for (int64_t m = 0; m < a.M; ++m) packed_group<T, 1>(a, m, group, n0);
    } else {
      constexpr int kPackedBatchRows = 8;
      int64_t m = 0;
      for (; m + kPackedBatchRows <= a.M; m += kPackedBatchRows) packed_group<T, kPackedBatchRows>(a, m, group, n0);
      if (a.M - m >= 4) {
        packed_group<T, 4>(a, m, group, n0);
        m += 4;
      }
      switch (a.M - m) {
        case 3:
          packed_group<T, 3>(a, m, group, n0);
          break;
        case 2:
          packed_group<T, 2>(a, m, group, n0);
          break;
        case 1:
          packed_group<T, 1>(a, m, group, n0);
          break;
        default:
          break;
      }
    }
  }
}

// bf16 reaches vdpbf16ps only with a.xb set: the avx512bf16 level and amx (avx512_float_packed.h).
void matmul_packed_dot(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (is_packed_float(a.w_type)) return matmul_packed_float(a, n_begin, n_end);
  if (a.w_type == DType::Q8_0) return packed_matmul<DType::Q8_0>(a, n_begin, n_end);
  if (a.w_type == DType::Q2_K) return packed_matmul<DType::Q2_K>(a, n_begin, n_end);
  if (a.w_type == DType::Q3_K) return packed_matmul<DType::Q3_K>(a, n_begin, n_end);
  if (a.w_type == DType::Q4_K) return packed_matmul<DType::Q4_K>(a, n_begin, n_end);
  if (a.w_type == DType::Q5_K) return packed_matmul<DType::Q5_K>(a, n_begin, n_end);
  if (a.w_type == DType::Q6_K) return packed_matmul<DType::Q6_K>(a, n_begin, n_end);
  if (a.w_type == DType::IQ4_NL) return packed_matmul<DType::IQ4_NL>(a, n_begin, n_end);
  if (a.w_type == DType::Q4_1) return packed_matmul<DType::Q4_1>(a, n_begin, n_end);
  if (a.w_type == DType::Q5_0) return packed_matmul<DType::Q5_0>(a, n_begin, n_end);
  if (a.w_type == DType::Q5_1) return packed_matmul<DType::Q5_1>(a, n_begin, n_end);
  if (a.w_type == DType::IQ4_XS) return packed_matmul<DType::IQ4_XS>(a, n_begin, n_end);
  packed_matmul<DType::Q4_0>(a, n_begin, n_end);
}

// The level's copy of x (Isa::packed_x_size / pack_x): panels for a batch against the packed blocks
// of 32 or iq4_xs (the quants and starts in the bytes, the scales, and q4_1 / q5_1's sums, in the
// floats), nothing else.
void panel_x_size(const MatmulArgs& a, size_t* bytes, size_t* scales) {
  *bytes = 0;
  *scales = 0;
  if (!a.w_packed || a.M < 2 || !takes_panels(a.w_type)) return;
  const int64_t rows = panel_count(a) * kPanelRows, blocks = a.K / 32;
  *bytes = static_cast<size_t>(rows * a.K + rows * blocks * 4);
  *scales = static_cast<size_t>(rows * blocks * (has_mins(a.w_type) ? 2 : 1));
}

void pack_x_panels(const MatmulArgs& a, int64_t panel_begin, int64_t panel_end, uint8_t* packed, float* packed_scale) {
  const int64_t blocks = a.K / 32;
  // What x's sums start from: -(the unsigned bytes' excess) * (x's block sum), as packed_rows.
  const int32_t offset = nibble_offset(a.w_type);
  uint8_t* const starts_all = packed + panel_count(a) * kPanelRows * a.K;
  float* const sums_all = packed_scale + panel_count(a) * kPanelRows * blocks;  // q4_1, q5_1
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const int64_t m = panel * kPanelRows + r;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t at = (panel * blocks + b) * kPanelRows + r;
        uint8_t* q = packed + at * 32;
        int32_t start = 0;
        if (m < a.M) {
          const int8_t* x = a.xq + m * a.K + b * 32;
          int32_t sum = 0;
          for (int j = 0; j < 32; ++j) {
            sum += x[j];
            q[j] = a.w_type == DType::Q8_0 ? static_cast<uint8_t>(static_cast<uint8_t>(x[j]) ^ 0x80u)
                                           : static_cast<uint8_t>(x[j]);
          }
          start = -offset * sum;
          packed_scale[at] = a.xq_scale[x_scale_at(a.w_type, blocks, m, b)];
          if (has_mins(a.w_type)) sums_all[at] = a.xq_sum[m * blocks + b];
        } else {
          std::memset(q, 0, 32);
          packed_scale[at] = 0.0f;
          if (has_mins(a.w_type)) sums_all[at] = 0.0f;
        }
        std::memcpy(starts_all + at * 4, &start, 4);
      }
    }
  }
}

// The super-block code's vectors with VNNI: the scale products summed into the accumulator by one
// vpdpwssd (the same integers as vpmaddwd then vpaddd: no pair reaches -32768 * -32768).
struct V512Vnni : V512 {
  static I madd_add(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
};

// The two levels' matmul: their dot-product loops where they apply (the block types by
// simd_blocks.h's code with vpdpwssd), the avx512 level's elsewhere.
template <bool kBf16>
void matmul_dot(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.xq != nullptr && a.w_type == DType::Q8_0) {
    return simd::matmul_with_tile<VnniTile<DType::Q8_0>, 4>(a, n_begin, n_end);
  }
  if (a.xq != nullptr && a.w_type == DType::Q4_0) {
    return simd::matmul_with_tile<VnniTile<DType::Q4_0>, 4>(a, n_begin, n_end);
  }
  if (a.xq != nullptr && a.w_type == DType::Q4_1) {
    return simd::matmul_with_tile<VnniTile<DType::Q4_1>, 4>(a, n_begin, n_end);
  }
  if (a.xq != nullptr && a.w_type == DType::Q5_0) {
    return simd::matmul_with_tile<VnniTile<DType::Q5_0>, 4>(a, n_begin, n_end);
  }
  if (a.xq != nullptr && a.w_type == DType::Q5_1) {
    return simd::matmul_with_tile<VnniTile<DType::Q5_1>, 4>(a, n_begin, n_end);
  }
  if (a.xq != nullptr && a.w_type == DType::IQ4_NL) {
    return simd::matmul_with_tile<VnniTile<DType::IQ4_NL>, 4>(a, n_begin, n_end);
  }
  if (a.xq != nullptr && a.w_type == DType::IQ4_XS) return simd::matmul_with_tile<VnniIq4XsTile, 4>(a, n_begin, n_end);
  if constexpr (kBf16) {
    if (a.xb != nullptr && a.w_type == DType::BF16) return simd::matmul_with_tile<Bf16DotTile, 4>(a, n_begin, n_end);
  }
  if (a.xq != nullptr && is_block_type(a.w_type)) return blocks::matmul<Avx512, V512Vnni, 4>(a, n_begin, n_end);
  avx512_isa()->matmul(a, n_begin, n_end);
}

}  // namespace
}  // namespace ferry::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // x86-64 with GCC or Clang

namespace ferry::kernels::cpu {
// Both levels are the avx512 level's table with their own matmul (and, for bf16, the rounding of x).
const Isa* avx512_vnni_isa() {
#ifdef FERRY_HAVE_AVX512_DOT
  static const Isa isa = [] {
    Isa level = *avx512_isa();
    level.name = "avx512vnni";
    level.packed_x_size = panel_x_size;
    level.pack_x = pack_x_panels;
    level.matmul = matmul_dot<false>;
    level.matmul_packed = matmul_packed_dot;
    level.repacks = is_packable_type;
    level.packed_types = nullptr;  // every packable type (the avx512 table's are the float types)
    return level;
  }();
  return &isa;
#else
  return nullptr;
#endif
}
const Isa* avx512_bf16_isa() {
#ifdef FERRY_HAVE_AVX512_DOT
  static const Isa isa = [] {
    Isa level = *avx512_isa();
    level.name = "avx512bf16";
    level.packed_x_size = panel_x_size;
    level.pack_x = pack_x_panels;
    level.matmul = matmul_dot<true>;
    level.matmul_packed = matmul_packed_dot;
    level.repacks = is_packable_type;
    level.packed_types = nullptr;  // every packable type (the avx512 table's are the float types)
    level.round_row_bf16 = round_row_bf16_avx512;
    return level;
  }();
  return &isa;
#else
  return nullptr;
#endif
}
}  // namespace ferry::kernels::cpu
