// Naive references for the kernel tests, written independently of src/kernels: plain loops,
// double accumulation, GGUF blocks decoded byte by byte from the layout in core/dtype.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "graph/op.h"

namespace ferry::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor f32_tensor(const Shape& shape, const std::vector<float>& values, const std::string& name = "t") {
  Tensor t = Tensor::host(DType::F32, shape, name);
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

inline Tensor i32_tensor(const std::vector<int32_t>& values, const std::string& name = "ids") {
  Tensor t = Tensor::host(DType::I32, Shape{static_cast<int64_t>(values.size())}, name);
  std::memcpy(t.data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

inline std::vector<float> values_of(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data(), v.size() * sizeof(float));
  return v;
}

inline double ref_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Element i of a row of one of the other GGUF block types, decoded on its own from ggml's layouts
// (ggml-common.h block structs, ggml-quants.c dequantize_row_*), in exact double arithmetic: the
// value a matmul's weights stand for. Rounded to float it is the dequantized f32 value.
inline double ref_element_block(DType dtype, const uint8_t* row, int64_t i) {
  const int64_t j = i % 32;  // within its block of 32
  const auto nibble = [&](const uint8_t* qs) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; };
  const auto bit = [](const uint8_t* bytes, int64_t n) { return (bytes[n / 8] >> (n % 8)) & 1; };
  // 6-bit scale and min of q4_k / q5_k sub-block s (ggml's get_scale_min_k4).
  const auto scale_min_k4 = [](const uint8_t* q, int s, int& sc, int& m) {
    if (s < 4) {
      sc = q[s] & 63;
      m = q[s + 4] & 63;
    } else {
      sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4);
      m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
  };
  const int64_t e = i % 256;  // within its super-block
  const int half = static_cast<int>(e / 128), chunk = static_cast<int>(e % 128 / 32), l = static_cast<int>(e % 32);
  switch (dtype) {
    case DType::Q4_1: {
      const uint8_t* b = row + (i / 32) * 20;
      return ref_half(b) * nibble(b + 4) + ref_half(b + 2);
    }
    case DType::Q5_0: {
      const uint8_t* b = row + (i / 32) * 22;
      return ref_half(b) * ((nibble(b + 6) | (bit(b + 2, j) << 4)) - 16);
    }
    case DType::Q5_1: {
      const uint8_t* b = row + (i / 32) * 24;
      return ref_half(b) * (nibble(b + 8) | (bit(b + 4, j) << 4)) + ref_half(b + 2);
    }
    case DType::IQ4_NL: {
      static constexpr int kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      const uint8_t* b = row + (i / 32) * 18;
      return ref_half(b) * kValues[nibble(b + 2)];
    }
    case DType::Q2_K: {  // scales[16], qs[64], d, dmin
      const uint8_t* b = row + (i / 256) * 84;
      const int q = (b[16 + 32 * half + l] >> (2 * chunk)) & 3;
      const uint8_t sc = b[e / 16];
      return ref_half(b + 80) * (sc & 15) * q - ref_half(b + 82) * (sc >> 4);
    }
    case DType::Q3_K: {  // hmask[32], qs[64], scales[12], d
      const uint8_t* b = row + (i / 256) * 110;
      const int low = (b[32 + 32 * half + l] >> (2 * chunk)) & 3;
      const int high = (b[l] >> (4 * half + chunk)) & 1;
      const int s = static_cast<int>(e / 16);
      const uint8_t* sc = b + 96;
      const int scale = ((s < 8 ? sc[s] & 15 : sc[s - 8] >> 4) | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
      return ref_half(b + 108) * scale * (low - (high ? 0 : 4));
    }
    case DType::Q4_K:
    case DType::Q5_K: {  // d, dmin, scales[12], (qh[32],) qs[128]
      const bool five = dtype == DType::Q5_K;
      const uint8_t* b = row + (i / 256) * (five ? 176 : 144);
      const int s = static_cast<int>(e / 32);
      const uint8_t byte = b[(five ? 48 : 16) + 32 * (s / 2) + l];
      int q = s % 2 == 0 ? byte & 15 : byte >> 4;
      if (five) q += ((b[16 + l] >> s) & 1) << 4;
      int sc = 0, m = 0;
      scale_min_k4(b + 4, s, sc, m);
      return ref_half(b) * sc * q - ref_half(b + 2) * m;
    }
    case DType::Q6_K: {  // ql[128], qh[64], scales[16] (int8), d
      const uint8_t* b = row + (i / 256) * 210;
      const uint8_t low_byte = b[64 * half + 32 * (chunk % 2) + l];
      const int low = chunk < 2 ? low_byte & 15 : low_byte >> 4;
      const int high = (b[128 + 32 * half + l] >> (2 * chunk)) & 3;
      const auto scale = static_cast<int8_t>(b[192 + e / 16]);
      return ref_half(b + 208) * scale * ((low | (high << 4)) - 32);
    }
    case DType::IQ4_XS: {  // d, scales_h, scales_l[4], qs[128]
      static constexpr int kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      const uint8_t* b = row + (i / 256) * 136;
      const int s = static_cast<int>(e / 32);
      uint16_t scales_h;
      std::memcpy(&scales_h, b + 2, 2);
      const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((scales_h >> (2 * s)) & 3) << 4);
      return ref_half(b) * (ls - 32) * kValues[nibble(b + 8 + 16 * s)];
    }
    default:
      return NAN;
  }
}

// Where a block type keeps its fp16 fields (scale, min), by byte offset in the block.
inline std::vector<size_t> ref_half_fields(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      return {0};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q2_K:
      return {80, 82};
    case DType::Q3_K:
      return {108};
    case DType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// Decodes element i of a row stored in `dtype` (the GGUF layouts: 2-byte fp16 scale then quants).
inline double ref_element(DType dtype, const uint8_t* row, int64_t i) {
  switch (dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    case DType::Q8_0: {
      const uint8_t* block = row + (i / 32) * 34;
      uint16_t d;
      std::memcpy(&d, block, 2);
      const auto q = static_cast<int8_t>(block[2 + i % 32]);
      return static_cast<double>(f16_to_f32(d)) * q;
    }
    case DType::Q4_0: {
      const uint8_t* block = row + (i / 32) * 18;
      uint16_t d;
      std::memcpy(&d, block, 2);
      const int j = static_cast<int>(i % 32);
      const uint8_t byte = block[2 + j % 16];
      const int q = (j < 16 ? (byte & 15) : (byte >> 4)) - 8;
      return static_cast<double>(f16_to_f32(d)) * q;
    }
    default:
      return ref_element_block(dtype, row, i);
  }
}

// Fills a weight tensor of `dtype` with random content: random floats for plain types, random
// scales and quants for quantized types (every bit pattern of the quants is exercised).
inline Tensor random_weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor t = Tensor::host(dtype, Shape{rows, cols}, "w");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto* p = static_cast<uint8_t*>(t.data());
  const size_t bytes = t.nbytes();
  if (dtype_traits(dtype).is_quantized) {
    // Random bytes, then each fp16 field a small finite value (a min or dmin of either sign).
    const size_t block = dtype_traits(dtype).block_bytes;
    for (size_t j = 0; j < bytes; ++j) p[j] = static_cast<uint8_t>(rng());
    const float scale = dtype_traits(dtype).block_size == 256 ? 0.005f : 0.05f;
    for (size_t b = 0; b < bytes / block; ++b) {
      for (size_t at : ref_half_fields(dtype)) {
        const uint16_t d = f32_to_f16(dist(rng) * scale);
        std::memcpy(p + b * block + at, &d, 2);
      }
    }
  } else {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float f = dist(rng);
      if (dtype == DType::F32) std::memcpy(p + 4 * i, &f, 4);
      if (dtype == DType::F16 || dtype == DType::BF16) {
        const uint16_t h = dtype == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
        std::memcpy(p + 2 * i, &h, 2);
      }
    }
  }
  return t;
}

// The GGUF reference quantizers, written from ggml's quantize_row_q8_0_ref / q4_0_ref: q8_0 scale
// d = amax / 127, q = roundf(x / d) (half away from zero); q4_0 scale d = max / -8 with max the
// value of largest magnitude (sign kept), q = min(15, (int8_t)(x / d + 8.5)) (truncation).
inline std::vector<uint8_t> ref_quantize(DType dtype, const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float* v = x.data() + b * 32;
    if (dtype == DType::Q8_0) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const uint16_t dh = f32_to_f16(d);
      out.push_back(static_cast<uint8_t>(dh & 255));
      out.push_back(static_cast<uint8_t>(dh >> 8));
      for (int j = 0; j < 32; ++j) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::roundf(v[j] * id))));
    } else {
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < 32; ++j) {
        if (std::fabs(v[j]) > amax) {
          amax = std::fabs(v[j]);
          max = v[j];
        }
      }
      const float d = max / -8.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const uint16_t dh = f32_to_f16(d);
      out.push_back(static_cast<uint8_t>(dh & 255));
      out.push_back(static_cast<uint8_t>(dh >> 8));
      for (int j = 0; j < 16; ++j) {
        const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(v[j] * id + 8.5f)));
        const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(v[j + 16] * id + 8.5f)));
        out.push_back(static_cast<uint8_t>(lo | (hi << 4)));
      }
    }
  }
  return out;
}

// A row of activations rounded as llama.cpp rounds it before its product with weights of a type
// (ggml-cpu's vec_dot_type): q8_0 for q8_0, q4_0, q5_0, iq4_nl; q8_1 for q4_1, q5_1; q8_K for the
// k-quants and iq4_xs. `x` holds the values that meet the weights (d * q); for q8_1, `s` holds each
// block's s = fp16(d * sum q) with d = amax / 127 unrounded (which meets the weights' min).
// Written from ggml's quantize_row_q8_0_ref / q8_1_ref / q8_K_ref.
struct RefRounded {
  std::vector<double> x;
  std::vector<double> s;
};
enum class RefActivation { None, Q8_0, Q8_1, Q8_K };
inline RefActivation ref_activation(DType w) {
  switch (w) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
      return RefActivation::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1:
      return RefActivation::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS:
      return RefActivation::Q8_K;
    default:
      return RefActivation::None;
  }
}
// q8_K's rounding of 256 values: the value of largest magnitude (the first, sign kept) maps to -127,
// q = min(127, round-half-even(x * (-127 / max))), d = 1 / (-127 / max) (f32 throughout).
inline void ref_round_q8_K(const float* v, int8_t q[256], float* d) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 256; ++j) {
    if (std::fabs(v[j]) > amax) {
      amax = std::fabs(v[j]);
      max = v[j];
    }
  }
  if (amax == 0.0f) {
    *d = 0.0f;
    for (int j = 0; j < 256; ++j) q[j] = 0;
    return;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < 256; ++j) {
    const float t = iscale * v[j];
    q[j] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(t)));  // the default mode: half to even
  }
  *d = 1.0f / iscale;
}
inline RefRounded ref_round_activations(DType w, const std::vector<float>& row) {
  RefRounded r;
  const RefActivation a = ref_activation(w);
  if (a == RefActivation::Q8_K) {
    for (size_t b = 0; b < row.size() / 256; ++b) {
      int8_t q[256];
      float d = 0.0f;
      ref_round_q8_K(row.data() + b * 256, q, &d);
      for (int j = 0; j < 256; ++j) r.x.push_back(static_cast<double>(d) * q[j]);
    }
    return r;
  }
  const std::vector<uint8_t> q = ref_quantize(DType::Q8_0, row);
  for (size_t b = 0; b < row.size() / 32; ++b) {
    uint16_t dh;
    std::memcpy(&dh, q.data() + b * 34, 2);
    int sum = 0;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const auto qj = static_cast<int8_t>(q[b * 34 + 2 + static_cast<size_t>(j)]);
      r.x.push_back(static_cast<double>(f16_to_f32(dh)) * qj);
      sum += qj;
      amax = std::max(amax, std::fabs(row[b * 32 + static_cast<size_t>(j)]));
    }
    if (a == RefActivation::Q8_1) r.s.push_back(f16_to_f32(f32_to_f16(static_cast<float>(sum) * (amax / 127.0f))));
  }
  return r;
}
// The dot product of a weight row with rounded activations, in double: sum of weight * x, where
// for q8_1 each block's min meets s instead of the sum of its x. `magnitude` gets the sum of the
// terms' magnitudes (for a relative tolerance).
inline double ref_dot_rounded(DType w, const uint8_t* row, const RefRounded& r, double* magnitude) {
  double dot = 0.0, mag = 0.0;
  for (size_t e = 0; e < r.x.size(); ++e) {
    const double p = ref_element(w, row, static_cast<int64_t>(e)) * r.x[e];
    dot += p;
    mag += std::fabs(p);
  }
  for (size_t b = 0; b < r.s.size(); ++b) {
    const double m = ref_half(row + b * dtype_traits(w).block_bytes + 2);
    double xsum = 0.0;
    for (size_t j = 0; j < 32; ++j) xsum += r.x[b * 32 + j];
    dot += m * (r.s[b] - xsum);
    mag += std::fabs(m * r.s[b]);
  }
  *magnitude = mag;
  return dot;
}

}  // namespace ferry::test

namespace ferry::test {

// Restores the SIMD level a test found when it ends.
class SimdLevelGuard {
 public:
  SimdLevelGuard();
  ~SimdLevelGuard();
  SimdLevelGuard(const SimdLevelGuard&) = delete;
  SimdLevelGuard& operator=(const SimdLevelGuard&) = delete;

 private:
  std::string saved_;
};

// Expects `fn` to throw ferry::Error of `kind` whose message contains every one of `needles`.
template <typename F>
void expect_error(ErrorKind kind, F fn, std::initializer_list<const char*> needles = {}) {
  try {
    fn();
    ADD_FAILURE() << "expected an error of kind " << error_kind_name(kind);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const char* needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "'" << needle << "' not in: " << e.what();
    }
  }
}

}  // namespace ferry::test
