// The portable fallback: plain C++ loops, no intrinsics. Also the baseline the SIMD paths are
// tested against (besides the tests' own references).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/cpu/quant.h"
#include "backends/cpu/kernels/cpu/quant_blocks.h"

namespace ferry::kernels::cpu {

namespace {

constexpr int kLanes = 8;  // partial sums per dot product (k mod 8), for speed and a fixed order

float dot(const float* a, const float* b, int64_t n) {
  float lane[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += a[k + l] * b[k + l];
  }
  for (int l = 0; k < n; ++k, ++l) lane[l] += a[k] * b[k];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// The integer dot product of a q8_0 or q4_0 weight block with 32 quants of x.
int32_t block_dot(const uint8_t* block, DType type, const int8_t* xq) {
  int32_t dot = 0;
  if (type == DType::Q8_0) {
    BlockQ8_0 b;
    std::memcpy(&b, block, sizeof(b));
    for (int j = 0; j < kQK8_0; ++j) dot += static_cast<int32_t>(b.qs[j]) * xq[j];
  } else {
    BlockQ4_0 b;
    std::memcpy(&b, block, sizeof(b));
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      dot += ((b.qs[j] & 15) - 8) * xq[j] + ((b.qs[j] >> 4) - 8) * xq[j + kQK4_0 / 2];
    }
  }
  return dot;
}

// q8_0 or q4_0 weights against x rounded to q8_0 (MatmulArgs::xq): per block the exact integer
// dot product, times both scales.
void matmul_quantized_x(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t blocks = a.K / 32;
  const size_t block_bytes = a.w_type == DType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const auto* row = a.w + static_cast<size_t>(n) * a.w_row_bytes;
    for (int64_t m = 0; m < a.M; ++m) {
      const int8_t* xq = a.xq + m * a.K;
      const float* xs = a.xq_scale + m * blocks;
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
        uint16_t d;
        std::memcpy(&d, block, 2);  // both block types start with their f16 scale
        acc += static_cast<float>(block_dot(block, a.w_type, xq + b * 32)) * xs[b] * a.f16_table[d];
      }
      a.y[m * a.y_stride + n] = acc + (a.bias ? a.bias[n] : 0.0f);
    }
  }
}

// Weights of a block type (quant_blocks.h) against x rounded for it: each output one dot product.
void matmul_blocks(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t scales = a.K / activation_block(activation_quant(a.w_type));
  for (int64_t n = n_begin; n < n_end; ++n) {
    const auto* row = a.w + static_cast<size_t>(n) * a.w_row_bytes;
    for (int64_t m = 0; m < a.M; ++m) {
      RoundedRow x;
      x.q = a.xq + m * a.K;
      x.scale = a.xq_scale + m * scales;
      if (a.xq_sum != nullptr) x.sum = a.xq_sum + m * (a.K / 32);
      if (a.xq_bsum != nullptr) x.bsum = a.xq_bsum + m * (a.K / 16);
      a.y[m * a.y_stride + n] = dot_row_blocks_scalar(a.w_type, row, x, a.K) + (a.bias ? a.bias[n] : 0.0f);
    }
  }
}

void matmul(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.xq != nullptr && is_block_type(a.w_type)) return matmul_blocks(a, n_begin, n_end);
  if (a.xq != nullptr) return matmul_quantized_x(a, n_begin, n_end);
  thread_local std::vector<float> w_row;
  w_row.resize(static_cast<size_t>(a.K));
  for (int64_t n = n_begin; n < n_end; ++n) {
    row_to_f32_scalar(a.w_type, a.w + static_cast<size_t>(n) * a.w_row_bytes, w_row.data(), a.K);
    const float b = a.bias ? a.bias[n] : 0.0f;
    for (int64_t m = 0; m < a.M; ++m) {
      a.y[m * a.y_stride + n] = dot(a.x + m * a.x_stride, w_row.data(), a.K) + b;
    }
  }
}

// This head's rows [start, start + count) of `cache` as f32: in place for an f32 cache (*stride a
// cache row), else widened into `tile` ([count, head_dim]).
const float* cache_tile(const AttentionHeads& r, const uint8_t* cache, int64_t start, int64_t count, float* tile,
                        int64_t* stride) {
  if (r.cache_type == DType::F32) {
    *stride = static_cast<int64_t>(r.cache_row_bytes / sizeof(float));
    return reinterpret_cast<const float*>(cache + static_cast<size_t>(start) * r.cache_row_bytes) + r.first_col;
  }
  *stride = r.head_dim;
  for (int64_t j = 0; j < count; ++j) {
    cache_row_to_f32_scalar(r.cache_type, cache + static_cast<size_t>(start + j) * r.cache_row_bytes, r.first_col,
                            r.head_dim, tile + j * r.head_dim);
  }
  return tile;
}

// Tile by tile for all the heads at once, so a cache that is not f32 is widened once per tile;
// each head's arithmetic is the same sequence as one head alone.
void attention(const AttentionHeads& r) {
  constexpr int64_t kTile = AttentionHeads::kKeyTile;
  constexpr int kMax = AttentionHeads::kMaxHeads;
  const int64_t hd = r.head_dim;
  float* acc = r.scratch;                         // [heads, hd]
  float* scores = r.scratch + kMax * hd;          // [heads, kTile]
  float* tile = r.scratch + kMax * (hd + kTile);  // widened K or V rows (not f32 caches)
  float running_max[kMax];
  float running_sum[kMax];
  for (int g = 0; g < r.n_heads; ++g) {
    for (int64_t d = 0; d < hd; ++d) acc[g * hd + d] = 0.0f;
    running_max[g] = -std::numeric_limits<float>::infinity();
    running_sum[g] = 0.0f;
  }
  for (int64_t start = 0; start < r.n_keys; start += kTile) {
    const int64_t count = std::min(kTile, r.n_keys - start);
    int64_t stride = 0;
    const float* k = cache_tile(r, r.k_cache, start, count, tile, &stride);
    for (int g = 0; g < r.n_heads; ++g) {
      float* s = scores + g * kTile;
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < count; ++j) {
        s[j] = dot(r.q + g * hd, k + j * stride, hd) * r.scale;
        tile_max = std::fmax(tile_max, s[j]);
      }
      const float new_max = std::fmax(running_max[g], tile_max);
      const float correction = std::exp(running_max[g] - new_max);  // 0 on the first tile
      running_sum[g] *= correction;
      for (int64_t d = 0; d < hd; ++d) acc[g * hd + d] *= correction;
      for (int64_t j = 0; j < count; ++j) {
        s[j] = std::exp(s[j] - new_max);
        running_sum[g] += s[j];
      }
      running_max[g] = new_max;
    }
    const float* v_rows = cache_tile(r, r.v_cache, start, count, tile, &stride);
    for (int g = 0; g < r.n_heads; ++g) {
      for (int64_t j = 0; j < count; ++j) {
        const float p = scores[g * kTile + j];
        const float* v = v_rows + j * stride;
        for (int64_t d = 0; d < hd; ++d) acc[g * hd + d] += p * v[d];
      }
    }
  }
  for (int g = 0; g < r.n_heads; ++g) {
    const float inv = 1.0f / running_sum[g];
    for (int64_t d = 0; d < hd; ++d) r.out[g * hd + d] = acc[g * hd + d] * inv;
  }
}

float sum_f32(const float* p, int64_t n) {
  float lane[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += p[k + l];
  }
  for (; k < n; ++k) lane[0] += p[k];
  float s = 0.0f;
  for (float v : lane) s += v;
  return s;
}

}  // namespace

void cache_row_to_f32_scalar(DType type, const uint8_t* row, int64_t first, int64_t n, float* dst) {
  const float* table = f16_table();  // f16 by lookup: the same values as f16_to_f32, fewer steps
  if (type == DType::F16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, row + 2 * (first + i), 2);
      dst[i] = table[h];
    }
    return;
  }
  if (type != DType::Q8_0) {
    const int64_t size = type == DType::F32 ? 4 : 2;
    row_to_f32_scalar(type, row + first * size, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* block = row + (first + i) / kQK8_0 * static_cast<int64_t>(sizeof(BlockQ8_0));
    uint16_t d;
    std::memcpy(&d, block, 2);
    const auto q = static_cast<int8_t>(block[2 + (first + i) % kQK8_0]);
    dst[i] = table[d] * static_cast<float>(q);  // exact, as dequantize_block
  }
}

const Isa& scalar_isa() {
  static const Isa isa{.name = "scalar",
                       .matmul = matmul,
                       .row_to_f32 = row_to_f32_scalar,
                       .attention = attention,
                       .sum_f32 = sum_f32,
                       .quantize_row_q8_0 = quantize_row_q8_0_split,
                       .quantize_row_q8_K = quantize_row_q8_K_split};
  return isa;
}

}  // namespace ferry::kernels::cpu
