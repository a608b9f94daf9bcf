// The amx level: avx512bf16, with the weights of every block type (q8_0, q4_0, q4_1, q5_0, q5_1,
// iq4_nl, q2_k..q6_k, iq4_xs) against x rounded as llama.cpp rounds it for them (q8_0, q8_1 or
// q8_K), and bf16 weights against x rounded to bf16, multiplied in Intel AMX tiles (Sapphire
// Rapids and later) wherever x has more than a few rows.
//
// Block types, x's quants copied per call with rows a cache line apart (pack_x). Blocks of 32
// (and q4_k, q5_k, iq4_xs in chunks of 32: k4_tiles, super_as_chunks): per block one tdpbssd takes 16 rows of
// x (tile 2 or 3) against 16 weight rows (tile 4 or 5: their quants as signed bytes in the order
// tdpbssd wants B, 4 bytes of each row per 64: a packed q8_0 group as stored, every other type
// unpacked once per call and group) and leaves the exact block dot products in tile 0 or 1. Two
// blocks are in flight: the tiles multiply one while the vector unit scales the other's sums, per
// output acc = fma(f32(dot), weight factor * x scale, acc), and for the types with mins
// acc = fma(weight min, x's scaled sum, acc), block after block; q4_k and q5_k scale each chunk's
// sums in int32 and take f32 steps per super-block (k4_group_tiles). q2_k, q3_k and q6_k go per
// super-block of 256 instead, their sub-blocks' scales inside the tiles' integer sums (planes,
// below). Either way every output is the same sequence of f32 operations whatever the tile it
// sits in or the thread, and for packed q8_0 / q4_0 / q4_k the vector loops' sequence (avx512_dot.cpp).
// Up to kMaxVectorRows rows of x (decode) take the vector loops of avx512bf16 instead; for the
// weights not packed, the same exact products summed in another order: on this level a row's
// result alone and in a batch of more than kMaxVectorRows can differ in the last bits.
//
// The tiles need the kernel's permission (cpu_features.cpp requests it); a CPU or kernel without
// AMX never lists this level.
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/cpu/amx_tiles.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/packed_weights.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu/x86_intrinsics.h"

namespace ferry::kernels::cpu {
namespace {

// This thread's scratch buffers, here before the target region: std:: templates instantiated in
// it would be compiled for AMX and AVX-512, and the linker may keep that copy for other files too.
enum class Scratch { WeightRows, WeightTiles, WeightFactors, PaddedFirst, PaddedSecond, Count };

[[maybe_unused]] void* scratch(Scratch which, size_t bytes, bool zeroed) {
  thread_local std::vector<uint8_t> buffers[static_cast<size_t>(Scratch::Count)];
  std::vector<uint8_t>& buffer = buffers[static_cast<size_t>(which)];
  if (buffer.size() < bytes) buffer.resize(bytes);
  if (zeroed) std::memset(buffer.data(), 0, bytes);
  return buffer.data();
}

// The types with packed tiles. q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q5_k, q6_k, iq4_xs and bf16
// stay as stored, their prompts going to the tiles as rows (unpacked_tiles, k4_tiles, super_tiles,
// bf16_tiles); a packed one (packed at another level) takes the vector loops at every batch. q5_k's
// tiles as stored give the packed vector loops' bits (k4_group_tiles), so packed q5_k tiles (q4_k's,
// with its fifth bits) would need no other change.
[[maybe_unused]] bool amx_repacks(DType type) {
  return type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_K;
}
// The types this level repacks (Isa::repacks): those, and f16 and f32, which no tile takes (the
// vector loops' FMAs on the packed rows at every batch, as on avx512vnni).
[[maybe_unused]] bool amx_level_repacks(DType type) {
  return amx_repacks(type) || type == DType::F16 || type == DType::F32;
}

}  // namespace
}  // namespace ferry::kernels::cpu

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AMX 1

#if defined(__clang__)
#pragma clang attribute push(                                                                                          \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8,amx-bf16"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8,amx-bf16")
#endif

#include "backends/cpu/kernels/cpu/packed_q4_k.h"        // templates only, as simd_block_decode.h
#include "backends/cpu/kernels/cpu/simd_block_decode.h"  // templates only: its headers are included above

namespace ferry::kernels::cpu {
namespace {

// The instantiation tag of simd_blocks.h's helpers in this file.
struct AmxTraits {};

// Matmul calls of up to this many rows of x (decode, and the few rows of a speculative step) go
// through the vector loops instead: a 16-row tile would be mostly padding, and packing x costs more than the
// tiles save (decode measured 25-45% slower through them). The results differ from the tiles' only
// in the order of the f32 sums.
constexpr int64_t kMaxVectorRows = 4;
constexpr int64_t kTile = 16;   // rows of a tile, and int32 columns of the sums' tile
constexpr int64_t kBlock = 32;  // a block of 32's elements: the K of one of its tdpbssd

constexpr int64_t kBf16Chunk = 32;         // bf16 elements of K per tdpbf16ps
constexpr int64_t kXBf16TileBytes = 1024;  // one chunk of 16 x rows in pairs: 16 rows of 64 bytes

// bf16: tiles 3 and 6 the f32 sums (16 x 16) of two tiles of weight rows, tiles 4 and 7 their
// weights (16 rows x 32 bf16), tile 5 x (16 rows x 64 bytes: row r holds elements 2r, 2r + 1 of
// each of the 16 x rows).
constexpr AmxTileConfig kBf16Tiles =
    AmxTileConfig{}.tile(3, 16, 64).tile(4, 16, 64).tile(5, 16, 64).tile(6, 16, 64).tile(7, 16, 64);

// Loads the configuration where the thread's current one is another (none: the loops release the
// tiles when done; or another user's, such as the peak probe of bench_kernels). Reading it back
// is cheap.
void configure_tiles(const AmxTileConfig& config) {
  AmxTileConfig current;
  _tile_storeconfig(&current);
  if (std::memcmp(&current, &config, sizeof(AmxTileConfig)) != 0) _tile_loadconfig(&config);
}

// Blocks of 32: tiles 0 and 1 the int32 sums (16 x 16), 2 and 3 x (16 rows x 32 bytes), 4 and 5
// the weights (8 rows of 64 bytes).
constexpr AmxTileConfig kBlockTiles =
    AmxTileConfig{}.tile(0, 16, 64).tile(1, 16, 64).tile(2, 16, 32).tile(3, 16, 32).tile(4, 8, 64).tile(5, 8, 64);

// x's tiles go in groups of about kGroupBytes, which stay in L2 while every weight tile of the
// thread's range passes them (all of a long prompt's would not fit, and come from L3 each time).
int64_t tiles_per_group(int64_t tile_bytes) {
  constexpr int64_t kGroupBytes = int64_t{1} << 20;
  return kGroupBytes / tile_bytes > 0 ? kGroupBytes / tile_bytes : 1;
}

// The super-block types the tiles take in chunks of 32 as the blocks of 32 (a tdpbssd and a scaling
// of its sums per chunk), not in planes per super-block (super_tiles): those whose sc * q takes
// two planes and whose sub-blocks are 32 long. Measured at K = 4096, 512 rows of x (BM_Prefill):
// q4_k and q5_k ran 1.4-1.7x faster in chunks than in planes (now k4_tiles'), iq4_xs 1.2x; q2_k
// and q3_k 1.3-1.5x faster in planes than in chunks of 16, q6_k level (planes spare it a loop of
// 16-element chunks).
constexpr bool super_as_chunks(DType t) {
  return t == DType::IQ4_XS;
}

// The bytes of one block of T (a compile-time constant in the unpackers' loops).
template <DType T>
constexpr size_t block_bytes() {
  switch (T) {
    case DType::Q8_0:
      return sizeof(BlockQ8_0);
    case DType::Q4_0:
      return sizeof(BlockQ4_0);
    case DType::Q4_1:
      return sizeof(BlockQ4_1);
    case DType::Q5_0:
      return sizeof(BlockQ5_0);
    case DType::Q5_1:
      return sizeof(BlockQ5_1);
    case DType::IQ4_NL:
      return sizeof(BlockIQ4_NL);
    case DType::Q2_K:
      return sizeof(BlockQ2_K);
    case DType::Q3_K:
      return sizeof(BlockQ3_K);
    case DType::Q4_K:
      return sizeof(BlockQ4_K);
    case DType::Q5_K:
      return sizeof(BlockQ5_K);
    case DType::Q6_K:
      return sizeof(BlockQ6_K);
    case DType::IQ4_XS:
      return sizeof(BlockIQ4_XS);
    default:
      return 0;
  }
}

// The weight types the tiles take against rounded x: q8_0, q4_0 and every block type.
bool has_tiles(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || is_block_type(t);
}

// The bytes from one row of x's quants to the next in the tiles' copy: a tile's 16 rows K = 4096
// bytes apart would all fall in one set of L1 and evict each other; a cache line more spreads them.
int64_t x_row_bytes(int64_t K) {
  return (K + 63) / 64 * 64 + 64;
}

// x's factors per row in the tiles' copy (pack_x): its scales (q8_0 / q8_1: per 32; q8_K: per 256,
// or for super_as_chunks repeated per 32), then the sums the weights' mins meet: q8_1's s per 32
// (q4_k's and q5_k's mins meet x's q8_K sums, a.xq_bsum, in k4_group_tiles).
struct XFactorRows {
  int64_t scales = 0;
  int64_t sums = 0;
};
XFactorRows x_factor_rows(const MatmulArgs& a) {
  switch (activation_quant(a.w_type)) {
    case ActivationQuant::Q8_K:  // iq4_xs's chunks per 32 (pack_x), the rest per 256
      if (super_as_chunks(a.w_type)) return {a.K / 32, 0};
      return {a.K / kQK_K, 0};
    case ActivationQuant::Q8_1:
      return {a.K / 32, a.K / 32};
    default:
      return {a.K / 32, 0};
  }
}

// Packed weights that take avx512bf16's vector loops (matmul_packed_amx): small calls, and at every
// batch the types without packed tiles. Their x is that level's copy (its panels), or none.
bool takes_vector_loops(const MatmulArgs& a) {
  return a.w_packed && (a.call_rows <= kMaxVectorRows || !amx_repacks(a.w_type));
}

void packed_x_size(const MatmulArgs& a, size_t* bytes, size_t* scales) {
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  *bytes = 0;
  *scales = 0;
  if (takes_vector_loops(a)) return avx512_bf16_isa()->packed_x_size(a, bytes, scales);
  // Small calls on weights as stored: avx512bf16's matmul, on x in rows.
  if (a.call_rows <= kMaxVectorRows) return;
  if (has_tiles(a.w_type)) {  // x's rows x_row_bytes apart, zero past M; q8_1's sums for the mins
    *bytes = static_cast<size_t>(m_tiles * kTile * x_row_bytes(a.K));
    const XFactorRows rows = x_factor_rows(a);
    *scales = static_cast<size_t>(m_tiles * kTile * (rows.scales + rows.sums));
  } else if (a.w_type == DType::BF16) {
    *bytes = static_cast<size_t>(m_tiles * ((a.K + kBf16Chunk - 1) / kBf16Chunk) * kXBf16TileBytes);
  }
}

// Block types: x's quants, rows x_row_bytes(K) apart and zero rows from M to a whole tile, so every
// tile loads 16 rows; and x's factors (x_factor_rows).
// bf16: x as tile 5 wants it, per 16 rows and chunk: [m_tile][chunk][r][row][4 bytes], rows past
// M and elements past K zero.
void pack_x(const MatmulArgs& a, int64_t tile_begin, int64_t tile_end, uint8_t* packed, float* packed_scale) {
  if (takes_vector_loops(a)) return avx512_bf16_isa()->pack_x(a, tile_begin, tile_end, packed, packed_scale);
  if (a.w_type != DType::BF16) {
    const int64_t stride = x_row_bytes(a.K);
    const XFactorRows rows = x_factor_rows(a);
    float* scales = packed_scale;
    float* sums = packed_scale + (a.M + kTile - 1) / kTile * kTile * rows.scales;
    for (int64_t m = tile_begin * kTile; m < tile_end * kTile; ++m) {
      // Rows past M zero, factors included, so a tile's loop takes all 16 rows (its accumulators
      // stay in registers) and writes only the real ones.
      const bool real = m < a.M;
      if (real) std::memcpy(packed + m * stride, a.xq + m * a.K, static_cast<size_t>(a.K));
      std::memset(packed + m * stride + (real ? a.K : 0), 0, static_cast<size_t>(real ? stride - a.K : stride));
      float* row_scales = scales + m * rows.scales;
      float* row_sums = sums + m * rows.sums;
      if (!real) {
        std::memset(row_scales, 0, static_cast<size_t>(rows.scales) * 4);
        std::memset(row_sums, 0, static_cast<size_t>(rows.sums) * 4);
      } else if (super_as_chunks(a.w_type)) {  // q8_K's scale per 32
        for (int64_t c = 0; c < rows.scales; ++c) row_scales[c] = a.xq_scale[m * (a.K / kQK_K) + c / 8];
      } else {
        std::memcpy(row_scales, a.xq_scale + m * rows.scales, static_cast<size_t>(rows.scales) * 4);
        if (rows.sums > 0) std::memcpy(row_sums, a.xq_sum + m * rows.sums, static_cast<size_t>(rows.sums) * 4);
      }
    }
    return;
  }
  const int64_t row_bytes = a.K * 2;
  const int64_t block_bytes = kBf16Chunk * 2;
  const int64_t blocks = (row_bytes + block_bytes - 1) / block_bytes;
  const auto* x = reinterpret_cast<const uint8_t*>(a.xb);
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* tile = packed + (t * blocks + b) * kXBf16TileBytes;
      for (int64_t i = 0; i < kTile; ++i) {
        const int64_t m = t * kTile + i;
        const int64_t begin = b * block_bytes;
        const int64_t valid = m < a.M ? (row_bytes - begin < block_bytes ? row_bytes - begin : block_bytes) : 0;
        for (int64_t r = 0; r < block_bytes / 4; ++r) {
          uint8_t* word = tile + r * 64 + i * 4;
          if (r * 4 + 4 <= valid) {
            std::memcpy(word, x + m * row_bytes + begin + r * 4, 4);
          } else {
            std::memset(word, 0, 4);
            if (r * 4 < valid) std::memcpy(word, x + m * row_bytes + begin + r * 4, static_cast<size_t>(valid - r * 4));
          }
        }
      }
    }
  }
  (void)packed_scale;
}

// Sixteen rows of a block type of 32 (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) from n0 (zero past
// n_end): the integers each element's value multiplies (q4_0's q - 8, quant_blocks.cpp's
// block32_quants for the rest), decoded 32 at a time in vectors, [16][K], and the factors,
// scales[b][16] and mins[b][16] (WeightTiles).
template <DType T>
void unpack_block_rows(const MatmulArgs& a, int64_t n0, int64_t n_end, int8_t* rows, float* scales, float* mins) {
  using S = AmxTraits;
  const int64_t blocks_per_row = a.K / 32;
  const auto f16 = [&](const uint8_t* p) { return a.f16_table[blocks::u16_at<S>(p)]; };
  for (int64_t i = 0; i < kTile; ++i) {
    int8_t* row = rows + i * a.K;
    if (n0 + i >= n_end) {
      std::memset(row, 0, static_cast<size_t>(a.K));
      for (int64_t b = 0; b < blocks_per_row; ++b) scales[b * kTile + i] = mins[b * kTile + i] = 0.0f;
      continue;
    }
    const uint8_t* w = a.w + static_cast<size_t>(n0 + i) * a.w_row_bytes;
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      const uint8_t* block = w + static_cast<size_t>(b) * block_bytes<T>();
      __m256i q;
      if constexpr (T == DType::Q8_0) q = blocks::load32<S>(block + 2);
      if constexpr (T == DType::Q4_0) q = _mm256_sub_epi8(blocks::nibbles<S>(block + 2), _mm256_set1_epi8(8));
      if constexpr (T == DType::Q4_1) q = blocks::nibbles<S>(block + 4);
      if constexpr (T == DType::Q5_0) {
        q = _mm256_or_si256(blocks::nibbles<S>(block + 6), blocks::fifth_bits<S>(blocks::u32_at<S>(block + 2)));
        q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
      }
      if constexpr (T == DType::Q5_1) {
        q = _mm256_or_si256(blocks::nibbles<S>(block + 8), blocks::fifth_bits<S>(blocks::u32_at<S>(block + 4)));
      }
      if constexpr (T == DType::IQ4_NL) q = blocks::iq4_values<S>(blocks::nibbles<S>(block + 2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + b * 32), q);
      scales[b * kTile + i] = f16(block);
      mins[b * kTile + i] = T == DType::Q4_1 || T == DType::Q5_1 ? f16(block + 2) : 0.0f;
    }
  }
}

// One super-block of a row (either way, planes or chunks): q[256] as signed bytes, the integer scale and min of each 16
// elements (sc[16], m[16]), and d and dmin (value = d * sc * q - dmin * m); q3_k's sc negated and its d with it, so
// that sc * q fits a signed byte.
struct SuperBlock {
  alignas(32) int8_t q[kQK_K];
  int16_t sc[16];
  int16_t m[16];
  float d;
  float dmin;
};

template <DType T>
void decode_super_block(const MatmulArgs& a, const uint8_t* block, SuperBlock& out) {
  using S = AmxTraits;
  const auto f16 = [&](const uint8_t* p) { return a.f16_table[blocks::u16_at<S>(p)]; };
  const auto store = [&](int64_t at, __m256i q) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + at), q); };
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int s = 0; s < 16; ++s) out.m[s] = 0;
  out.dmin = 0.0f;
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    constexpr size_t kQs = T == DType::Q4_K ? 16 : 48;  // offset of qs in the block
    uint8_t sc[8], m[8];
    unpack_scales_k4(block + 4, sc, m);
    // Sub-blocks 2p and 2p + 1: the low and high nibbles of qs[32 p, 32 p + 32); q5_k's fifth bit
    // of element l of sub-block j is bit j of qh[l].
    [[maybe_unused]] const __m256i qh = blocks::load32<S>(block + 16);
    for (int p = 0; p < 4; ++p) {
      const __m256i bytes = blocks::load32<S>(block + kQs + 32 * p);
      __m256i q_low = _mm256_and_si256(bytes, low4);
      __m256i q_high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      if constexpr (T == DType::Q5_K) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i bit_low = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), one);
        const __m256i bit_high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p + 1)), one);
        q_low = _mm256_or_si256(q_low, _mm256_slli_epi16(bit_low, 4));
        q_high = _mm256_or_si256(q_high, _mm256_slli_epi16(bit_high, 4));
      }
      store(64 * p, q_low);
      store(64 * p + 32, q_high);
    }
    for (int s = 0; s < 16; ++s) {
      out.sc[s] = sc[s / 2];
      out.m[s] = m[s / 2];
    }
    out.d = f16(block);
    out.dmin = f16(block + 2);
  } else if constexpr (T == DType::Q6_K) {
    // Element 128 h + 32 c + l: low 4 bits from ql[64 h + 32 (c % 2) + l] (low nibble for c < 2),
    // high 2 bits from qh[32 h + l] >> 2 c.
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = blocks::load32<S>(block + 128 + 32 * h);
      for (int c = 0; c < 4; ++c) {
        const __m256i ql = blocks::load32<S>(block + 64 * h + 32 * (c % 2));
        const __m256i low = _mm256_and_si256(c < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), _mm256_set1_epi8(3));
        store(128 * h + 32 * c,
              _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32)));
      }
    }
    for (int s = 0; s < 16; ++s) out.sc[s] = static_cast<int8_t>(block[192 + s]);
    out.d = f16(block + 208);
  } else if constexpr (T == DType::IQ4_XS) {
    const uint16_t high = blocks::u16_at<S>(block + 2);
    for (int j = 0; j < 8; ++j) {
      store(32 * j, blocks::iq4_values<S>(blocks::nibbles<S>(block + 8 + 16 * j)));
      const int ls = ((block[4 + j / 2] >> (4 * (j % 2))) & 15) | (((high >> (2 * j)) & 3) << 4);
      out.sc[2 * j] = out.sc[2 * j + 1] = static_cast<int16_t>(ls - 32);
    }
    out.d = f16(block);
  } else {  // q2_k, q3_k: element 128 h + 32 c + l in bits 2c, 2c + 1 of qs[32 h + l]
    const uint8_t* qs = block + (T == DType::Q2_K ? 16 : 32);
    [[maybe_unused]] const __m256i hmask = blocks::load32<S>(block);
    for (int h = 0; h < 2; ++h) {
      const __m256i plane = blocks::load32<S>(qs + 32 * h);
      for (int c = 0; c < 4; ++c) {
        __m256i q = _mm256_and_si256(_mm256_srl_epi16(plane, _mm_cvtsi32_si128(2 * c)), _mm256_set1_epi8(3));
        if constexpr (T == DType::Q3_K) {  // the high bit, bit 4h + c of hmask[l], clear means - 4
          const __m256i bit =
              _mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128(4 * h + c)), _mm256_set1_epi8(1));
          q = _mm256_sub_epi8(_mm256_or_si256(q, _mm256_slli_epi16(bit, 2)), _mm256_set1_epi8(4));
        }
        store(128 * h + 32 * c, q);
      }
    }
    if constexpr (T == DType::Q2_K) {
      for (int s = 0; s < 16; ++s) {
        out.sc[s] = block[s] & 15;
        out.m[s] = block[s] >> 4;
      }
      out.d = f16(block + 80);
      out.dmin = f16(block + 82);
    } else {
      uint8_t sc[16];
      unpack_scales_q3_k(block + 96, sc);
      for (int s = 0; s < 16; ++s) out.sc[s] = static_cast<int16_t>(32 - sc[s]);  // negated: see SuperBlock
      out.d = -f16(block + 108);
    }
  }
}

// Sixteen iq4_xs rows from n0 (zero past n_end) as chunks of 32 (super_as_chunks):
// the quants, [16][K], and per chunk c the factors scales[c][16] = d * sc (mins[c][16] = -dmin * m:
// zero for iq4_xs, which has none).
template <DType T>
void unpack_super_chunks(const MatmulArgs& a, int64_t n0, int64_t n_end, int8_t* rows, float* scales, float* mins) {
  const int64_t supers = a.K / kQK_K;
  SuperBlock sb;
  for (int64_t i = 0; i < kTile; ++i) {
    int8_t* row = rows + i * a.K;
    if (n0 + i >= n_end) {
      std::memset(row, 0, static_cast<size_t>(a.K));
      for (int64_t c = 0; c < a.K / 32; ++c) scales[c * kTile + i] = mins[c * kTile + i] = 0.0f;
      continue;
    }
    const uint8_t* w = a.w + static_cast<size_t>(n0 + i) * a.w_row_bytes;
    for (int64_t g = 0; g < supers; ++g) {
      decode_super_block<T>(a, w + static_cast<size_t>(g) * block_bytes<T>(), sb);
      std::memcpy(row + g * kQK_K, sb.q, kQK_K);
      for (int64_t j = 0; j < 8; ++j) {
        scales[(g * 8 + j) * kTile + i] = sb.d * static_cast<float>(sb.sc[2 * j]);
        mins[(g * 8 + j) * kTile + i] = -(sb.dmin * static_cast<float>(sb.m[2 * j]));
      }
    }
  }
}

// y for x tile t and weight rows [n0, n0 + count), from the tile of results out[weight row][x row].
void write_tile(const MatmulArgs& a, int64_t t, int64_t n0, int64_t count, const float (&out)[kTile][kTile]) {
  const int64_t m_count = a.M - t * kTile < kTile ? a.M - t * kTile : kTile;
  for (int64_t i = 0; i < count; ++i) {
    const float bias = a.bias ? a.bias[n0 + i] : 0.0f;
    for (int64_t m = 0; m < m_count; ++m) a.y[(t * kTile + m) * a.y_stride + n0 + i] = out[i][m] + bias;
  }
}

// Sixteen weight rows as signed bytes, [16][K], to the B tiles of tdpbssd: per 32 elements of K, 8
// rows of 64 bytes, row r holding bytes 4r..4r+3 of each of the 16 rows in turn (a packed q8_0
// group's order).
void rows_to_tiles(const int8_t* rows, int64_t K, uint8_t* tiles) {
  for (int64_t c = 0; c < K / 32; ++c) {
    __m256i out[2][8];
    for (int h = 0; h < 2; ++h) {  // rows 8h..8h+7: an 8 x 8 transpose of 4-byte units
      __m256i r[8], t[8], u[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + (8 * h + i) * K + c * 32));
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
      }
      for (int i = 0; i < 4; ++i) {
        out[h][i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        out[h][i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
      }
    }
    for (int i = 0; i < 8; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(tiles + c * 512 + i * 64), out[0][i]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(tiles + c * 512 + i * 64 + 32), out[1][i]);
    }
  }
}

// One group of 16 weight rows as the tiles take it: per sub-block s the B tile at tiles + s *
// tile_step, and the rows' factors, [s][16]: the dot product of a weight row with x's quants is
// the sum over s of scales[s] * x's scale * dot_s + mins[s] * x's scaled sum of sub-block s (q8_1's
// s): q4_1 / q5_1's m.
// mins nullptr: a type without.
struct WeightTiles {
  const uint8_t* tiles = nullptr;
  int64_t tile_step = 0;
  const float* scales = nullptr;
  const float* mins = nullptr;
};

// x's factors for row m and block b (pack_x's copy): the scale its dot products take,
// scale[m * scale_row + b], and q8_1's s the mins meet, sum[m * sum_row + b].
struct XFactors {
  const float* scale = nullptr;
  int64_t scale_row = 0;
  const float* sum = nullptr;
  int64_t sum_row = 0;
};

XFactors x_factors(const MatmulArgs& a) {
  const XFactorRows rows = x_factor_rows(a);
  return {a.x_packed_scale, rows.scales, a.x_packed_scale + (a.M + kTile - 1) / kTile * kTile * rows.scales, rows.sums};
}

// One sub-block's products into sums tile 0 (x in tile 2, weights in 4) or 1 (3, 5): the tile
// intrinsics take literal tile numbers.
void multiply_even(const int8_t* x, int64_t x_stride, const uint8_t* weights) {
  _tile_zero(0);
  _tile_loadd(2, x, static_cast<long>(x_stride));
  _tile_loadd(4, weights, 64);
  _tile_dpbssd(0, 2, 4);
}
void multiply_odd(const int8_t* x, int64_t x_stride, const uint8_t* weights) {
  _tile_zero(1);
  _tile_loadd(3, x, static_cast<long>(x_stride));
  _tile_loadd(5, weights, 64);
  _tile_dpbssd(1, 3, 5);
}

// acc[i] = fma(f32(sub-block s's sums of x row m0 + i), weight factors * x scale, acc[i]), then
// with mins acc[i] = fma(weight mins, x's scaled sum, acc[i]).
template <bool kMins>
void scale_sums(const XFactors& x, const WeightTiles& w, int64_t m0, int64_t s, const int32_t (&sums)[kTile][kTile],
                __m512 (&acc)[kTile]) {
  const __m512 w_scale = _mm512_loadu_ps(w.scales + s * kTile);
  [[maybe_unused]] const __m512 w_min = kMins ? _mm512_loadu_ps(w.mins + s * kTile) : _mm512_setzero_ps();
  const float* x_scale = x.scale + m0 * x.scale_row + s;
  [[maybe_unused]] const float* x_sum = kMins ? x.sum + m0 * x.sum_row + s : nullptr;
#pragma GCC unroll 16
  for (int64_t i = 0; i < kTile; ++i) {
    const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x_scale[i * x.scale_row]));
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[i])), scale, acc[i]);
    if constexpr (kMins) acc[i] = _mm512_fmadd_ps(w_min, _mm512_set1_ps(x_sum[i * x.sum_row]), acc[i]);
  }
}

// Outputs [n0, n0 + count) of x's tiles [t0, t1) from one group's weight tiles, sub-block after
// sub-block, two in flight.
template <bool kMins>
void group_tiles(const MatmulArgs& a, const XFactors& xf, int64_t t0, int64_t t1, int64_t n0, int64_t count,
                 const WeightTiles& w) {
  const int64_t subs = a.K / kBlock;
  const int64_t full_tiles = a.M / kTile;
  const int64_t x_stride = x_row_bytes(a.K);
  const auto mask = static_cast<__mmask16>((1u << count) - 1);
  const __m512 bias = a.bias != nullptr ? _mm512_maskz_loadu_ps(mask, a.bias + n0) : _mm512_setzero_ps();
  alignas(64) int32_t sums[kTile][kTile];
  for (int64_t t = t0; t < t1; ++t) {
    const int8_t* x = reinterpret_cast<const int8_t*>(a.x_packed) + t * kTile * x_stride;
    const int64_t rows = t < full_tiles ? kTile : a.M - t * kTile;
    __m512 acc[kTile];
    for (__m512& v : acc) v = _mm512_setzero_ps();
    multiply_even(x, x_stride, w.tiles);
    for (int64_t s = 0; s < subs; s += 2) {
      if (s + 1 < subs) multiply_odd(x + (s + 1) * kBlock, x_stride, w.tiles + (s + 1) * w.tile_step);
      _tile_stored(0, sums, 64);
      scale_sums<kMins>(xf, w, t * kTile, s, sums, acc);
      if (s + 1 < subs) {
        if (s + 2 < subs) multiply_even(x + (s + 2) * kBlock, x_stride, w.tiles + (s + 2) * w.tile_step);
        _tile_stored(1, sums, 64);
        scale_sums<kMins>(xf, w, t * kTile, s + 1, sums, acc);
      }
    }
    // Constant indices (unrolled, the rows past M skipped), so acc stays in registers.
#pragma GCC unroll 16
    for (int64_t i = 0; i < kTile; ++i) {
      if (i < rows) _mm512_mask_storeu_ps(a.y + (t * kTile + i) * a.y_stride + n0, mask, _mm512_add_ps(acc[i], bias));
    }
  }
}

// for_group(t0, t1, n0, count): x's tiles [t0, t1) against the 16 weight rows from n0 (count of
// them real), x's tiles in parts of about 1 MiB of quants (tiles_per_group), each part against
// every group of [n_begin, n_end), in the blocks' tile configuration.
template <class ForGroup>
void each_block_group(const MatmulArgs& a, int64_t n_begin, int64_t n_end, ForGroup&& for_group) {
  configure_tiles(kBlockTiles);
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  const int64_t group = tiles_per_group(kTile * x_row_bytes(a.K));
  for (int64_t t0 = 0; t0 < m_tiles; t0 += group) {
    const int64_t t1 = t0 + group < m_tiles ? t0 + group : m_tiles;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kTile) for_group(t0, t1, n0, n_end - n0 < kTile ? n_end - n0 : kTile);
  }
  _tile_release();  // an idle thread with tiles in use would have their 8 KiB saved at every switch
}

// The weights of [n_begin, n_end) a group of 16 rows at a time, each group unpacked once
// (weight_tiles) for all of a group of x's tiles.
template <bool kMins, class Unpack>
void block_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end, Unpack&& weight_tiles) {
  const XFactors xf = x_factors(a);
  each_block_group(a, n_begin, n_end, [&](int64_t t0, int64_t t1, int64_t n0, int64_t count) {
    group_tiles<kMins>(a, xf, t0, t1, n0, count, weight_tiles(n0));
  });
}

// ---- q4_k and q5_k in chunks of 32 with int32 sums per super-block (k4_chunks) -----------------
// Per chunk (sub-block j) the tiles' exact dot products, times the weight rows' 6-bit scale sc_j
// (vpmulld) and summed over the super-block in int32; with sum_j m_j * (x's sum over sub-block j)
// (vpdpwssd), add_super_block's two f32 steps (packed_q4_k.h): the vector loops' operations
// (avx512_dot.cpp packed_k4_rows), so packed q4_k / q5_k give the same bits in tiles and loops, and
// q4_k's tiles the same from either layout.

// One group's factors, per super-block s: sc[s][8][16] (int32), the mins of sub-blocks 2k and 2k +
// 1 as int16 pairs, min_pair[s][4][16], and d[s][16], dmin_neg[s][16] (-dmin).
struct K4Factors {
  int32_t* sc = nullptr;
  int32_t* min_pair = nullptr;
  float* d = nullptr;
  float* dmin_neg = nullptr;
};

K4Factors k4_factors(int64_t supers) {
  auto* ints =
      static_cast<int32_t*>(scratch(Scratch::WeightFactors, static_cast<size_t>(14 * supers * kTile) * 4, false));
  auto* floats = reinterpret_cast<float*>(ints + 12 * supers * kTile);
  return {ints, ints + 8 * supers * kTile, floats, floats + supers * kTile};
}

// Outputs [n0, n0 + count) of x's tiles [t0, t1) from one group's chunk tiles (512 bytes apart)
// and factors, chunk after chunk, two in flight as group_tiles.
void k4_group_tiles(const MatmulArgs& a, int64_t t0, int64_t t1, int64_t n0, int64_t count, const uint8_t* tiles,
                    const K4Factors& f) {
  using S = AmxTraits;
  const int64_t supers = a.K / kQK_K;
  const int64_t chunks = a.K / kBlock;
  const int64_t full_tiles = a.M / kTile;
  const int64_t x_stride = x_row_bytes(a.K);
  const auto mask = static_cast<__mmask16>((1u << count) - 1);
  const __m512 bias = a.bias != nullptr ? _mm512_maskz_loadu_ps(mask, a.bias + n0) : _mm512_setzero_ps();
  alignas(64) int32_t sums[kTile][kTile];
  alignas(64) int32_t total[kTile][kTile];
  // Adds chunk c's sums times its scales into the super-block's totals (the first chunk sets them).
  const auto add_chunk = [&](int64_t c) {
    const __m512i sc = _mm512_loadu_si512(f.sc + c * kTile);
    const bool first = c % 8 == 0;
#pragma GCC unroll 16
    for (int64_t i = 0; i < kTile; ++i) {
      const __m512i scaled = _mm512_mullo_epi32(_mm512_load_si512(sums[i]), sc);
      _mm512_store_si512(total[i], first ? scaled : _mm512_add_epi32(_mm512_load_si512(total[i]), scaled));
    }
  };
  for (int64_t t = t0; t < t1; ++t) {
    const int8_t* x = reinterpret_cast<const int8_t*>(a.x_packed) + t * kTile * x_stride;
    const float* x_scale = a.x_packed_scale + t * kTile * supers;  // x_factor_rows: per 256, zero past M
    const int64_t rows = t < full_tiles ? kTile : a.M - t * kTile;
    __m512 acc[kTile];
    for (__m512& v : acc) v = _mm512_setzero_ps();
    // After super-block s's last chunk: its mins and the two f32 steps.
    const auto finish = [&](int64_t s) {
      const __m512 d = _mm512_loadu_ps(f.d + s * kTile);
      const __m512 dmin_neg = _mm512_loadu_ps(f.dmin_neg + s * kTile);
#pragma GCC unroll 16
      for (int64_t i = 0; i < kTile; ++i) {
        __m512i mins = _mm512_setzero_si512();
        if (i < rows) {
          const int16_t* bsum = a.xq_bsum + (t * kTile + i) * (a.K / 16) + s * 16;
          for (int k = 0; k < 4; ++k) {
            mins = _mm512_dpwssd_epi32(mins, _mm512_loadu_si512(f.min_pair + (s * 4 + k) * kTile),
                                       _mm512_set1_epi32(packed_q4_k::x_sum_pair<S>(bsum, k)));
          }
        }
        acc[i] = packed_q4_k::add_super_block<S>(acc[i], _mm512_load_si512(total[i]), mins, d, dmin_neg,
                                                 x_scale[i * supers + s]);
      }
    };
    multiply_even(x, x_stride, tiles);
    for (int64_t c = 0; c < chunks; c += 2) {  // chunks: a multiple of 8
      multiply_odd(x + (c + 1) * kBlock, x_stride, tiles + (c + 1) * 512);
      _tile_stored(0, sums, 64);
      add_chunk(c);
      if (c + 2 < chunks) multiply_even(x + (c + 2) * kBlock, x_stride, tiles + (c + 2) * 512);
      _tile_stored(1, sums, 64);
      add_chunk(c + 1);
      if ((c + 2) % 8 == 0) finish(c / 8);
    }
#pragma GCC unroll 16
    for (int64_t i = 0; i < kTile; ++i) {
      if (i < rows) _mm512_mask_storeu_ps(a.y + (t * kTile + i) * a.y_stride + n0, mask, _mm512_add_ps(acc[i], bias));
    }
  }
}

// The groups of [n_begin, n_end), each unpacked once (weight_tiles: its chunk tiles, factors in f)
// for a group of x's tiles, as block_tiles.
template <class Unpack>
void k4_block_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end, const K4Factors& f, Unpack&& weight_tiles) {
  each_block_group(a, n_begin, n_end, [&](int64_t t0, int64_t t1, int64_t n0, int64_t count) {
    k4_group_tiles(a, t0, t1, n0, count, weight_tiles(n0), f);
  });
}

// q4_k / q5_k rows as stored: sixteen rows from n0 (zero past n_end) decoded to signed bytes, [16][K],
// then to chunk tiles, and their factors (K4Factors).
template <DType T>
void k4_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t supers = a.K / kQK_K;
  auto* rows = static_cast<int8_t*>(scratch(Scratch::WeightRows, static_cast<size_t>(kTile * a.K), false));
  auto* tiles = static_cast<uint8_t*>(scratch(Scratch::WeightTiles, static_cast<size_t>(kTile * a.K), false));
  const K4Factors f = k4_factors(supers);
  k4_block_tiles(a, n_begin, n_end, f, [&](int64_t n0) {
    SuperBlock sb;
    for (int64_t i = 0; i < kTile; ++i) {
      const bool real = n0 + i < n_end;
      const uint8_t* w = a.w + static_cast<size_t>(n0 + i) * a.w_row_bytes;
      for (int64_t s = 0; s < supers; ++s) {
        if (real) {
          decode_super_block<T>(a, w + static_cast<size_t>(s) * block_bytes<T>(), sb);
        } else {
          std::memset(&sb, 0, sizeof(sb));
        }
        std::memcpy(rows + i * a.K + s * kQK_K, sb.q, kQK_K);
        for (int64_t j = 0; j < 8; ++j) f.sc[(s * 8 + j) * kTile + i] = sb.sc[2 * j];  // sc[], m[]: per 16
        for (int64_t k = 0; k < 4; ++k) {
          f.min_pair[(s * 4 + k) * kTile + i] =
              static_cast<int32_t>(static_cast<uint32_t>(sb.m[4 * k]) | (static_cast<uint32_t>(sb.m[4 * k + 2]) << 16));
        }
        f.d[s * kTile + i] = sb.d;
        f.dmin_neg[s * kTile + i] = -sb.dmin;
      }
    }
    rows_to_tiles(rows, a.K, tiles);
    return tiles;
  });
}

// Blocks of 32 and super_as_chunks as stored: each group's rows unpacked to signed bytes and
// factors, then to B tiles.
template <DType T>
void unpacked_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr bool kMins = T == DType::Q4_1 || T == DType::Q5_1;
  const int64_t blocks = a.K / kBlock;
  auto* rows = static_cast<int8_t*>(scratch(Scratch::WeightRows, static_cast<size_t>(kTile * a.K), false));
  auto* tiles = static_cast<uint8_t*>(scratch(Scratch::WeightTiles, static_cast<size_t>(kTile * a.K), false));
  auto* factors =
      static_cast<float*>(scratch(Scratch::WeightFactors, static_cast<size_t>(2 * blocks * kTile) * 4, false));
  float* scales = factors;
  float* mins = factors + blocks * kTile;
  block_tiles<kMins>(a, n_begin, n_end, [&](int64_t n0) {
    if constexpr (super_as_chunks(T)) {
      unpack_super_chunks<T>(a, n0, n_end, rows, scales, mins);
    } else {
      unpack_block_rows<T>(a, n0, n_end, rows, scales, mins);
    }
    rows_to_tiles(rows, a.K, tiles);
    return WeightTiles{tiles, kBlock * kTile, scales, kMins ? mins : nullptr};
  });
}

// ---- super-blocks of 256 in planes (q2_k, q3_k, q6_k; the rest in chunks) ------
//
// Per super-block each weight element's integer factor sc * q (its sub-block's scale times its
// quant) and x's quants meet in exact int32 sums over all 256 elements: the tiles do the per
// sub-block scaling, and the vector unit scales one sum per super-block (d * x's scale) instead of
// one per sub-block. q6_k's sc * q takes up to 13 bits, so it goes to the tiles as two planes of
// signed bytes, hi = (sc * q) >> 7 and lo = (sc * q) & 127, summed as (hi << 7) + lo; q2_k's (up to
// 45) and q3_k's negated (-128 to 124) fit one. q2_k's mins, the sum over its sub-blocks of m * x's
// sum of the sub-block, are one more plane (m repeated over its sub-block's elements) against the
// same x tile. Every sum is exact: |sc * q| <= 4096, so a plane's int32 sums of 256 products stay
// far from overflow.

// How a type's factors go to the tiles: planes of sc * q (1 or 2) and whether it has mins.
constexpr int super_planes(DType t) {
  return t == DType::Q6_K ? 2 : 1;
}
constexpr bool super_mins(DType t) {
  return t == DType::Q2_K;
}

// Sixteen weight rows from n0 (zero past n_end) as the planes' rows, [16][K] signed bytes each
// (hi or the single plane, lo, mins), and per super-block g the rows' d[g][16] and -dmin[g][16].
template <DType T>
void unpack_super_rows(const MatmulArgs& a, int64_t n0, int64_t n_end, int8_t* const (&planes)[3], float* d,
                       float* dmin_neg) {
  constexpr int kPlanes = super_planes(T);
  const int64_t supers = a.K / kQK_K;
  SuperBlock sb;
  for (int64_t i = 0; i < kTile; ++i) {
    if (n0 + i >= n_end) {
      for (int8_t* plane : planes) {
        if (plane != nullptr) std::memset(plane + i * a.K, 0, static_cast<size_t>(a.K));
      }
      for (int64_t g = 0; g < supers; ++g) d[g * kTile + i] = dmin_neg[g * kTile + i] = 0.0f;
      continue;
    }
    const uint8_t* w = a.w + static_cast<size_t>(n0 + i) * a.w_row_bytes;
    for (int64_t g = 0; g < supers; ++g) {
      decode_super_block<T>(a, w + static_cast<size_t>(g) * block_bytes<T>(), sb);
      d[g * kTile + i] = sb.d;
      dmin_neg[g * kTile + i] = -sb.dmin;
      const int64_t at = i * a.K + g * kQK_K;
      for (int p = 0; p < 8; ++p) {  // 32 elements: sub-blocks 2p and 2p + 1
        const __m512i q = _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb.q + 32 * p)));
        const __m512i sc = _mm512_inserti64x4(_mm512_set1_epi16(sb.sc[2 * p]), _mm256_set1_epi16(sb.sc[2 * p + 1]), 1);
        const __m512i product = _mm512_mullo_epi16(q, sc);
        auto* out = reinterpret_cast<__m256i*>(planes[0] + at + 32 * p);
        if constexpr (kPlanes == 1) {
          _mm256_storeu_si256(out, _mm512_cvtepi16_epi8(product));
        } else {
          _mm256_storeu_si256(out, _mm512_cvtepi16_epi8(_mm512_srai_epi16(product, 7)));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(planes[1] + at + 32 * p),
                              _mm512_cvtepi16_epi8(_mm512_and_si512(product, _mm512_set1_epi16(127))));
        }
        if constexpr (super_mins(T)) {
          const __m256i m =
              _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi8(static_cast<char>(sb.m[2 * p]))),
                                      _mm_set1_epi8(static_cast<char>(sb.m[2 * p + 1])), 1);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(planes[2] + at + 32 * p), m);
        }
      }
    }
  }
}

// Super-blocks: tiles 0, 1 and 2 the int32 sums of the planes (hi or single, lo, mins; 16 x 16),
// tile 4 x (16 rows x 64 bytes), 5, 6 and 7 the planes' weights (16 rows of 64 bytes: 4 bytes of
// each weight row per row).
constexpr AmxTileConfig kSuperTiles = AmxTileConfig{}
                                          .tile(0, 16, 64)
                                          .tile(1, 16, 64)
                                          .tile(2, 16, 64)
                                          .tile(4, 16, 64)
                                          .tile(5, 16, 64)
                                          .tile(6, 16, 64)
                                          .tile(7, 16, 64);

// One super-block's sums of x's tile (x_stride apart) against each plane: 4 tdpbssd of 64 each.
template <int kPlanes, bool kMins>
void multiply_super_block(const int8_t* x, int64_t x_stride, const uint8_t* const (&planes)[3], int64_t g) {
  _tile_zero(0);
  if constexpr (kPlanes == 2) _tile_zero(1);
  if constexpr (kMins) _tile_zero(2);
  for (int64_t j = 0; j < 4; ++j) {
    const int64_t k = g * kQK_K + 64 * j;
    _tile_loadd(4, x + k, static_cast<long>(x_stride));
    _tile_loadd(5, planes[0] + k * kTile, 64);
    _tile_dpbssd(0, 4, 5);
    if constexpr (kPlanes == 2) {
      _tile_loadd(6, planes[1] + k * kTile, 64);
      _tile_dpbssd(1, 4, 6);
    }
    if constexpr (kMins) {
      _tile_loadd(7, planes[2] + k * kTile, 64);
      _tile_dpbssd(2, 4, 7);
    }
  }
}

// Outputs [n0, n0 + count) of x's tiles [t0, t1) from one group's planes (B tiles, rows_to_tiles),
// super-block after super-block, the next one's products in the tiles while the vector unit
// scales this one's: acc = fma(f32((hi << 7) + lo), d * x's scale, acc), then for the mins
// acc = fma(f32(mins' sum), -dmin * x's scale, acc).
template <int kPlanes, bool kMins>
void super_group_tiles(const MatmulArgs& a, int64_t t0, int64_t t1, int64_t n0, int64_t count,
                       const uint8_t* const (&planes)[3], const float* d, const float* dmin_neg) {
  const int64_t supers = a.K / kQK_K;
  const int64_t full_tiles = a.M / kTile;
  const int64_t x_stride = x_row_bytes(a.K);
  const auto mask = static_cast<__mmask16>((1u << count) - 1);
  const __m512 bias = a.bias != nullptr ? _mm512_maskz_loadu_ps(mask, a.bias + n0) : _mm512_setzero_ps();
  alignas(64) int32_t s[3][kTile][kTile];
  for (int64_t t = t0; t < t1; ++t) {
    const int8_t* x = reinterpret_cast<const int8_t*>(a.x_packed) + t * kTile * x_stride;
    const float* x_scale = a.x_packed_scale + t * kTile * supers;  // x_factor_rows: per 256
    const int64_t rows = t < full_tiles ? kTile : a.M - t * kTile;
    __m512 acc[kTile];
    for (__m512& v : acc) v = _mm512_setzero_ps();
    multiply_super_block<kPlanes, kMins>(x, x_stride, planes, 0);
    for (int64_t g = 0; g < supers; ++g) {
      _tile_stored(0, s[0], 64);
      if constexpr (kPlanes == 2) _tile_stored(1, s[1], 64);
      if constexpr (kMins) _tile_stored(2, s[2], 64);
      if (g + 1 < supers) multiply_super_block<kPlanes, kMins>(x, x_stride, planes, g + 1);
      const __m512 d_g = _mm512_loadu_ps(d + g * kTile);
      [[maybe_unused]] const __m512 dmin_g = kMins ? _mm512_loadu_ps(dmin_neg + g * kTile) : _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int64_t i = 0; i < kTile; ++i) {
        const __m512 xs = _mm512_set1_ps(x_scale[i * supers + g]);
        __m512i sum = _mm512_load_si512(s[0][i]);
        if constexpr (kPlanes == 2) sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 7), _mm512_load_si512(s[1][i]));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d_g, xs), acc[i]);
        if constexpr (kMins) {
          acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[2][i])), _mm512_mul_ps(dmin_g, xs), acc[i]);
        }
      }
    }
#pragma GCC unroll 16
    for (int64_t i = 0; i < kTile; ++i) {
      if (i < rows) _mm512_mask_storeu_ps(a.y + (t * kTile + i) * a.y_stride + n0, mask, _mm512_add_ps(acc[i], bias));
    }
  }
}

template <DType T>
void super_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int kPlanes = super_planes(T);
  constexpr bool kMins = super_mins(T);
  configure_tiles(kSuperTiles);
  const int64_t supers = a.K / kQK_K;
  const size_t plane_bytes = static_cast<size_t>(kTile * a.K);
  auto* rows = static_cast<int8_t*>(scratch(Scratch::WeightRows, 3 * plane_bytes, false));
  auto* tiles = static_cast<uint8_t*>(scratch(Scratch::WeightTiles, 3 * plane_bytes, false));
  auto* factors =
      static_cast<float*>(scratch(Scratch::WeightFactors, static_cast<size_t>(2 * supers * kTile) * 4, false));
  int8_t* const plane_rows[3] = {rows, kPlanes == 2 ? rows + plane_bytes : nullptr,
                                 kMins ? rows + 2 * plane_bytes : nullptr};
  const uint8_t* const plane_tiles[3] = {tiles, tiles + plane_bytes, tiles + 2 * plane_bytes};
  float* d = factors;
  float* dmin_neg = factors + supers * kTile;
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  const int64_t group = tiles_per_group(kTile * x_row_bytes(a.K));
  for (int64_t t0 = 0; t0 < m_tiles; t0 += group) {
    const int64_t t1 = t0 + group < m_tiles ? t0 + group : m_tiles;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kTile) {
      unpack_super_rows<T>(a, n0, n_end, plane_rows, d, dmin_neg);
      for (int p = 0; p < 3; ++p) {
        if (plane_rows[p] != nullptr) rows_to_tiles(plane_rows[p], a.K, tiles + p * plane_bytes);
      }
      super_group_tiles<kPlanes, kMins>(a, t0, t1, n0, n_end - n0 < kTile ? n_end - n0 : kTile, plane_tiles, d,
                                        dmin_neg);
    }
  }
  _tile_release();
}

// Sixteen bf16 weight rows from n0 as tile 4 (or 7) loads them: straight from the tensor, or, for
// a last partial tile of rows or a K that is not whole chunks, from a zero-padded copy in `buffer`.
struct Bf16Rows {
  const uint8_t* first = nullptr;
  size_t stride = 0;
  int64_t count = 0;
};

Bf16Rows bf16_rows(const MatmulArgs& a, int64_t n0, int64_t n_end, Scratch buffer) {
  Bf16Rows rows{a.w + static_cast<size_t>(n0) * a.w_row_bytes, a.w_row_bytes, n_end - n0 < kTile ? n_end - n0 : kTile};
  if (rows.count == kTile && a.K % kBf16Chunk == 0) return rows;
  const int64_t padded_k = (a.K + kBf16Chunk - 1) / kBf16Chunk * kBf16Chunk;
  auto* padded = static_cast<uint16_t*>(scratch(buffer, static_cast<size_t>(kTile * padded_k) * 2, true));
  for (int64_t i = 0; i < rows.count; ++i) {
    std::memcpy(padded + i * padded_k, rows.first + static_cast<size_t>(i) * a.w_row_bytes,
                static_cast<size_t>(a.K) * 2);
  }
  rows.first = reinterpret_cast<const uint8_t*>(padded);
  rows.stride = static_cast<size_t>(padded_k) * 2;
  return rows;
}

// x tiles [t_begin, t_end) against one or (kPair) two tiles of 16 bf16 weight rows: tiles 3 and 6
// sum each output over all of K, 32 elements a tdpbf16ps, chunk after chunk; the pair shares each
// load of x, and its two chains of sums overlap.
template <bool kPair>
void bf16_tile_rows(const MatmulArgs& a, int64_t t_begin, int64_t t_end, int64_t n0, const Bf16Rows& first,
                    const Bf16Rows& second) {
  const int64_t chunks = (a.K + kBf16Chunk - 1) / kBf16Chunk;
  alignas(64) float out[kTile][kTile];
  for (int64_t t = t_begin; t < t_end; ++t) {
    const uint8_t* x_tiles = a.x_packed + t * chunks * kXBf16TileBytes;
    _tile_zero(3);
    if constexpr (kPair) _tile_zero(6);
    for (int64_t c = 0; c < chunks; ++c) {
      _tile_loadd(5, x_tiles + c * kXBf16TileBytes, 64);
      _tile_loadd(4, first.first + c * kBf16Chunk * 2, static_cast<long>(first.stride));
      _tile_dpbf16ps(3, 4, 5);
      if constexpr (kPair) {
        _tile_loadd(7, second.first + c * kBf16Chunk * 2, static_cast<long>(second.stride));
        _tile_dpbf16ps(6, 7, 5);
      }
    }
    _tile_stored(3, out, 64);
    write_tile(a, t, n0, first.count, out);
    if constexpr (kPair) {
      _tile_stored(6, out, 64);
      write_tile(a, t, n0 + kTile, second.count, out);
    }
  }
}

// bf16 weights against x rounded to bf16 (packed as tile 5 wants it). An output's sums involve
// only its own weight row and x row, in an order that depends only on K: not on M, the tile or
// the thread.
void bf16_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  configure_tiles(kBf16Tiles);
  const int64_t chunks = (a.K + kBf16Chunk - 1) / kBf16Chunk;
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  const int64_t group = tiles_per_group(chunks * kXBf16TileBytes);
  for (int64_t t0 = 0; t0 < m_tiles; t0 += group) {
    const int64_t t1 = t0 + group < m_tiles ? t0 + group : m_tiles;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += 2 * kTile) {
      const Bf16Rows first = bf16_rows(a, n0, n_end, Scratch::PaddedFirst);
      if (n0 + kTile < n_end) {
        const Bf16Rows second = bf16_rows(a, n0 + kTile, n_end, Scratch::PaddedSecond);
        bf16_tile_rows<true>(a, t0, t1, n0, first, second);
      } else {
        bf16_tile_rows<false>(a, t0, t1, n0, first, first);
      }
    }
  }
  _tile_release();
}

// Packed q8_0 / q4_0 weights (packed_weights.h): a group's quants are its B tiles (q4_0's nibbles
// split into q - 8 first), its f16 scales widened once per group.
template <DType T>
void packed_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t blocks = a.K / kBlock;
  const size_t group_bytes = a.w_row_bytes * kTile;
  auto* split = T == DType::Q4_0
                    ? static_cast<uint8_t*>(scratch(Scratch::WeightTiles, static_cast<size_t>(blocks * 512), false))
                    : nullptr;
  auto* scales = static_cast<float*>(scratch(Scratch::WeightFactors, static_cast<size_t>(blocks * kTile) * 4, false));
  block_tiles<false>(a, n_begin, n_end, [&](int64_t n0) {
    const uint8_t* weights = a.w + static_cast<size_t>(n0 / kTile) * group_bytes;
    const auto* f16_scales = reinterpret_cast<const __m256i*>(weights);
    for (int64_t b = 0; b < blocks; ++b)
      _mm512_storeu_ps(scales + b * kTile, _mm512_cvtph_ps(_mm256_loadu_si256(f16_scales + b)));
    const uint8_t* units = weights + blocks * kTile * 2;
    if constexpr (T == DType::Q4_0) {
      // Unit c's low nibbles are elements 4c.. (tile row c), its high ones 16 + 4c.. (row 4 + c).
      const __m512i low4 = _mm512_set1_epi8(0x0F);
      const __m512i eight = _mm512_set1_epi8(8);
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t c = 0; c < 4; ++c) {
          const __m512i w = _mm512_loadu_si512(units + (b * 4 + c) * 64);
          _mm512_storeu_si512(split + b * 512 + c * 64, _mm512_sub_epi8(_mm512_and_si512(w, low4), eight));
          _mm512_storeu_si512(split + b * 512 + (4 + c) * 64,
                              _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(w, 4), low4), eight));
        }
      }
      units = split;
    }
    return WeightTiles{units, 512, scales, nullptr};
  });
}

// Packed q4_k (packed_weights.h), in chunks of 32 as the rows stored are (k4_chunks): a unit's low
// nibbles are row c of sub-block 2p's B tile, its high ones of 2p + 1's, and the factors come
// from packed_q4_k.h as the vector loops take them: the same bits as both.
void packed_q4_k_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  using S = AmxTraits;
  const int64_t supers = a.K / kQK_K;
  const size_t group_bytes = a.w_row_bytes * kTile;
  auto* tiles = static_cast<uint8_t*>(scratch(Scratch::WeightTiles, static_cast<size_t>(a.K / kBlock * 512), false));
  const K4Factors f = k4_factors(supers);
  k4_block_tiles(a, n_begin, n_end, f, [&](int64_t n0) {
    const uint8_t* weights = a.w + static_cast<size_t>(n0 / kTile) * group_bytes;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t s = 0; s < supers; ++s) {
      const uint8_t* section = weights + s * kPackedQ4KSection;
      _mm512_storeu_ps(f.d + s * kTile, packed_q4_k::d<S>(section));
      _mm512_storeu_ps(f.dmin_neg + s * kTile, packed_q4_k::dmin_neg<S>(section));
      const packed_q4_k::Scales sc = packed_q4_k::scales<S>(section);
      [&]<int... J>(std::integer_sequence<int, J...>) {
        (_mm512_storeu_si512(f.sc + (s * 8 + J) * kTile, packed_q4_k::ints<S, J>(sc.sc)), ...);
      }
      (std::make_integer_sequence<int, 8>{});
      [&]<int... P>(std::integer_sequence<int, P...>) {
        (_mm512_storeu_si512(f.min_pair + (s * 4 + P) * kTile, packed_q4_k::min_pair<S, P>(sc.m)), ...);
      }
      (std::make_integer_sequence<int, 4>{});
      const uint8_t* units = section + kPackedQ4KQuants;
      uint8_t* out = tiles + s * 8 * 512;
      for (int64_t p = 0; p < 4; ++p) {
        for (int64_t c = 0; c < 8; ++c) {
          const __m512i w = _mm512_loadu_si512(units + (8 * p + c) * 64);
          _mm512_storeu_si512(out + 2 * p * 512 + c * 64, _mm512_and_si512(w, low4));
          _mm512_storeu_si512(out + (2 * p + 1) * 512 + c * 64, _mm512_and_si512(_mm512_srli_epi16(w, 4), low4));
        }
      }
    }
    return static_cast<const uint8_t*>(tiles);
  });
}

// Packed weights: the tiles for calls of more than kMaxVectorRows rows of x, else avx512bf16's
// vector loops (the same sums in the same order). A type without packed tiles (amx_repacks)
// takes the vector loops at every batch: below, only amx_repacks' three types remain.
void matmul_packed_amx(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  // More rows always come with x's tile copy (matmul.cpp calls packed kernels only on rounded x).
  if (takes_vector_loops(a)) {
    return avx512_bf16_isa()->matmul_packed(a, n_begin, n_end);
  }
  if (a.w_type == DType::Q8_0) return packed_tiles<DType::Q8_0>(a, n_begin, n_end);
  if (a.w_type == DType::Q4_K) return packed_q4_k_tiles(a, n_begin, n_end);
  packed_tiles<DType::Q4_0>(a, n_begin, n_end);
}

// x packed (more than kMaxVectorRows rows, x rounded): the tiles. Otherwise the avx512bf16 level's
// loops: vpdpbusd for the blocks of 32, vdpbf16ps for bf16 (x already rounded to bf16 here, so the
// same products as the tiles'), and the rest as avx512vnni.
void matmul_amx(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.x_packed == nullptr) return avx512_bf16_isa()->matmul(a, n_begin, n_end);
  switch (a.w_type) {
    case DType::BF16:
      return bf16_tiles(a, n_begin, n_end);
    case DType::Q8_0:
      return unpacked_tiles<DType::Q8_0>(a, n_begin, n_end);
    case DType::Q4_0:
      return unpacked_tiles<DType::Q4_0>(a, n_begin, n_end);
    case DType::Q4_1:
      return unpacked_tiles<DType::Q4_1>(a, n_begin, n_end);
    case DType::Q5_0:
      return unpacked_tiles<DType::Q5_0>(a, n_begin, n_end);
    case DType::Q5_1:
      return unpacked_tiles<DType::Q5_1>(a, n_begin, n_end);
    case DType::IQ4_NL:
      return unpacked_tiles<DType::IQ4_NL>(a, n_begin, n_end);
    case DType::Q2_K:
      return super_tiles<DType::Q2_K>(a, n_begin, n_end);
    case DType::Q3_K:
      return super_tiles<DType::Q3_K>(a, n_begin, n_end);
    case DType::Q4_K:
      return k4_tiles<DType::Q4_K>(a, n_begin, n_end);
    case DType::Q5_K:
      return k4_tiles<DType::Q5_K>(a, n_begin, n_end);
    case DType::Q6_K:
      return super_tiles<DType::Q6_K>(a, n_begin, n_end);
    case DType::IQ4_XS:
      return unpacked_tiles<DType::IQ4_XS>(a, n_begin, n_end);
    default:
      return avx512_bf16_isa()->matmul(a, n_begin, n_end);
  }
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
const Isa* amx_isa() {
#ifdef FERRY_HAVE_AMX
  static const Isa isa = [] {
    Isa level = *avx512_bf16_isa();  // everything but the matmuls its tiles take
    level.name = "amx";
    level.matmul = matmul_amx;
    level.matmul_packed = matmul_packed_amx;
    level.repacks = amx_level_repacks;
    level.packed_types = nullptr;  // every packable type: those without tiles by the vector loops
    level.packed_x_size = packed_x_size;
    level.pack_x = pack_x;
    level.small_batch_rows = kMaxVectorRows;
    return level;
  }();
  return &isa;
#else
  return nullptr;
#endif
}
}  // namespace ferry::kernels::cpu
