#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/device.h"
#include "core/error.h"

namespace ferry {

Shape::Shape(std::initializer_list<int64_t> d) {
  if (d.size() > kMaxDims) fail(ErrorKind::Internal, "shape of rank {} exceeds {}", d.size(), kMaxDims);
  for (int64_t v : d) dims[static_cast<size_t>(rank++)] = v;
}

Shape Shape::of(const int64_t* d, int r) {
  if (r > kMaxDims || r < 0) fail(ErrorKind::Shape, "shape of rank {} exceeds {}", r, kMaxDims);
  Shape s;
  for (int i = 0; i < r; ++i) s.dims[static_cast<size_t>(i)] = d[i];
  s.rank = r;
  return s;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<size_t>(i)]);
  }
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

std::shared_ptr<Storage> Storage::host(size_t bytes) {
  auto s = std::make_shared<Storage>(Key{});
  const size_t rounded = (bytes + 63) / 64 * 64 + 64;
  s->address_ = ::operator new(rounded, std::align_val_t(64));
  s->size_ = bytes;
  s->owner_ = Owner::Heap;
  return s;
}

std::shared_ptr<Storage> Storage::view(void* data, size_t bytes, std::shared_ptr<const void> keep_alive) {
  auto s = std::make_shared<Storage>(Key{});
  s->address_ = data;
  s->size_ = bytes;
  s->keep_alive_ = std::move(keep_alive);
  return s;
}

Storage::~Storage() {
  switch (owner_) {
    case Owner::Heap:
      ::operator delete(address_, std::align_val_t(64));
      break;
    case Owner::Device:
      device_->free_memory(address_, Allocator::rounded(size_));
      device_->allocator().refund(size_);
      break;
    case Owner::Charged:
      device_->allocator().refund(size_);
      break;
    case Owner::None:
      break;
  }
}

void Storage::fail_not_host_addressable() const {
  fail(ErrorKind::Internal,
       "a tensor in the memory of {} was read from the host, but that memory is not host-addressable: only its "
       "backend may read it (a bug in ferry: data moves through Device::read/write/copy_from)",
       device_ != nullptr ? device_->name() : std::string("a device"));
}

namespace {
void contiguous_strides(DType dtype, const Shape& shape, std::array<int64_t, kMaxDims>& strides) {
  const DTypeTraits& t = dtype_traits(dtype);
  if (shape.rank == 0) return;
  const int last = shape.rank - 1;
  strides[static_cast<size_t>(last)] = t.is_quantized ? 0 : static_cast<int64_t>(t.block_bytes);
  const auto row = dtype_bytes(dtype, static_cast<uint64_t>(shape[last]));
  int64_t stride = row ? static_cast<int64_t>(*row) : 0;
  for (int i = last - 1; i >= 0; --i) {
    strides[static_cast<size_t>(i)] = stride;
    stride *= shape[i];
  }
}

size_t checked_bytes(DType dtype, const Shape& shape) {
  // Element counts are multiplied with an overflow check: a lying size must not wrap into a
  // small allocation that kernels then write past.
  uint64_t count = 1;
  for (int i = 0; i < shape.rank; ++i) {
    if (shape[i] < 0) fail(ErrorKind::Shape, "negative dimension in shape {}", shape.str());
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(shape[i]), &count) || count > (uint64_t{1} << 62)) {
      fail(ErrorKind::Shape, "shape {} has too many elements", shape.str());
    }
  }
  const auto bytes = dtype_bytes(dtype, static_cast<uint64_t>(shape.numel()));
  const auto row = dtype_bytes(dtype, static_cast<uint64_t>(shape.last()));
  if (!bytes || !row) {
    fail(ErrorKind::Shape, "shape {} does not fit dtype {}: the last dimension must be a multiple of {}", shape.str(),
         dtype_name(dtype), dtype_traits(dtype).block_size);
  }
  return *bytes;
}
}  // namespace

Tensor Tensor::empty(Device& device, DType dtype, const Shape& shape, const std::string& name) {
  const size_t bytes = checked_bytes(dtype, shape);
  return view(device.allocate(bytes, name.empty() ? std::string("a tensor") : name), 0, dtype, shape, name);
}

Tensor Tensor::host(DType dtype, const Shape& shape, const std::string& name) {
  const size_t bytes = checked_bytes(dtype, shape);
  return view(Storage::host(bytes), 0, dtype, shape, name);
}

Tensor Tensor::unbound(DType dtype, const Shape& shape, const std::string& name) {
  checked_bytes(dtype, shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  contiguous_strides(dtype, shape, t.strides_);
  t.name_ = name;
  return t;
}

Tensor Tensor::view(std::shared_ptr<Storage> storage, size_t offset, DType dtype, const Shape& shape,
                    const std::string& name) {
  const size_t bytes = checked_bytes(dtype, shape);
  if (offset > storage->size() || bytes > storage->size() - offset) {
    fail(ErrorKind::Internal, "tensor '{}' of {} bytes at offset {} exceeds its storage of {} bytes", name, bytes,
         offset, storage->size());
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  contiguous_strides(dtype, shape, t.strides_);
  t.storage_ = std::move(storage);
  t.offset_ = offset;
  t.name_ = name;
  return t;
}

size_t Tensor::nbytes() const {
  return *dtype_bytes(dtype_, static_cast<uint64_t>(numel()));
}

size_t Tensor::row_bytes() const {
  return *dtype_bytes(dtype_, static_cast<uint64_t>(shape_.last()));
}

bool Tensor::is_contiguous() const {
  std::array<int64_t, kMaxDims> expect{};
  contiguous_strides(dtype_, shape_, expect);
  for (int i = 0; i < shape_.rank; ++i) {
    if (strides_[static_cast<size_t>(i)] != expect[static_cast<size_t>(i)]) return false;
  }
  return true;
}

std::string Tensor::device_name() const {
  Device* d = device();
  return d ? d->name() : std::string("host");
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape.numel() != numel()) {
    fail(ErrorKind::Shape, "cannot reshape '{}' from {} to {}: element counts differ", name_, shape_.str(),
         shape.str());
  }
  if (!is_contiguous()) fail(ErrorKind::Internal, "reshape of non-contiguous tensor '{}'", name_);
  if (layout_ != Layout::Rows) {
    fail(ErrorKind::Internal, "cannot reshape '{}': its device's backend repacked its rows for its own kernels", name_);
  }
  return view(storage_, offset_, dtype_, shape, name_);
}

}  // namespace ferry
