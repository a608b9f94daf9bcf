// Element-wise ops and softmax on f32 tensors. Large tensors are split over the pool.
#include <cmath>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/cpu/isa.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

constexpr int64_t kElementChunk = 1 << 14;  // below this, one thread is faster than waking others

void check_unary(std::string_view kernel, const Tensor& x, const Tensor& out) {
  check_f32(kernel, x, "input x");
  check_f32(kernel, out, "output");
  check_same_device(kernel, {&x, &out});
  check_shape(kernel, out, "output", x.shape());
}

void check_binary(std::string_view kernel, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_f32(kernel, a, "input a");
  check_f32(kernel, b, "input b");
  check_f32(kernel, out, "output");
  check_same_device(kernel, {&a, &b, &out});
  check_shape(kernel, b, "input b", a.shape());
  check_shape(kernel, out, "output", a.shape());
}

template <typename F>
void map_unary(const Tensor& x, Tensor& out, ThreadPool& pool, F f) {
  const float* src = x.data_as<const float>();
  float* dst = out.data_as<float>();
  pool.parallel_range(x.numel(), kElementChunk, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) dst[i] = f(src[i]);
  });
}

template <typename F>
void map_binary(const Tensor& a, const Tensor& b, Tensor& out, ThreadPool& pool, F f) {
  const float* pa = a.data_as<const float>();
  const float* pb = b.data_as<const float>();
  float* dst = out.data_as<float>();
  pool.parallel_range(a.numel(), kElementChunk, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) dst[i] = f(pa[i], pb[i]);
  });
}

inline float silu_of(float x) {
  return x / (1.0f + std::exp(-x));
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out, ThreadPool& pool) {
  check_binary("add", a, b, out);
  map_binary(a, b, out, pool, [](float x, float y) { return x + y; });
}

void mul(const Tensor& a, const Tensor& b, Tensor& out, ThreadPool& pool) {
  check_binary("mul", a, b, out);
  map_binary(a, b, out, pool, [](float x, float y) { return x * y; });
}

void scale(const Tensor& x, float factor, Tensor& out, ThreadPool& pool) {
  check_unary("scale", x, out);
  map_unary(x, out, pool, [factor](float v) { return v * factor; });
}

void silu(const Tensor& x, Tensor& out, ThreadPool& pool) {
  check_unary("silu", x, out);
  map_unary(x, out, pool, silu_of);
}

void gelu(const Tensor& x, Tensor& out, ThreadPool& pool) {
  check_unary("gelu", x, out);
  // 0.5 x (1 + erf(x / sqrt 2)) written with erfc, which keeps its relative accuracy for negative
  // x where 1 + erf(..) would cancel.
  map_unary(x, out, pool, [](float v) { return 0.5f * v * std::erfc(v * -0.70710678118654752f); });
}

void gelu_tanh(const Tensor& x, Tensor& out, ThreadPool& pool) {
  check_unary("gelu_tanh", x, out);
  // 0.5 x (1 + tanh(z)) == x * sigmoid(2z): the same value without the cancellation of 1 + tanh.
  constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;
  map_unary(x, out, pool, [](float v) {
    const float u = kTwoSqrt2OverPi * (v + 0.044715f * v * v * v);
    return v / (1.0f + std::exp(-u));
  });
}

namespace {

// out[i] = silu(gate[i]) * up[i] for n floats: the level's vector loop where it has one.
void swiglu_row(const cpu::Isa& isa, const float* gate, const float* up, float* out, int64_t n) {
  if (isa.swiglu != nullptr) return isa.swiglu(gate, up, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = silu_of(gate[i]) * up[i];
}

}  // namespace

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool) {
  check_binary("swiglu", gate, up, out);
  const cpu::Isa& isa = cpu::active_isa();
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* dst = out.data_as<float>();
  pool.parallel_range(gate.numel(), kElementChunk, [&](int64_t begin, int64_t end, int) {
    swiglu_row(isa, g + begin, u + begin, dst + begin, end - begin);
  });
}

void swiglu_fused(const Tensor& x, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "swiglu";
  check_f32(kName, x, "input x");
  check_f32(kName, out, "output");
  check_same_device(kName, {&x, &out});
  if (x.rank() < 1 || x.dim(-1) % 2 != 0) {
    fail(ErrorKind::Shape, "swiglu: fused input '{}' {} needs an even last dim [.., 2F] (gate then up)", x.name(),
         x.shape().str());
  }
  Shape want = x.shape();
  want[want.rank - 1] /= 2;
  check_shape(kName, out, "output", want);
  const int64_t F = want.last();
  const float* src = x.data_as<const float>();
  float* dst = out.data_as<float>();
  const cpu::Isa& isa = cpu::active_isa();
  pool.parallel_range(want.rows(), min_chunk_for(F), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) swiglu_row(isa, src + r * 2 * F, src + r * 2 * F + F, dst + r * F, F);
  });
}

void softmax(const Tensor& x, Tensor& out, ThreadPool& pool) {
  check_unary("softmax", x, out);
  const int64_t n = x.shape().last();
  const float* src = x.data_as<const float>();
  float* dst = out.data_as<float>();
  pool.parallel_range(x.shape().rows(), min_chunk_for(n), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = src + r * n;
      float* yr = dst + r * n;
      float max = -INFINITY;
      for (int64_t i = 0; i < n; ++i) max = std::fmax(max, xr[i]);
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        yr[i] = std::exp(xr[i] - max);
        sum += yr[i];
      }
      const auto inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
    }
  });
}

}  // namespace ferry::kernels
