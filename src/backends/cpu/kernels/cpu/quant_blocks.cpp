#include "backends/cpu/kernels/cpu/quant_blocks.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"

namespace ferry::kernels::cpu {

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
float half_at(const uint8_t* p) {
  return f16_to_f32(load_u16(p));
}

// Round half to even, as ggml's nearest_int (|v| < 2^22): adding 1.5 * 2^23 leaves the rounded
// integer in the low mantissa bits.
int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// The quants of one block of 32 of a 32-element type, as the integers its value multiplies:
// q4_1 / q5_1 as stored (unsigned, the min added apart), q5_0 less 16, iq4_nl from its table.
void block32_quants(DType type, const uint8_t* block, int32_t q[32]) {
  switch (type) {
    case DType::Q4_1:
      for (int j = 0; j < 16; ++j) {
        q[j] = block[4 + j] & 15;
        q[j + 16] = block[4 + j] >> 4;
      }
      return;
    case DType::Q5_0:
    case DType::Q5_1: {
      const size_t at = type == DType::Q5_0 ? 2 : 4;
      const uint32_t qh = load_u32(block + at);
      const int offset = type == DType::Q5_0 ? 16 : 0;
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = block[at + 4 + static_cast<size_t>(j)];
        q[j] = static_cast<int32_t>((byte & 15) | (((qh >> j) & 1) << 4)) - offset;
        q[j + 16] = static_cast<int32_t>((byte >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset;
      }
      return;
    }
    case DType::IQ4_NL:
      for (int j = 0; j < 16; ++j) {
        q[j] = kIq4NlValues[block[2 + j] & 15];
        q[j + 16] = kIq4NlValues[block[2 + j] >> 4];
      }
      return;
    default:
      return;
  }
}

// One super-block of a 256-element type as integers: value e = d * scale[e / 16] * q[e]
// - dmin * min[e / 16] (min 0 where the type has none). scale and min are per 16 elements; the
// 32-element sub-block types repeat theirs. Returns d and dmin through the pointers.
void super_block_quants(DType type, const uint8_t* b, int32_t q[256], int32_t scale[16], int32_t min[16], float* d,
                        float* dmin) {
  *dmin = 0.0f;
  for (int s = 0; s < 16; ++s) min[s] = 0;
  switch (type) {
    case DType::Q2_K: {
      const uint8_t* qs = b + 16;
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, c = (e % 128) / 32, l = e % 32;
        q[e] = (qs[32 * h + l] >> (2 * c)) & 3;
      }
      for (int s = 0; s < 16; ++s) {
        scale[s] = b[s] & 15;
        min[s] = b[s] >> 4;
      }
      *d = half_at(b + 80);
      *dmin = half_at(b + 82);
      return;
    }
    case DType::Q3_K: {
      const uint8_t* hmask = b;
      const uint8_t* qs = b + 32;
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, c = (e % 128) / 32, l = e % 32;
        const int low = (qs[32 * h + l] >> (2 * c)) & 3;
        const int high = (hmask[l] >> (4 * h + c)) & 1;
        q[e] = low - (high != 0 ? 0 : 4);
      }
      uint8_t sc[16];
      unpack_scales_q3_k(b + 96, sc);
      for (int s = 0; s < 16; ++s) scale[s] = sc[s] - 32;
      *d = half_at(b + 108);
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = type == DType::Q5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int e = 0; e < 256; ++e) {
        const int j = e / 32, l = e % 32;
        const uint8_t byte = qs[32 * (j / 2) + l];
        q[e] = (j % 2 == 0 ? byte & 15 : byte >> 4) + (five ? ((qh[l] >> j) & 1) << 4 : 0);
      }
      uint8_t sc[8], m[8];
      unpack_scales_k4(b + 4, sc, m);
      for (int s = 0; s < 16; ++s) {
        scale[s] = sc[s / 2];
        min[s] = m[s / 2];
      }
      *d = half_at(b);
      *dmin = half_at(b + 2);
      return;
    }
    case DType::Q6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, c = (e % 128) / 32, l = e % 32;
        const uint8_t low_byte = ql[64 * h + 32 * (c % 2) + l];
        const int low = c < 2 ? low_byte & 15 : low_byte >> 4;
        const int high = (qh[32 * h + l] >> (2 * c)) & 3;
        q[e] = (low | (high << 4)) - 32;
      }
      for (int s = 0; s < 16; ++s) scale[s] = static_cast<int8_t>(b[192 + s]);
      *d = half_at(b + 208);
      return;
    }
    case DType::IQ4_XS: {
      const uint16_t scales_h = load_u16(b + 2);
      const uint8_t* qs = b + 8;
      for (int j = 0; j < 8; ++j) {
        for (int l = 0; l < 16; ++l) {
          q[32 * j + l] = kIq4NlValues[qs[16 * j + l] & 15];
          q[32 * j + l + 16] = kIq4NlValues[qs[16 * j + l] >> 4];
        }
        const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((scales_h >> (2 * j)) & 3) << 4);
        scale[2 * j] = scale[2 * j + 1] = ls - 32;
      }
      *d = half_at(b);
      return;
    }
    default:
      return;
  }
}

}  // namespace

ActivationQuant activation_quant(DType weight_type) {
  switch (weight_type) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
      return ActivationQuant::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1:
      return ActivationQuant::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS:
      return ActivationQuant::Q8_K;
    default:
      return ActivationQuant::None;
  }
}

bool is_block_type(DType type) {
  switch (type) {
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
      return true;
    default:
      return false;
  }
}

float* row_scratch(int64_t n) {
  thread_local std::vector<float> row;
  if (row.size() < static_cast<size_t>(n)) row.resize(static_cast<size_t>(n));
  return row.data();
}

void unpack_scales_k4(const uint8_t* p, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = p[j] & 63;
    m[j] = p[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((p[j + 4] & 15) | ((p[j - 4] >> 6) << 4));
    m[j] = static_cast<uint8_t>((p[j + 4] >> 4) | ((p[j] >> 6) << 4));
  }
}

void unpack_scales_q3_k(const uint8_t* p, uint8_t sc[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? p[j] & 15 : p[j - 8] >> 4;
    const int high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = static_cast<uint8_t>(low | (high << 4));
  }
}

void dequantize_row_blocks(DType type, const uint8_t* src, float* dst, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  const int64_t blocks = n / t.block_size;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + static_cast<size_t>(i) * t.block_bytes;
    float* y = dst + i * t.block_size;
    // The float operations in ggml's order (dequantize_row_*), so every value is bit-identical.
    if (t.block_size == 32) {
      int32_t q[32];
      block32_quants(type, b, q);
      const float d = half_at(b);
      if (type == DType::Q4_1 || type == DType::Q5_1) {
        const float m = half_at(b + 2);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d + m;
      } else {
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d;
      }
      continue;
    }
    int32_t q[256], scale[16], min[16];
    float d = 0.0f, dmin = 0.0f;
    super_block_quants(type, b, q, scale, min, &d, &dmin);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * static_cast<float>(scale[s]);
      const float ml = dmin * static_cast<float>(min[s]);
      for (int l = 0; l < 16; ++l) {
        const float v = dl * static_cast<float>(q[16 * s + l]);
        // Types without mins subtract nothing (ggml computes dl * q alone; v - 0 is v).
        y[16 * s + l] = v - ml;
      }
    }
  }
}

void q8_1_sums(const float* x, const int8_t* q, int64_t n, float* s) {
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
      sum += q[b * 32 + j];
    }
    const float d = amax / 127.0f;
    s[b] = f16_to_f32(f32_to_f16(static_cast<float>(sum) * d));
  }
}

void quantize_row_q8_K_split(const float* x, int64_t n, int8_t* q, float* scale, int16_t* bsum) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* v = x + b * kQK_K;
    int8_t* out = q + b * kQK_K;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(v[j]) > amax) {
        amax = std::fabs(v[j]);
        max = v[j];
      }
    }
    if (amax == 0.0f) {
      scale[b] = 0.0f;
      for (int j = 0; j < kQK_K; ++j) out[j] = 0;
    } else {
      const float iscale = -127.0f / max;
      for (int j = 0; j < kQK_K; ++j) {
        const int r = nearest_int(iscale * v[j]);
        out[j] = static_cast<int8_t>(r < 127 ? r : 127);
      }
      scale[b] = 1.0f / iscale;
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += out[16 * g + j];
      bsum[b * (kQK_K / 16) + g] = static_cast<int16_t>(sum);
    }
  }
}

float dot_row_blocks_scalar(DType type, const uint8_t* w, const RoundedRow& x, int64_t K) {
  const DTypeTraits& t = dtype_traits(type);
  float acc = 0.0f;
  if (t.block_size == 32) {
    const bool has_min = type == DType::Q4_1 || type == DType::Q5_1;
    for (int64_t b = 0; b < K / 32; ++b) {
      const uint8_t* block = w + static_cast<size_t>(b) * t.block_bytes;
      int32_t q[32];
      block32_quants(type, block, q);
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += q[j] * x.q[b * 32 + j];
      acc += half_at(block) * x.scale[b] * static_cast<float>(dot);
      if (has_min) acc += half_at(block + 2) * x.sum[b];
    }
    return acc;
  }
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    int32_t q[256], scale[16], min[16];
    float d = 0.0f, dmin = 0.0f;
    super_block_quants(type, w + static_cast<size_t>(b) * t.block_bytes, q, scale, min, &d, &dmin);
    const int8_t* xq = x.q + b * kQK_K;
    const int16_t* bsum = x.bsum + b * (kQK_K / 16);
    int32_t dot = 0, mins = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t part = 0;
      for (int l = 0; l < 16; ++l) part += q[16 * s + l] * xq[16 * s + l];
      dot += scale[s] * part;
      mins += min[s] * bsum[s];
    }
    acc += d * x.scale[b] * static_cast<float>(dot);
    acc -= dmin * x.scale[b] * static_cast<float>(mins);
  }
  return acc;
}

}  // namespace ferry::kernels::cpu
