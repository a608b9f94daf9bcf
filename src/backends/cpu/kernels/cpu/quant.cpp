#include "backends/cpu/kernels/cpu/quant.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/cpu/quant_blocks.h"
#include "backends/cpu/kernels/cpu/quantize_blocks.h"
#include "core/half.h"

namespace ferry::kernels::cpu {

namespace {
uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
}  // namespace

const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

void dequantize_block(const BlockQ8_0& block, float* out) {
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kQK8_0; ++j) out[j] = static_cast<float>(block.qs[j]) * d;
}

void dequantize_block(const BlockQ4_0& block, float* out) {
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    out[j] = static_cast<float>((block.qs[j] & 15) - 8) * d;
    out[j + kQK4_0 / 2] = static_cast<float>((block.qs[j] >> 4) - 8) * d;
  }
}

BlockQ8_0 quantize_block_q8_0(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0 block{};
  block.d = f32_to_f16(d);
  for (int j = 0; j < kQK8_0; ++j) {
    // |x * id| <= 127 for finite input; the clamp only keeps NaN/inf defined.
    const float q = std::round(x[j] * id);
    block.qs[j] = static_cast<int8_t>(q >= -127.0f && q <= 127.0f ? q : 0.0f);
  }
  return block;
}

BlockQ4_0 quantize_block_q4_0(const float* x) {
  // The value of largest magnitude, sign kept, maps to -8.
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kQK4_0; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_0 block{};
  block.d = f32_to_f16(d);
  auto nibble = [id](float v) {
    const float shifted = v * id + 8.5f;  // in [0.5, 16.5] for finite input
    if (!(shifted >= 0.0f && shifted < 127.0f)) return uint8_t{8};
    const int q = static_cast<int8_t>(shifted);  // truncation, as the reference's (int8_t) cast
    return static_cast<uint8_t>(q < 15 ? q : 15);
  };
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    block.qs[j] = static_cast<uint8_t>(nibble(x[j]) | (nibble(x[j + kQK4_0 / 2]) << 4));
  }
  return block;
}

void quantize_row_q8_0_split(const float* x, int64_t n, int8_t* q, float* scale) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const BlockQ8_0 block = quantize_block_q8_0(x + b * kQK8_0);
    for (int j = 0; j < kQK8_0; ++j) q[b * kQK8_0 + j] = block.qs[j];
    scale[b] = f16_to_f32(block.d);
  }
}

float q8_0_scale(float amax) {
  return f16_to_f32(f32_to_f16(amax / 127.0f));
}

void row_to_f32_scalar(DType type, const void* src, float* dst, int64_t n) {
  // Weights may sit at any byte offset of a mapped file: read them with memcpy, never through a
  // typed pointer that would assume alignment.
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(bytes + 2 * i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(bytes + 2 * i));
      return;
    case DType::Q8_0:
      for (int64_t i = 0; i < n / kQK8_0; ++i) {
        BlockQ8_0 block;
        std::memcpy(&block, bytes + i * sizeof(BlockQ8_0), sizeof(block));
        dequantize_block(block, dst + i * kQK8_0);
      }
      return;
    case DType::Q4_0:
      for (int64_t i = 0; i < n / kQK4_0; ++i) {
        BlockQ4_0 block;
        std::memcpy(&block, bytes + i * sizeof(BlockQ4_0), sizeof(block));
        dequantize_block(block, dst + i * kQK4_0);
      }
      return;
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS:
      dequantize_row_blocks(type, bytes, dst, n);
      return;
    case DType::I32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, bytes + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::Count:
      break;
  }
}

void row_from_f32(DType type, const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) store_u16(out + 2 * i, f32_to_f16(src[i]));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(out + 2 * i, f32_to_bf16(src[i]));
      return;
    case DType::Q8_0:
      for (int64_t i = 0; i < n / kQK8_0; ++i) {
        const BlockQ8_0 block = quantize_block_q8_0(src + i * kQK8_0);
        std::memcpy(out + i * sizeof(BlockQ8_0), &block, sizeof(block));
      }
      return;
    case DType::Q4_0:
      for (int64_t i = 0; i < n / kQK4_0; ++i) {
        const BlockQ4_0 block = quantize_block_q4_0(src + i * kQK4_0);
        std::memcpy(out + i * sizeof(BlockQ4_0), &block, sizeof(block));
      }
      return;
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS:
      quantize_row_blocks(type, src, dst, n);
      return;
    default:  // i32 (from_f32 refuses it)
      break;
  }
}

}  // namespace ferry::kernels::cpu
