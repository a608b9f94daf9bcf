// rms_norm and layer_norm over the last dimension. Statistics accumulate in double: the rows are
// short (the hidden size) and this keeps the result independent of summation order.
#include <cmath>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {
void check_norm_args(std::string_view kernel, const Tensor& x, const Tensor& w, const Tensor* b, float eps,
                     const Tensor& out) {
  check_f32(kernel, x, "input x");
  check_same_device(kernel, {&x, &w, b, &out});
  if (x.rank() < 1) fail(ErrorKind::Shape, "{}: input '{}' is a scalar; expected [.., H]", kernel, x.name());
  check_float_vector(kernel, w, "weight", x.dim(-1));
  if (b != nullptr) check_float_vector(kernel, *b, "bias", x.dim(-1));
  check_f32(kernel, out, "output");
  check_shape(kernel, out, "output", x.shape());
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    fail(ErrorKind::Usage, "{}: eps {} must be a finite number >= 0", kernel, eps);
  }
}
}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out, ThreadPool& pool) {
  check_norm_args("rms_norm", x, w, nullptr, eps, out);
  const int64_t H = x.dim(-1);
  std::vector<float> w_scratch;
  const float* weight = float_vector(w, w_scratch);
  const float* src = x.data_as<const float>();
  float* dst = out.data_as<float>();
  pool.parallel_range(x.shape().rows(), min_chunk_for(H), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = src + r * H;
      float* yr = dst + r * H;
      double sum_sq = 0.0;
      for (int64_t i = 0; i < H; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
      const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(H) + eps));
      for (int64_t i = 0; i < H; ++i) yr[i] = xr[i] * inv_rms * weight[i];
    }
  });
}

void layer_norm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& out, ThreadPool& pool) {
  check_norm_args("layer_norm", x, w, b, eps, out);
  const int64_t H = x.dim(-1);
  std::vector<float> w_scratch;
  std::vector<float> b_scratch;
  const float* weight = float_vector(w, w_scratch);
  const float* bias = b ? float_vector(*b, b_scratch) : nullptr;
  const float* src = x.data_as<const float>();
  float* dst = out.data_as<float>();
  pool.parallel_range(x.shape().rows(), min_chunk_for(H), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = src + r * H;
      float* yr = dst + r * H;
      double sum = 0.0;
      for (int64_t i = 0; i < H; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(H);
      double sum_sq = 0.0;
      for (int64_t i = 0; i < H; ++i) sum_sq += (xr[i] - mean) * (xr[i] - mean);
      const double inv_std = 1.0 / std::sqrt(sum_sq / static_cast<double>(H) + eps);
      const auto mean_f = static_cast<float>(mean);
      const auto inv_std_f = static_cast<float>(inv_std);
      for (int64_t i = 0; i < H; ++i) {
        yr[i] = (xr[i] - mean_f) * inv_std_f * weight[i] + (bias ? bias[i] : 0.0f);
      }
    }
  });
}

}  // namespace ferry::kernels
