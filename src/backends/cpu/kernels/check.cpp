#include "backends/cpu/kernels/check.h"

#include "backends/cpu/kernels/cpu/quant.h"
#include "core/error.h"
#include "core/half.h"

namespace ferry::kernels {

namespace {
std::string describe(const Tensor& t, std::string_view role) {
  return t.name().empty() ? fmt::format("{}", role) : fmt::format("{} '{}'", role, t.name());
}
}  // namespace

void check_defined(std::string_view kernel, const Tensor& t, std::string_view role) {
  if (!t.defined()) fail(ErrorKind::Usage, "{}: {} has no data; pass an allocated tensor", kernel, role);
}

void check_dtype(std::string_view kernel, const Tensor& t, std::string_view role, DType dtype) {
  check_defined(kernel, t, role);
  if (t.dtype() != dtype) {
    fail(ErrorKind::Shape, "{}: {} is {} {}, expected {}; convert it first", kernel, describe(t, role),
         dtype_name(t.dtype()), t.shape().str(), dtype_name(dtype));
  }
}

void check_shape(std::string_view kernel, const Tensor& t, std::string_view role, const Shape& want) {
  check_defined(kernel, t, role);
  if (!(t.shape() == want)) {
    fail(ErrorKind::Shape, "{}: {} has shape {}, expected {}", kernel, describe(t, role), t.shape().str(), want.str());
  }
}

void check_same_device(std::string_view kernel, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || t->device() == nullptr) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->device() != first->device()) {
      fail(ErrorKind::DeviceMismatch, "{}: '{}' is on {} but '{}' is on {}; the scheduler must copy one of them",
           kernel, first->name(), first->device_name(), t->name(), t->device_name());
    }
  }
}

void check_float_vector(std::string_view kernel, const Tensor& t, std::string_view role, int64_t n) {
  check_defined(kernel, t, role);
  if (!dtype_traits(t.dtype()).is_float) {
    fail(ErrorKind::Shape, "{}: {} is {}, expected f32, f16 or bf16", kernel, describe(t, role), dtype_name(t.dtype()));
  }
  if (t.numel() != n) {
    fail(ErrorKind::Shape, "{}: {} has shape {} ({} values), expected {} values", kernel, describe(t, role),
         t.shape().str(), t.numel(), n);
  }
}

const float* float_vector(const Tensor& t, std::vector<float>& scratch) {
  if (t.dtype() == DType::F32) return t.data_as<const float>();
  scratch.resize(static_cast<size_t>(t.numel()));
  cpu::row_to_f32_scalar(t.dtype(), t.data(), scratch.data(), t.numel());
  return scratch.data();
}

}  // namespace ferry::kernels
