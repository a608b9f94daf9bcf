#include "engine/weight_loader.h"

#include <algorithm>
#include <cstdint>

#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry {

namespace {

// Rows [begin, begin + count) of a contiguous [rows, last] tensor, over the same storage.
Tensor row_range(const Tensor& t, int64_t begin, int64_t count) {
  return Tensor::view(t.storage(), t.offset() + static_cast<size_t>(begin) * t.row_bytes(), t.dtype(),
                      Shape{count, t.shape().last()}, t.name());
}

// Bounds the host staging used when converting (the converted rows, and f32 rows between two
// non-f32 dtypes).
constexpr size_t kStagingBytes = size_t{16} << 20;

// Whether the mapped bytes can serve as the weight itself: the dtype it runs in, on a device whose
// kernels read host memory, at an address aligned for its elements (safetensors data may sit at any
// offset).
bool usable_in_place(const TensorRecord& record, DType compute_dtype, const Device& device) {
  const auto address = reinterpret_cast<uintptr_t>(record.data);
  const size_t element = dtype_traits(record.dtype).is_quantized ? 2 : dtype_traits(record.dtype).block_bytes;
  return device.host_addressable() && record.dtype == compute_dtype && record.file != nullptr &&
         address % std::max<size_t>(1, element) == 0;
}

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
  if (dtype == source.dtype()) {
    device.write(out, source.data());
    device.synchronize();
    return out;
  }
  // Converted on the host, a slab of rows at a time, each slab written to the device. One thread:
  // conversions at load are vectors and test weights (matrices keep their stored dtype).
  ThreadPool pool(1);
  const int64_t rows = source.shape().rows();
  const Tensor src2 = source.reshape(Shape{rows, row_len});
  const Tensor dst2 = out.reshape(Shape{rows, row_len});
  const size_t widest_row = static_cast<size_t>(row_len) * sizeof(float);
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kStagingBytes / std::max<size_t>(1, widest_row)));
  const int64_t first = std::min(chunk, rows);
  Tensor converted = Tensor::host(dtype, Shape{first, row_len}, name + " (converted)");
  Tensor widened = Tensor::host(DType::F32, Shape{first, row_len}, name + " (f32 staging)");
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    const Tensor from = row_range(src2, r, n);
    Tensor into = row_range(converted, 0, n);
    if (source.dtype() == DType::F32) {
      kernels::from_f32(from, into, pool);
    } else if (dtype == DType::F32) {
      kernels::to_f32(from, into, pool);
    } else {
      Tensor stage = row_range(widened, 0, n);
      kernels::to_f32(from, stage, pool);
      kernels::from_f32(stage, into, pool);
    }
    device.write(row_range(dst2, r, n), into.data());
    device.synchronize();  // the staging is reused by the next slab
  }
  return out;
}

void load_weights(const Checkpoint& ckpt, const Placement& placement, WeightStore& weights,
                  const LoadProgress& progress) {
  const uint64_t total = ckpt.weight_bytes();
  uint64_t done = 0;
  for (const auto& module : ckpt.spec.modules) {
    Device& device = placement.device_of(module.name);
    for (const auto& p : module.params) {
      if (weights.find(p.name) != nullptr) continue;  // tied: already loaded by an earlier module
      const TensorRecord* record = ckpt.tensors.find(p.name);
      if (record == nullptr) fail(ErrorKind::Internal, "{}: tensor '{}' vanished after validation", ckpt.path, p.name);
      if (usable_in_place(*record, p.compute_dtype, device)) {
        auto storage = device.adopt(const_cast<uint8_t*>(record->data), record->nbytes, record->file, p.name);
        weights.add(p.name, Tensor::view(std::move(storage), 0, p.compute_dtype, p.shape, p.name));
      } else {
        // [1, N] vectors are read as [N].
        const Tensor source = record->view().reshape(p.shape);
        weights.add(p.name, materialize_weight(source, device, p.compute_dtype, p.name));
        if (record->file != nullptr) record->file->release_pages(record->data, record->nbytes);
      }
      done += record->nbytes;
      if (progress) progress(done, total);
    }
  }
}

}  // namespace ferry
