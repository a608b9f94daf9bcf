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
      return NAN;
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
  if (dtype == DType::Q8_0 || dtype == DType::Q4_0) {
    const size_t block = dtype == DType::Q8_0 ? 34 : 18;
    for (size_t b = 0; b < bytes / block; ++b) {
      const uint16_t d = f32_to_f16(dist(rng) * 0.05f);
      std::memcpy(p + b * block, &d, 2);
      for (size_t j = 2; j < block; ++j) p[b * block + j] = static_cast<uint8_t>(rng());
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
