#include "runtime/weight_store.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/kernels.h"

namespace ferry {

void WeightStore::add(const std::string& name, Tensor tensor) {
  if (!tensor.defined()) fail(ErrorKind::Usage, "weight '{}' has no data", name);
  if (tensor.device() == nullptr) {
    fail(ErrorKind::Usage,
         "weight '{}' is in host memory; the weight store holds device tensors only: materialise it onto its "
         "module's device with materialize_weight()",
         name);
  }
  if (weights_.count(name)) {
    fail(ErrorKind::Usage, "weight '{}' is added twice (first on {}, again on {})", name,
         weights_.at(name).device_name(), tensor.device_name());
  }
  tensor.set_name(name);
  weights_.emplace(name, std::move(tensor));
  generation_++;
}

void WeightStore::clear() {
  weights_.clear();
  generation_++;
}

const Tensor* WeightStore::find(const std::string& name) const {
  auto it = weights_.find(name);
  return it == weights_.end() ? nullptr : &it->second;
}

namespace {

// Rows [begin, begin + count) of a contiguous tensor, as a tensor over the same storage.
Tensor row_range(const Tensor& t, int64_t begin, int64_t count) {
  const size_t offset =
      static_cast<size_t>(static_cast<const char*>(t.data()) - static_cast<const char*>(t.storage()->data()));
  return Tensor::view(t.storage(), offset + static_cast<size_t>(begin) * t.row_bytes(), t.dtype(),
                      Shape{count, t.shape().last()}, t.name());
}

// Bounds the f32 staging buffer used when converting between two non-f32 dtypes.
constexpr size_t kStagingBytes = size_t{16} << 20;

}  // namespace

Tensor materialize_weight(const Tensor& source, Device& device, DType dtype, const std::string& name) {
  if (!source.defined()) fail(ErrorKind::Usage, "weight '{}' has no data to materialise", name);
  const int64_t row_len = source.shape().last();
  if (!dtype_bytes(dtype, static_cast<uint64_t>(row_len))) {
    fail(ErrorKind::Shape,
         "weight '{}' of shape {} cannot be stored as {}: its rows of {} elements are not a multiple of the {}-element "
         "block; keep it as {}",
         name, source.shape().str(), dtype_name(dtype), row_len, dtype_traits(dtype).block_size,
         dtype_name(source.dtype()));
  }
  Tensor out = Tensor::empty(device, dtype, source.shape(), name);
  ThreadPool& pool = device.threads();
  if (dtype == source.dtype()) {
    kernels::copy(source, out, pool);
    return out;
  }
  // Work on 2-D row views so the kernels see [rows, last] whatever the rank.
  const int64_t rows = source.shape().rows();
  const Tensor src2 = source.reshape(Shape{rows, row_len});
  Tensor dst2 = out.reshape(Shape{rows, row_len});
  if (source.dtype() == DType::F32) {
    kernels::from_f32(src2, dst2, pool);
  } else if (dtype == DType::F32) {
    kernels::to_f32(src2, dst2, pool);
  } else {
    const size_t staging_row = static_cast<size_t>(row_len) * sizeof(float);
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kStagingBytes / std::max<size_t>(1, staging_row)));
    Tensor staging = Tensor::host(DType::F32, Shape{std::min(chunk, rows), row_len}, name + " (f32 staging)");
    for (int64_t r = 0; r < rows; r += chunk) {
      const int64_t n = std::min(chunk, rows - r);
      Tensor stage = row_range(staging, 0, n);
      kernels::to_f32(row_range(src2, r, n), stage, pool);
      Tensor dst_rows = row_range(dst2, r, n);
      kernels::from_f32(stage, dst_rows, pool);
    }
  }
  return out;
}

}  // namespace ferry
