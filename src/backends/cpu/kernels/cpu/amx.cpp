// The amx level: avx512bf16, with q8_0 and q4_0 weights against x rounded to q8_0, q4_k, q5_k and
// q6_k weights against x rounded to q8_K, and bf16 weights against x rounded to bf16, multiplied in
// Intel AMX tiles (Sapphire Rapids and later) wherever x has more than a few rows.
//
// Per block of 32 along K, one tdpbssd takes 16 weight rows (tile 1: 16 rows of 32 signed bytes,
// read straight from q8_0 rows, or from q4_0 rows unpacked to q - 8) against 16 rows of x (tile 2:
// x's quants in the VNNI order tdpbssd wants, packed once per call by pack_x) and leaves each of
// the 256 exact block dot products in tile 0. They are stored, and per output
// acc += f32(dot) * (weight scale * x scale), block after block, with the 16 x rows in the lanes
// of one vector per weight row. So every output is the same sequence of f32 operations whatever
// the tile it sits in or the thread. Up to kMaxVectorRows rows of x (decode) take the vector
// loops of avx512bf16 instead, the same exact products summed in another order: on this level a
// row's result alone and in a batch of more than kMaxVectorRows can differ in the last bits.
//
// The tiles need the kernel's permission (cpu_features.cpp requests it); a CPU or kernel without
// AMX never lists this level.
#include <cstdint>
#include <cstring>
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
enum class Scratch { WeightRows, WeightScales, PaddedFirst, PaddedSecond, PaddedX, Count };

[[maybe_unused]] void* scratch(Scratch which, size_t bytes, bool zeroed) {
  thread_local std::vector<uint8_t> buffers[static_cast<size_t>(Scratch::Count)];
  std::vector<uint8_t>& buffer = buffers[static_cast<size_t>(which)];
  if (buffer.size() < bytes) buffer.resize(bytes);
  if (zeroed) std::memset(buffer.data(), 0, bytes);
  return buffer.data();
}

}  // namespace
}  // namespace ferry::kernels::cpu

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AMX 1

#if defined(__clang__)
#pragma clang attribute push(                                                                               \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,amx-tile,amx-int8,amx-bf16"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,amx-tile,amx-int8,amx-bf16")
#endif

namespace ferry::kernels::cpu {
namespace {

// Matmul calls of up to this many rows of x (decode, and the few rows of a speculative step) go
// through the vector loops instead: a 16-row tile would be mostly padding, and packing x costs more than the
// tiles save (decode measured 25-45% slower through them). The results differ from the tiles' only
// in the order of the f32 sums.
constexpr int64_t kMaxVectorRows = 4;
constexpr int64_t kTile = 16;         // rows of a tile, and int32 columns of the sums' tile
constexpr int64_t kBlock = 32;        // q8_0 / q4_0 block: the K of one tdpbssd
constexpr int64_t kXTileBytes = 512;  // one block of 16 x rows in VNNI order: 8 rows of 64 bytes

constexpr int64_t kBf16Chunk = 32;         // bf16 elements of K per tdpbf16ps
constexpr int64_t kXBf16TileBytes = 1024;  // one chunk of 16 x rows in pairs: 16 rows of 64 bytes

// q8_0 / q4_0: tile 0 the int32 sums (16 x 16), tile 1 the weights (16 rows x 32 bytes), tile 2 x
// (8 rows x 64 bytes: row r holds bytes 4r..4r+3 of each of the 16 x rows).
// bf16: tiles 3 and 6 the f32 sums (16 x 16) of two tiles of weight rows, tiles 4 and 7 their
// weights (16 rows x 32 bf16), tile 5 x (16 rows x 64 bytes: row r holds elements 2r, 2r + 1 of
// each of the 16 x rows).
constexpr AmxTileConfig kTiles = AmxTileConfig{}
                                     .tile(0, 16, 64)
                                     .tile(1, 16, 32)
                                     .tile(2, 8, 64)
                                     .tile(3, 16, 64)
                                     .tile(4, 16, 64)
                                     .tile(5, 16, 64)
                                     .tile(6, 16, 64)
                                     .tile(7, 16, 64);

// Loads the configuration where the thread's current one is another (none: the loops release the
// tiles when done; or another user's, such as the peak probe of bench_kernels). Reading it back
// is cheap.
void configure_tiles(const AmxTileConfig& config = kTiles) {
  AmxTileConfig current;
  _tile_storeconfig(&current);
  if (std::memcmp(&current, &config, sizeof(AmxTileConfig)) != 0) _tile_loadconfig(&config);
}

// Sub-blocks of 16 (tile_column<16, ...>): tile 0 the int32 sums (16 x 16), tile 1 the weights (16
// rows x 16 bytes), tile 2 half a block of x (4 rows x 64 bytes).
constexpr AmxTileConfig kK16Tiles = AmxTileConfig{}.tile(0, 16, 64).tile(1, 16, 16).tile(2, 4, 64);

// Packed q8_0 / q4_0 weights (packed_tiles): two blocks in flight, so the tiles multiply one while
// the vector unit scales the other's sums. Tiles 0 and 1 the int32 sums (16 x 16), 2 and 3 x (16
// rows x 32 bytes), 4 and 5 the weights (8 units of 64 bytes).
constexpr AmxTileConfig kPackedTiles =
    AmxTileConfig{}.tile(0, 16, 64).tile(1, 16, 64).tile(2, 16, 32).tile(3, 16, 32).tile(4, 8, 64).tile(5, 8, 64);

// x's tiles go in groups of about kGroupBytes, which stay in L2 while every weight tile of the
// thread's range passes them (all of a long prompt's would not fit, and come from L3 each time).
int64_t tiles_per_group(int64_t tile_bytes) {
  constexpr int64_t kGroupBytes = int64_t{1} << 20;
  return kGroupBytes / tile_bytes > 0 ? kGroupBytes / tile_bytes : 1;
}

// K-quant types multiplied in tiles against x rounded to q8_K, a tdpbssd per sub-block: of 32
// elements for q4_k and q5_k (d * sc * q - dmin * m), of 16 for q6_k (d * sc * q).
bool has_k_tiles(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}
constexpr int64_t k_sub_block(DType t) {
  return t == DType::Q6_K ? 16 : 32;
}

void packed_x_size(const MatmulArgs& a, size_t* bytes, size_t* scales) {
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  *bytes = 0;
  *scales = 0;
  if (a.call_rows <= kMaxVectorRows) return;  // decode: the avx512bf16 loops, on x unpacked
  if (a.w_packed) return;                     // packed weights: x's tiles load straight from a.xq
  if (a.w_type == DType::Q8_0 || a.w_type == DType::Q4_0) {
    *bytes = static_cast<size_t>(m_tiles * (a.K / kBlock) * kXTileBytes);
    *scales = static_cast<size_t>(m_tiles * (a.K / kBlock) * kTile);
  } else if (has_k_tiles(a.w_type)) {  // the scales per block, then scale * quant sum per sub-block
    *bytes = static_cast<size_t>(m_tiles * (a.K / kBlock) * kXTileBytes);
    *scales = static_cast<size_t>(m_tiles * (a.K / kBlock + a.K / k_sub_block(a.w_type)) * kTile);
  } else if (a.w_type == DType::BF16) {
    *bytes = static_cast<size_t>(m_tiles * ((a.K + kBf16Chunk - 1) / kBf16Chunk) * kXBf16TileBytes);
  }
}

// x as tile 2 (q8_0, q4_0, k-quants: a.xq) or tile 5 (bf16: a.xb) wants it, per 16 rows and block
// (chunk): [m_tile][block][r][row][4 bytes]; rows past M, and bf16 elements past K, zero. q8_0 /
// q4_0 scales [m_tile][block][row], zero past M; for the k-quants (q8_K x) each block's
// super-block scale there, then per sub-block (k_sub_block) scale * the quants' sum,
// [m_tile][sub-block][row].
void pack_x(const MatmulArgs& a, uint8_t* packed, float* packed_scale) {
  const bool bf16 = a.w_type == DType::BF16;
  const int64_t row_bytes = bf16 ? a.K * 2 : a.K;
  const int64_t block_bytes = bf16 ? kBf16Chunk * 2 : kBlock;
  const int64_t blocks = (row_bytes + block_bytes - 1) / block_bytes;
  const int64_t tile_bytes = bf16 ? kXBf16TileBytes : kXTileBytes;
  const auto* x = bf16 ? reinterpret_cast<const uint8_t*>(a.xb) : reinterpret_cast<const uint8_t*>(a.xq);
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  for (int64_t t = 0; t < m_tiles; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* tile = packed + (t * blocks + b) * tile_bytes;
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
        if (bf16) continue;
        if (has_k_tiles(a.w_type)) {
          // q8_K: one scale per super-block, and per sub-block the scale times its quant sum
          // (from the sums of 16).
          const bool real = m < a.M;  // rows past M: zeros
          const float scale = real ? a.xq_scale[m * (a.K / kQK_K) + b / 8] : 0.0f;
          const int16_t* bsum = real ? a.xq_bsum + m * (a.K / 16) + 2 * b : nullptr;
          packed_scale[(t * blocks + b) * kTile + i] = scale;
          float* sums = packed_scale + m_tiles * blocks * kTile;
          if (k_sub_block(a.w_type) == 32) {
            const int32_t sum = real ? bsum[0] + bsum[1] : 0;
            sums[(t * blocks + b) * kTile + i] = scale * static_cast<float>(sum);
          } else {
            for (int64_t h = 0; h < 2; ++h) {
              const int32_t sum = real ? bsum[h] : 0;
              sums[((t * blocks + b) * 2 + h) * kTile + i] = scale * static_cast<float>(sum);
            }
          }
        } else {
          packed_scale[(t * blocks + b) * kTile + i] = m < a.M ? a.xq_scale[m * blocks + b] : 0.0f;
        }
      }
    }
  }
}

// The scales of sixteen weight rows from n0 as f32, [block][16], zero past n_end; and when
// `copy_rows`, the rows as signed bytes, [16][K], zero past n_end: q4_0's nibbles become q - 8,
// q8_0's quants are copied.
template <DType T>
void unpack_weights(const MatmulArgs& a, int64_t n0, int64_t n_end, bool copy_rows, int8_t* rows, float* scales) {
  const int64_t blocks = a.K / kBlock;
  constexpr size_t kBlockBytes = T == DType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  for (int64_t i = 0; i < kTile; ++i) {
    int8_t* row = rows + i * a.K;
    if (n0 + i >= n_end) {
      std::memset(row, 0, static_cast<size_t>(a.K));
      for (int64_t b = 0; b < blocks; ++b) scales[b * kTile + i] = 0.0f;
      continue;
    }
    const uint8_t* w = a.w + static_cast<size_t>(n0 + i) * a.w_row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = w + b * kBlockBytes;
      uint16_t d;
      std::memcpy(&d, block, 2);
      scales[b * kTile + i] = a.f16_table[d];
      if (!copy_rows) continue;
      if constexpr (T == DType::Q8_0) {
        std::memcpy(row + b * kBlock, block + 2, kBlock);
      } else {
        // Elements 0-15 are the low nibbles of the 16 bytes, 16-31 the high ones.
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
        const __m128i low = _mm_and_si128(bytes, _mm_set1_epi8(15));
        const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(15));
        const __m256i q = _mm256_sub_epi8(_mm256_set_m128i(high, low), _mm256_set1_epi8(8));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + b * kBlock), q);
      }
    }
  }
}

// Sixteen q6_k weight rows from n0 (zero past n_end) as signed bytes, [16][K] (q - 32), with
// per 16-element sub-block s scales[s][16] = d * sc.
void unpack_q6_k_weights(const MatmulArgs& a, int64_t n0, int64_t n_end, int8_t* rows, float* scales) {
  const int64_t supers = a.K / kQK_K;
  const __m256i low4 = _mm256_set1_epi8(15);
  const __m256i three = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < kTile; ++i) {
    int8_t* row = rows + i * a.K;
    if (n0 + i >= n_end) {
      std::memset(row, 0, static_cast<size_t>(a.K));
      for (int64_t s = 0; s < supers * 16; ++s) scales[s * kTile + i] = 0.0f;
      continue;
    }
    const uint8_t* w = a.w + static_cast<size_t>(n0 + i) * a.w_row_bytes;
    for (int64_t g = 0; g < supers; ++g) {
      const uint8_t* block = w + static_cast<size_t>(g) * sizeof(BlockQ6_K);
      // Element 128 h + 32 c + l: low 4 bits from ql[64 h + 32 (c % 2) + l] (low nibble for c < 2),
      // high 2 bits from qh[32 h + l] >> 2 c.
      for (int h = 0; h < 2; ++h) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 128 + 32 * h));
        for (int c = 0; c < 4; ++c) {
          const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * h + 32 * (c % 2)));
          const __m256i low = _mm256_and_si256(c < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
          const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), three);
          const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + g * kQK_K + 128 * h + 32 * c), q);
        }
      }
      uint16_t d;
      std::memcpy(&d, block + 208, 2);
      for (int s = 0; s < 16; ++s) {
        scales[(g * 16 + s) * kTile + i] = a.f16_table[d] * static_cast<float>(static_cast<int8_t>(block[192 + s]));
      }
    }
  }
}

// Sixteen q4_k / q5_k weight rows from n0 (zero past n_end) as signed bytes, [16][K] (the quants q,
// 0 to 15 or 31), with per 32-element sub-block b the factors of value = scale * q - min:
// scales[b][16] = d * sc, mins[b][16] = dmin * m.
template <DType T>
void unpack_k_weights(const MatmulArgs& a, int64_t n0, int64_t n_end, int8_t* rows, float* scales, float* mins) {
  const int64_t supers = a.K / kQK_K;
  constexpr size_t kBytes = T == DType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
  constexpr size_t kQs = T == DType::Q4_K ? 16 : 48;  // offset of qs in the block
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t i = 0; i < kTile; ++i) {
    int8_t* row = rows + i * a.K;
    if (n0 + i >= n_end) {
      std::memset(row, 0, static_cast<size_t>(a.K));
      for (int64_t b = 0; b < supers * 8; ++b) scales[b * kTile + i] = mins[b * kTile + i] = 0.0f;
      continue;
    }
    const uint8_t* w = a.w + static_cast<size_t>(n0 + i) * a.w_row_bytes;
    for (int64_t g = 0; g < supers; ++g) {
      const uint8_t* block = w + static_cast<size_t>(g) * kBytes;
      uint16_t d, dmin;
      std::memcpy(&d, block, 2);
      std::memcpy(&dmin, block + 2, 2);
      uint8_t sc[8], m[8];
      unpack_scales_k4(block + 4, sc, m);
      // Sub-blocks 2p and 2p + 1: the low and high nibbles of qs[32 p, 32 p + 32); q5_k's fifth bit
      // of element l of sub-block j is bit j of qh[l].
      [[maybe_unused]] const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16));
      for (int p = 0; p < 4; ++p) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kQs + 32 * p));
        __m256i q_low = _mm256_and_si256(bytes, low4);
        __m256i q_high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        if constexpr (T == DType::Q5_K) {
          const __m256i one = _mm256_set1_epi8(1);
          const __m256i bit_low = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), one);
          const __m256i bit_high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p + 1)), one);
          q_low = _mm256_or_si256(q_low, _mm256_slli_epi16(bit_low, 4));
          q_high = _mm256_or_si256(q_high, _mm256_slli_epi16(bit_high, 4));
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + g * kQK_K + 64 * p), q_low);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + g * kQK_K + 64 * p + 32), q_high);
      }
      for (int j = 0; j < 8; ++j) {
        scales[(g * 8 + j) * kTile + i] = a.f16_table[d] * static_cast<float>(sc[j]);
        mins[(g * 8 + j) * kTile + i] = a.f16_table[dmin] * static_cast<float>(m[j]);
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

// Outputs [n0, n0 + 16) of x's tiles [t_begin, t_end) (rows [n0, n_end) written), from the weights'
// quants as signed bytes, `rows` (tile-1 rows `stride` bytes apart, sub-blocks of kSub elements
// `step` bytes apart), against x's packed tiles (pack_x). Per sub-block s, the exact dot products
// of the quants, then per output acc += f32(dot) * (scales[s] * x scale), and where the type has
// mins (the k-quants' dmin * m) acc -= mins[s] * (x scale * x's quant sum of the sub-block). Sub-
// blocks of 16 take the tiles of kK16Tiles: half a block's x tile (its 4 rows of 64 bytes) against
// 16 bytes of each weight row.
template <int64_t kSub, bool kMins>
void tile_column(const MatmulArgs& a, int64_t t_begin, int64_t t_end, int64_t n0, int64_t n_end, const int8_t* rows,
                 size_t stride, size_t step, const float* scales, const float* mins) {
  constexpr int64_t kParts = kBlock / kSub;  // sub-blocks per 32-element block of x's tile
  const int64_t blocks = a.K / kBlock;
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  alignas(64) int32_t sums[kTile][kTile];
  alignas(64) float out[kTile][kTile];
  for (int64_t t = t_begin; t < t_end; ++t) {
    __m512 acc[kTile];
    for (__m512& v : acc) v = _mm512_setzero_ps();
    const uint8_t* x_tiles = a.x_packed + t * blocks * kXTileBytes;
    const float* x_scales = a.x_packed_scale + t * blocks * kTile;
    const float* x_sums = kMins ? a.x_packed_scale + m_tiles * blocks * kTile + t * blocks * kParts * kTile : nullptr;
    for (int64_t b = 0; b < blocks; ++b) {
      const __m512 x_scale = _mm512_loadu_ps(x_scales + b * kTile);
      for (int64_t p = 0; p < kParts; ++p) {
        const int64_t s = b * kParts + p;
        _tile_zero(0);
        _tile_loadd(1, rows + s * static_cast<int64_t>(step), static_cast<long>(stride));
        _tile_loadd(2, x_tiles + b * kXTileBytes + p * (kXTileBytes / kParts), 64);
        _tile_dpbssd(0, 1, 2);
        _tile_stored(0, sums, 64);
        [[maybe_unused]] const __m512 x_sum = kMins ? _mm512_loadu_ps(x_sums + s * kTile) : _mm512_setzero_ps();
        for (int64_t i = 0; i < kTile; ++i) {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(sums[i]));
          acc[i] = _mm512_fmadd_ps(dot, _mm512_mul_ps(_mm512_set1_ps(scales[s * kTile + i]), x_scale), acc[i]);
          if constexpr (kMins) acc[i] = _mm512_fnmadd_ps(_mm512_set1_ps(mins[s * kTile + i]), x_sum, acc[i]);
        }
      }
    }
    for (int64_t i = 0; i < kTile; ++i) _mm512_store_ps(out[i], acc[i]);
    write_tile(a, t, n0, n_end - n0 < kTile ? n_end - n0 : kTile, out);
  }
}

template <DType T>
void matmul_k_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kSub = k_sub_block(T);
  configure_tiles(kSub == 16 ? kK16Tiles : kTiles);
  const int64_t subs = a.K / kSub;
  auto* rows = static_cast<int8_t*>(scratch(Scratch::WeightRows, static_cast<size_t>(kTile * a.K), false));
  auto* factors = static_cast<float*>(scratch(Scratch::WeightScales, static_cast<size_t>(2 * subs * kTile) * 4, false));
  float* scales = factors;
  float* mins = factors + subs * kTile;
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  const int64_t group = tiles_per_group(a.K / kBlock * kXTileBytes);
  for (int64_t t0 = 0; t0 < m_tiles; t0 += group) {
    const int64_t t1 = t0 + group < m_tiles ? t0 + group : m_tiles;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kTile) {
      if constexpr (T == DType::Q6_K) {
        unpack_q6_k_weights(a, n0, n_end, rows, scales);
        tile_column<16, false>(a, t0, t1, n0, n_end, rows, static_cast<size_t>(a.K), 16, scales, nullptr);
      } else {
        unpack_k_weights<T>(a, n0, n_end, rows, scales, mins);
        tile_column<32, true>(a, t0, t1, n0, n_end, rows, static_cast<size_t>(a.K), kBlock, scales, mins);
      }
    }
  }
  _tile_release();
}

template <DType T>
void matmul_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  configure_tiles();
  auto* rows = static_cast<int8_t*>(scratch(Scratch::WeightRows, static_cast<size_t>(kTile * a.K), false));
  auto* scales =
      static_cast<float*>(scratch(Scratch::WeightScales, static_cast<size_t>(a.K / kBlock * kTile) * 4, false));
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  const int64_t group = tiles_per_group(a.K / kBlock * kXTileBytes);
  for (int64_t t0 = 0; t0 < m_tiles; t0 += group) {
    const int64_t t1 = t0 + group < m_tiles ? t0 + group : m_tiles;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kTile) {
      const bool direct = T == DType::Q8_0 && n0 + kTile <= n_end;
      unpack_weights<T>(a, n0, n_end, !direct, rows, scales);
      if (direct) {
        // Whole q8_0 tiles load straight from the weight rows: 32 quants 2 bytes into each block.
        const auto* first = reinterpret_cast<const int8_t*>(a.w + static_cast<size_t>(n0) * a.w_row_bytes + 2);
        tile_column<kBlock, false>(a, t0, t1, n0, n_end, first, a.w_row_bytes, sizeof(BlockQ8_0), scales, nullptr);
      } else {
        tile_column<kBlock, false>(a, t0, t1, n0, n_end, rows, static_cast<size_t>(a.K), kBlock, scales, nullptr);
      }
    }
  }
  _tile_release();  // an idle thread with tiles in use would have their 8 KiB saved at every switch
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
  configure_tiles();
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

// One block's products into sums tile 0 (x in tile 2, weights in 4) or 1 (3, 5): the tile
// intrinsics take literal tile numbers.
void multiply_block_even(const int8_t* x, int64_t x_stride, const uint8_t* units) {
  _tile_zero(0);
  _tile_loadd(2, x, static_cast<long>(x_stride));
  _tile_loadd(4, units, 64);
  _tile_dpbssd(0, 2, 4);
}
void multiply_block_odd(const int8_t* x, int64_t x_stride, const uint8_t* units) {
  _tile_zero(1);
  _tile_loadd(3, x, static_cast<long>(x_stride));
  _tile_loadd(5, units, 64);
  _tile_dpbssd(1, 3, 5);
}

// acc[i] += f32(block b's sums of x row t * 16 + i) * (weight scales * that row's x scale).
void scale_block(const MatmulArgs& a, int64_t t, int64_t rows, int64_t b, __m512 w_scale,
                 const int32_t (&sums)[kTile][kTile], __m512 (&acc)[kTile]) {
  const int64_t blocks = a.K / kBlock;
  for (int64_t i = 0; i < rows; ++i) {
    const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(a.xq_scale[(t * kTile + i) * blocks + b]));
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[i])), scale, acc[i]);
  }
}

// Packed q8_0 / q4_0 weights (packed_weights.h): per block, one tdpbssd takes 16 rows of x (tile
// 2 or 3: 16 rows of 32 signed bytes, straight from a.xq) against a group's 16 weight rows (tile 4
// or 5: its 8 units of 64 bytes, straight from the group for q8_0; for q4_0 the nibbles split into
// q - 8), leaving the exact block dot products in tile 0 or 1; then per output
// acc = fma(f32(dot), weight scales * x scale, acc): the vector loops' operations in their order
// (avx512_dot.cpp), so the two agree bit for bit and any M may take either.
template <DType T>
void packed_tiles(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  configure_tiles(kPackedTiles);
  const int64_t blocks = a.K / kBlock;
  constexpr int64_t kUnits = T == DType::Q8_0 ? 8 : 4;  // 64-byte units of a group's block
  const size_t group_bytes = a.w_row_bytes * kTile;
  const int64_t m_tiles = (a.M + kTile - 1) / kTile;
  const int64_t full_tiles = a.M / kTile;
  // A last partial tile of x rows: copied with zero rows after it.
  auto* padded =
      static_cast<int8_t*>(scratch(Scratch::PaddedX, static_cast<size_t>(kTile * a.K), full_tiles < m_tiles));
  if (full_tiles < m_tiles) {
    std::memcpy(padded, a.xq + full_tiles * kTile * a.K, static_cast<size_t>((a.M - full_tiles * kTile) * a.K));
  }
  auto* split = T == DType::Q4_0
                    ? static_cast<uint8_t*>(scratch(Scratch::WeightRows, static_cast<size_t>(blocks * 512), false))
                    : nullptr;
  const int64_t group = tiles_per_group(kTile * a.K);
  alignas(64) int32_t sums[kTile][kTile];
  for (int64_t t0 = 0; t0 < m_tiles; t0 += group) {
    const int64_t t1 = t0 + group < m_tiles ? t0 + group : m_tiles;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kTile) {
      const uint8_t* weights = a.w + static_cast<size_t>(n0 / kTile) * group_bytes;
      const auto* scales = reinterpret_cast<const __m256i*>(weights);
      const uint8_t* units = weights + blocks * kTile * 2;
      int64_t unit_step = kUnits * 64;
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
        unit_step = 512;
      }
      for (int64_t t = t0; t < t1; ++t) {
        const int8_t* x = t < full_tiles ? a.xq + t * kTile * a.K : padded;
        const int64_t rows = t < full_tiles ? kTile : a.M - t * kTile;
        __m512 acc[kTile];
        for (__m512& v : acc) v = _mm512_setzero_ps();
        const auto w_scale = [&](int64_t b) { return _mm512_cvtph_ps(_mm256_loadu_si256(scales + b)); };
        // Blocks in pairs: block b + 1 is multiplied while block b's sums are scaled.
        multiply_block_even(x, a.K, units);
        for (int64_t b = 0; b < blocks; b += 2) {
          if (b + 1 < blocks) multiply_block_odd(x + (b + 1) * kBlock, a.K, units + (b + 1) * unit_step);
          _tile_stored(0, sums, 64);
          scale_block(a, t, rows, b, w_scale(b), sums, acc);
          if (b + 1 < blocks) {
            if (b + 2 < blocks) multiply_block_even(x + (b + 2) * kBlock, a.K, units + (b + 2) * unit_step);
            _tile_stored(1, sums, 64);
            scale_block(a, t, rows, b + 1, w_scale(b + 1), sums, acc);
          }
        }
        const __m512 bias = a.bias != nullptr ? _mm512_loadu_ps(a.bias + n0) : _mm512_setzero_ps();
        for (int64_t i = 0; i < rows; ++i) {
          _mm512_storeu_ps(a.y + (t * kTile + i) * a.y_stride + n0, _mm512_add_ps(acc[i], bias));
        }
      }
    }
  }
  _tile_release();
}

// Packed weights: the tiles for calls of more than kMaxVectorRows rows of x, else avx512bf16's
// vector loops (the same sums in the same order).
void matmul_packed_amx(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.call_rows <= kMaxVectorRows) return avx512_bf16_isa()->matmul_packed(a, n_begin, n_end);
  if (a.w_type == DType::Q8_0) return packed_tiles<DType::Q8_0>(a, n_begin, n_end);
  packed_tiles<DType::Q4_0>(a, n_begin, n_end);
}

// x packed (more than kMaxVectorRows rows of q8_0, q4_0, q4_k, q5_k, q6_k or bf16 weights): the
// tiles. Otherwise the avx512bf16 level's loops: vpdpbusd for q8_0 / q4_0, vdpbf16ps for bf16 (x
// already rounded to bf16 here, so the same products as the tiles'), and the rest as avx512vnni.
void matmul_amx(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.x_packed != nullptr && a.w_type == DType::BF16) return bf16_tiles(a, n_begin, n_end);
  if (a.x_packed != nullptr && a.w_type == DType::Q8_0) return matmul_tiles<DType::Q8_0>(a, n_begin, n_end);
  if (a.x_packed != nullptr && a.w_type == DType::Q4_0) return matmul_tiles<DType::Q4_0>(a, n_begin, n_end);
  if (a.x_packed != nullptr && a.w_type == DType::Q4_K) return matmul_k_tiles<DType::Q4_K>(a, n_begin, n_end);
  if (a.x_packed != nullptr && a.w_type == DType::Q5_K) return matmul_k_tiles<DType::Q5_K>(a, n_begin, n_end);
  if (a.x_packed != nullptr && a.w_type == DType::Q6_K) return matmul_k_tiles<DType::Q6_K>(a, n_begin, n_end);
  avx512_bf16_isa()->matmul(a, n_begin, n_end);
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
