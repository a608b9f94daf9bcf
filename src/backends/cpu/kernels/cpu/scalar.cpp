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

void attention(const AttentionHeads& r) {
  constexpr int64_t kTile = AttentionHeads::kKeyTile;
  const int64_t hd = r.head_dim;
  float scores[kTile];
  for (int g = 0; g < r.n_heads; ++g) {
    const float* q = r.q + g * hd;
    float* acc = r.scratch;
    for (int64_t d = 0; d < hd; ++d) acc[d] = 0.0f;
    float running_max = -std::numeric_limits<float>::infinity();
    float running_sum = 0.0f;
    for (int64_t start = 0; start < r.n_keys; start += kTile) {
      const int64_t count = std::min(kTile, r.n_keys - start);
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < count; ++j) {
        scores[j] = dot(q, r.k_cache + (start + j) * r.cache_stride, hd) * r.scale;
        tile_max = std::fmax(tile_max, scores[j]);
      }
      const float new_max = std::fmax(running_max, tile_max);
      const float correction = std::exp(running_max - new_max);  // 0 on the first tile
      running_sum *= correction;
      for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
      for (int64_t j = 0; j < count; ++j) {
        const float p = std::exp(scores[j] - new_max);
        running_sum += p;
        const float* v = r.v_cache + (start + j) * r.cache_stride;
        for (int64_t d = 0; d < hd; ++d) acc[d] += p * v[d];
      }
      running_max = new_max;
    }
    const float inv = 1.0f / running_sum;
    for (int64_t d = 0; d < hd; ++d) r.out[g * hd + d] = acc[d] * inv;
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

const Isa& scalar_isa() {
  static const Isa isa{"scalar", matmul, row_to_f32_scalar, attention, sum_f32, quantize_row_q8_0_split};
  return isa;
}

}  // namespace ferry::kernels::cpu
