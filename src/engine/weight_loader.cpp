#include "engine/weight_loader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>

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

// The part of `record` a transformed parameter reads, as a host tensor in the parameter's shape:
// a range of rows (elements, for a vector) viewed in place, transposed into a new buffer.
Tensor transformed_source(const TensorRecord& record, const ParamSpec& p) {
  const Tensor whole = record.view();
  const int64_t cols = whole.rank() == 1 ? 1 : whole.shape().last();
  const int64_t rows = whole.shape().numel() / cols;
  const WeightTransform& t = p.transform;
  const int64_t count = t.rows < 0 ? rows - t.first_row : t.rows;
  if (t.first_row < 0 || count <= 0 || t.first_row + count > rows) {
    fail(ErrorKind::Internal, "rows {}..{} of '{}' are outside its {} rows", t.first_row, t.first_row + count,
         record.name, rows);
  }
  Tensor part = row_range(whole.reshape(Shape{rows, cols}), t.first_row, count);
  if (!t.transpose) return part.reshape(p.shape);
  const size_t element = dtype_traits(record.dtype).block_bytes;
  Tensor out = Tensor::host(record.dtype, Shape{cols, count}, p.name);
  const auto* src = static_cast<const uint8_t*>(part.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(dst + (c * count + r) * element, src + (r * cols + c) * element, element);
    }
  }
  return out.reshape(p.shape);
}

// Whether the graph multiplies by this parameter, rather than only looking rows up in it: true
// for every matrix but a token embedding table that no other module reads (an untied one), which
// a device's repacked layout would not speed up and which stays mapped in place, and those read
// as activations (which other ops than matmul and embedding could not read repacked).
bool multiplied_by(const ModelSpec& spec, const ParamSpec& p) {
  if (p.read_as_activation) return false;
  if (p.role != LogicalTensor::TokenEmbedding) return true;
  for (const auto& module : spec.modules) {
    for (const auto& other : module.params) {
      if (&other != &p && other.name == p.name) return true;
    }
  }
  return false;
}

}  // namespace

Tensor materialize_weight(const Tensor& source, Device& device, DType dtype, const std::string& name,
                          ThreadPool* pool) {
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
  // Converted on the host, a slab of rows at a time, each slab written to the device.
  std::optional<ThreadPool> own_pool;
  if (pool == nullptr) pool = &own_pool.emplace(1);
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
      kernels::from_f32(from, into, *pool);
    } else if (dtype == DType::F32) {
      kernels::to_f32(from, into, *pool);
    } else {
      Tensor stage = row_range(widened, 0, n);
      kernels::to_f32(from, stage, *pool);
      kernels::from_f32(stage, into, *pool);
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
  // Quantizing while loading (--dtype) is the one heavy conversion: every core takes part.
  ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  for (const auto& module : ckpt.spec.modules) {
    Device& device = placement.device_of(module.name);
    for (const auto& p : module.params) {
      if (weights.find(p.name) != nullptr) continue;  // tied: already loaded by an earlier module
      const TensorRecord* record = ckpt.tensors.find(p.checkpoint_name());
      if (record == nullptr) {
        fail(ErrorKind::Internal, "{}: tensor '{}' vanished after validation", ckpt.path, p.checkpoint_name());
      }
      // A weight the device keeps in a layout of its own is copied, then repacked there.
      const bool repack = multiplied_by(ckpt.spec, p) && device.repacks_weight(p.compute_dtype, p.shape);
      auto stored = [&](Tensor t) { return repack ? device.repack_weight(t) : t; };
      if (p.transform.any()) {
        // Split or transposed once here, so no step copies it (its pages stay mapped for the
        // other parts of the same tensor).
        weights.add(p.name,
                    stored(materialize_weight(transformed_source(*record, p), device, p.compute_dtype, p.name, &pool)));
        done += dtype_bytes(record->dtype, static_cast<uint64_t>(p.shape.numel())).value_or(0);
        if (progress) progress(std::min(done, total), total);
        continue;
      }
      if (!repack && usable_in_place(*record, p.compute_dtype, device)) {
        auto storage = device.adopt(const_cast<uint8_t*>(record->data), record->nbytes, record->file, p.name);
        weights.add(p.name, Tensor::view(std::move(storage), 0, p.compute_dtype, p.shape, p.name));
      } else {
        // [1, N] vectors are read as [N].
        const Tensor source = record->view().reshape(p.shape);
        weights.add(p.name, stored(materialize_weight(source, device, p.compute_dtype, p.name, &pool)));
        if (record->file != nullptr) record->file->release_pages(record->data, record->nbytes);
      }
      done += record->nbytes;
      if (progress) progress(done, total);
    }
  }
}

}  // namespace ferry
