// Argument checks shared by the CPU kernels. Each throws a typed Error naming the kernel, the
// tensor and what would fix it; kernels call them before touching any data.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace ferry::kernels {

// The tensor exists (has storage).
void check_defined(std::string_view kernel, const Tensor& t, std::string_view role);
// Defined and of the given dtype.
void check_dtype(std::string_view kernel, const Tensor& t, std::string_view role, DType dtype);
// Defined and f32.
inline void check_f32(std::string_view kernel, const Tensor& t, std::string_view role) {
  check_dtype(kernel, t, role, DType::F32);
}
// Defined and of exactly this shape.
void check_shape(std::string_view kernel, const Tensor& t, std::string_view role, const Shape& want);
// Tensors placed on a device all share it (host memory is readable from any CPU device).
void check_same_device(std::string_view kernel, std::initializer_list<const Tensor*> tensors);
// A float vector parameter of `n` elements (norm weights, biases) in f32, f16 or bf16.
void check_float_vector(std::string_view kernel, const Tensor& t, std::string_view role, int64_t n);

// The values of a float vector parameter as f32: its own data when it is f32, else a converted
// copy kept in `scratch`.
const float* float_vector(const Tensor& t, std::vector<float>& scratch);

// Number of parallel tasks worth making for `work` units of roughly equal cost.
inline int64_t min_chunk_for(int64_t work_per_item, int64_t target = 1 << 14) {
  return work_per_item >= target ? 1 : (target + work_per_item - 1) / std::max<int64_t>(1, work_per_item);
}

}  // namespace ferry::kernels
