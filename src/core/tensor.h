// Tensor: dtype, shape, byte strides, device and storage. Tensors never move themselves: there is
// no to(device). Copies between devices are made by the runtime's scheduler only.
//
// Layout convention (used everywhere in ferry):
//   shape is outermost-first, like PyTorch: a weight matrix of nn.Linear(in, out) is [out, in],
//   activations are [tokens, features]. The last dimension is contiguous. Quantized types are
//   blocked along the last dimension, which must be a multiple of the block size.
//   strides are in bytes; stride[last] is the element size (plain types) and unused for
//   quantized types, whose rows are always contiguous.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace ferry {

class Device;

inline constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  static Shape of(const int64_t* d, int rank);

  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  int64_t last() const { return rank == 0 ? 1 : dims[static_cast<size_t>(rank - 1)]; }
  int64_t rows() const { return rank == 0 ? 1 : numel() / last(); }  // product of all but the last dim
  std::string str() const;                                           // "[4, 64]"
  friend bool operator==(const Shape& a, const Shape& b);
};

// Memory a tensor views: host memory (owned, or a view of memory someone else owns such as a
// memory-mapped checkpoint), or a device's memory (Device::allocate, Device::adopt), which is
// host-addressable only when the device says so.
class Storage {
  struct Key {
    explicit Key() = default;
  };

 public:
  // Host memory not owned by any device (graph inputs, outputs returned to the caller).
  static std::shared_ptr<Storage> host(size_t bytes);
  // A view of host memory that someone else owns (e.g. a memory-mapped checkpoint).
  static std::shared_ptr<Storage> view(void* data, size_t bytes, std::shared_ptr<const void> keep_alive);

  // Public for the factories' std::make_shared (one allocation for the Storage and its control
  // block), but only they (and Device) can name Key.
  explicit Storage(Key) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // A host pointer to the bytes. Error(Internal) for device memory that is not host-addressable:
  // only its backend reads that, through address().
  void* data() const {
    if (!host_addressable_) fail_not_host_addressable();
    return address_;
  }
  // Where the bytes are in their device's address space (for host memory, the host pointer).
  // Meant for backends; nothing else may dereference it.
  void* address() const { return address_; }
  size_t size() const { return size_; }
  Device* device() const { return device_; }  // nullptr: host memory
  bool host_addressable() const { return host_addressable_; }

 private:
  friend class Device;
  enum class Owner : uint8_t { None, Heap, Device, Charged };
  [[noreturn]] void fail_not_host_addressable() const;

  void* address_ = nullptr;
  size_t size_ = 0;
  Device* device_ = nullptr;
  bool host_addressable_ = true;
  Owner owner_ = Owner::None;
  std::shared_ptr<const void> keep_alive_;
};

// How a tensor's bytes are ordered. Rows: the layout convention above (every tensor a backend has
// not repacked). Packed: a weight its device's backend reordered for its own kernels
// (Device::repack_weight): the same bytes in another order, which only those kernels read.
enum class Layout : uint8_t { Rows, Packed };

class Tensor {
 public:
  Tensor() = default;

  // Contiguous tensor allocated on `device` (counted against its budget).
  static Tensor empty(Device& device, DType dtype, const Shape& shape, const std::string& name = {});
  // Contiguous tensor in host memory.
  static Tensor host(DType dtype, const Shape& shape, const std::string& name = {});
  // Contiguous tensor over existing storage at a byte offset.
  static Tensor view(std::shared_ptr<Storage> storage, size_t offset, DType dtype, const Shape& shape,
                     const std::string& name = {});

  // A tensor's dtype, shape and name without memory yet (defined() is false): what a program is
  // compiled against where each run supplies the memory (graph inputs, outputs handed over).
  static Tensor unbound(DType dtype, const Shape& shape, const std::string& name = {});

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.rank + i : i]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t stride(int i) const { return strides_[static_cast<size_t>(i < 0 ? shape_.rank + i : i)]; }
  size_t nbytes() const;     // bytes of the elements (contiguous size)
  size_t row_bytes() const;  // bytes of one row of the last dimension
  bool is_contiguous() const;
  Device* device() const { return storage_ ? storage_->device() : nullptr; }  // nullptr: host
  std::string device_name() const;                                            // "cpu:1" or "host"
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // A host pointer (Error(Internal) when the tensor is in memory only its device's backend reads).
  void* data() const { return static_cast<char*>(storage_->data()) + offset_; }
  // The tensor's address in its device's address space: for backends only.
  void* address() const { return static_cast<char*>(storage_->address()) + offset_; }
  size_t offset() const { return offset_; }  // into its storage, in bytes
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }
  // Pointer to row r (r indexes the flattened leading dimensions).
  void* row(int64_t r) const { return static_cast<char*>(data()) + static_cast<size_t>(r) * row_bytes(); }

  // Same bytes, another shape with the same number of elements (contiguous tensors in Layout::Rows
  // only: Error(Internal) for a packed one).
  Tensor reshape(const Shape& shape) const;

  Layout layout() const { return layout_; }
  // This tensor marked as holding its bytes in `layout` (what a backend's repack_weight returns).
  Tensor with_layout(Layout layout) const {
    Tensor t = *this;
    t.layout_ = layout;
    return t;
  }

 private:
  DType dtype_ = DType::F32;
  Layout layout_ = Layout::Rows;
  Shape shape_;
  std::array<int64_t, kMaxDims> strides_{};
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  std::string name_;
};

}  // namespace ferry
