// concat, slice and copy: byte moves for any dtype. A tensor is viewed as [outer, axis, inner];
// quantized blocks stay whole because the last dim of every part is a multiple of the block size.
#include <cstring>

#include "backends/cpu/kernels/check.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry::kernels {

namespace {

int64_t product(const Shape& s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= s[i];
  return p;
}

// Bytes of `count` elements, `count` a multiple of the block size (the caller made sure).
size_t bytes_of(DType dtype, int64_t count, std::string_view kernel) {
  const auto bytes = dtype_bytes(dtype, static_cast<uint64_t>(count));
  if (!bytes) {
    fail(ErrorKind::Shape, "{}: {} elements of {} do not make whole blocks of {}", kernel, count, dtype_name(dtype),
         dtype_traits(dtype).block_size);
  }
  return *bytes;
}

constexpr size_t kCopyChunk = 1 << 20;  // bytes per task when copying large tensors

}  // namespace

void concat(const std::vector<const Tensor*>& parts, int axis, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "concat";
  check_defined(kName, out, "output");
  if (parts.empty()) fail(ErrorKind::Usage, "concat into '{}': no inputs", out.name());
  const int rank = out.rank();
  if (axis < 0 || axis >= rank) {
    fail(ErrorKind::Usage, "concat into '{}' {}: axis {} is outside [0, {})", out.name(), out.shape().str(), axis,
         rank);
  }
  int64_t total = 0;
  for (const Tensor* part : parts) {
    if (part == nullptr) fail(ErrorKind::Usage, "concat into '{}': a null input", out.name());
    check_dtype(kName, *part, "input", out.dtype());
    check_same_device(kName, {part, &out});
    bool fits = part->rank() == rank;
    for (int i = 0; fits && i < rank; ++i) fits = i == axis || part->dim(i) == out.dim(i);
    if (!fits) {
      fail(ErrorKind::Shape, "concat: input '{}' {} does not fit output '{}' {} along axis {}", part->name(),
           part->shape().str(), out.name(), out.shape().str(), axis);
    }
    total += part->dim(axis);
  }
  if (total != out.dim(axis)) {
    fail(ErrorKind::Shape, "concat: inputs sum to {} along axis {} but output '{}' {} has {}", total, axis, out.name(),
         out.shape().str(), out.dim(axis));
  }
  const int64_t outer = product(out.shape(), 0, axis);
  const int64_t inner = product(out.shape(), axis + 1, rank);
  const size_t out_chunk = bytes_of(out.dtype(), out.dim(axis) * inner, kName);
  auto* dst = static_cast<uint8_t*>(out.data());
  size_t column = 0;  // byte offset of the current part inside an output chunk
  for (const Tensor* part : parts) {
    const size_t chunk = bytes_of(out.dtype(), part->dim(axis) * inner, kName);
    const auto* src = static_cast<const uint8_t*>(part->data());
    pool.parallel_range(outer, static_cast<int64_t>(kCopyChunk / (chunk + 1)) + 1, [&](int64_t b, int64_t e, int) {
      for (int64_t o = b; o < e; ++o) std::memcpy(dst + o * out_chunk + column, src + o * chunk, chunk);
    });
    column += chunk;
  }
}

void slice(const Tensor& x, int axis, int64_t start, int64_t length, Tensor& out, ThreadPool& pool) {
  constexpr std::string_view kName = "slice";
  check_defined(kName, x, "input");
  check_dtype(kName, out, "output", x.dtype());
  check_same_device(kName, {&x, &out});
  const int rank = x.rank();
  if (axis < 0 || axis >= rank || start < 0 || length < 0 || start > x.dim(axis) - length) {
    fail(ErrorKind::Usage, "slice of '{}' {}: [{}, {}) along axis {} is out of range", x.name(), x.shape().str(), start,
         start + length, axis);
  }
  Shape want = x.shape();
  want[axis] = length;
  check_shape(kName, out, "output", want);
  const int64_t outer = product(x.shape(), 0, axis);
  const int64_t inner = product(x.shape(), axis + 1, rank);
  const size_t in_chunk = bytes_of(x.dtype(), x.dim(axis) * inner, kName);
  const size_t offset = bytes_of(x.dtype(), start * inner, kName);
  const size_t chunk = bytes_of(x.dtype(), length * inner, kName);
  const auto* src = static_cast<const uint8_t*>(x.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  pool.parallel_range(outer, static_cast<int64_t>(kCopyChunk / (chunk + 1)) + 1, [&](int64_t b, int64_t e, int) {
    for (int64_t o = b; o < e; ++o) std::memcpy(dst + o * chunk, src + o * in_chunk + offset, chunk);
  });
}

void copy(const Tensor& src, Tensor& dst, ThreadPool& pool) {
  constexpr std::string_view kName = "copy";
  check_defined(kName, src, "source");
  check_dtype(kName, dst, "destination", src.dtype());
  check_shape(kName, dst, "destination", src.shape());
  const size_t bytes = src.nbytes();
  const auto* from = static_cast<const uint8_t*>(src.data());
  auto* to = static_cast<uint8_t*>(dst.data());
  if (from == to) return;
  const auto chunks = static_cast<int64_t>((bytes + kCopyChunk - 1) / kCopyChunk);
  pool.parallel_for(chunks, [&](int64_t c, int) {
    const size_t begin = static_cast<size_t>(c) * kCopyChunk;
    std::memcpy(to + begin, from + begin, std::min(kCopyChunk, bytes - begin));
  });
}

}  // namespace ferry::kernels
