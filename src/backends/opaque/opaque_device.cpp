#include "backends/opaque/opaque_device.h"

#include <cstring>
#include <new>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace ferry::opaque {

namespace {

// Flipping the top bit makes an x86-64 (or AArch64) pointer non-canonical: any load through a
// disguised address faults at once instead of reading the right bytes by accident.
constexpr uintptr_t kDisguise = uintptr_t{1} << 63;

void* flip(void* address) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(address) ^ kDisguise);
}

class OpaqueProgram final : public Program {
 public:
  std::vector<BoundOp> ops;
};

}  // namespace

OpaqueDevice::OpaqueDevice(DeviceId id, size_t budget_bytes, int n_threads)
    : Device(id, budget_bytes), pool_(n_threads), stream_(id.str()) {}

OpaqueDevice::~OpaqueDevice() = default;

TransferCounts OpaqueDevice::transfers() const {
  return TransferCounts{writes_.load(), reads_.load(), bytes_written_.load(), bytes_read_.load()};
}

DeviceMemory OpaqueDevice::memory() const {
  return cpu::host_memory();
}

bool OpaqueDevice::supports(Op op, std::span<const DType> input_dtypes) const {
  return cpu::supports_node(op, input_dtypes);
}

// Weights repacked as the CPU backend repacks them: the same kernels, the same arithmetic.
bool OpaqueDevice::repacks_weight(DType dtype, const Shape& shape) const {
  return kernels::repacks_weight(dtype, shape);
}

Tensor OpaqueDevice::repack_weight(const Tensor& weight) {
  if (weight.layout() != Layout::Rows) fail(ErrorKind::Internal, "{}: '{}' is repacked already", name(), weight.name());
  const Tensor hidden = Tensor::view(Storage::view(host_pointer(weight), weight.nbytes(), nullptr), 0, weight.dtype(),
                                     weight.shape(), weight.name());
  // On the stream, after the writes of the weight's bytes, the pool's one caller.
  stream_.submit([this, &hidden] { kernels::repack_weight(hidden, pool_); });
  synchronize();
  return weight.with_layout(Layout::Packed);
}

void* OpaqueDevice::host_pointer(const Tensor& t) const {
  const Storage* s = t.storage().get();
  if (s == nullptr || s->device() != this) {
    fail(ErrorKind::DeviceMismatch, "{} was handed '{}' on {}: a tensor of another device", name(), t.name(),
         t.device_name());
  }
  return static_cast<char*>(flip(s->address())) + t.offset();
}

std::unique_ptr<Program> OpaqueDevice::compile(std::span<const BoundOp> ops) {
  auto program = std::make_unique<OpaqueProgram>();
  program->ops.assign(ops.begin(), ops.end());
  return program;
}

void OpaqueDevice::run(Program& program) {
  auto* p = static_cast<OpaqueProgram*>(&program);
  stream_.submit([this, p] {
    // Host views of the hidden bytes, made for this run only: the bound tensors are read now,
    // so an input the caller replaced since the last run is seen as it is.
    const auto view = [&](const Tensor& t) {
      return Tensor::view(Storage::view(host_pointer(t), t.nbytes(), nullptr), 0, t.dtype(), t.shape(), t.name())
          .with_layout(t.layout());
    };
    for (const BoundOp& op : p->ops) {
      std::vector<Tensor> inputs;
      inputs.reserve(op.inputs.size());
      for (const Tensor* t : op.inputs) inputs.push_back(view(*t));
      std::vector<Tensor*> args;
      for (Tensor& t : inputs) args.push_back(&t);
      Tensor out = view(*op.output);
      cpu::run_node(*op.node, args, out, pool_);
    }
  });
}

void OpaqueDevice::write(const Tensor& dst, const void* src) {
  void* to = host_pointer(dst);
  const size_t n = dst.nbytes();
  writes_.fetch_add(1);
  bytes_written_.fetch_add(n);
  stream_.submit([to, src, n] { std::memcpy(to, src, n); });
}

void OpaqueDevice::read(const Tensor& src, void* dst) {
  const void* from = host_pointer(src);
  const size_t n = src.nbytes();
  reads_.fetch_add(1);
  bytes_read_.fetch_add(n);
  stream_.submit([from, dst, n] { std::memcpy(dst, from, n); });
}

bool OpaqueDevice::copy_from(const Tensor&, const Tensor&) {
  return false;
}

void OpaqueDevice::fill_zero(const Tensor& dst) {
  void* to = host_pointer(dst);
  const size_t n = dst.nbytes();
  stream_.submit([to, n] { std::memset(to, 0, n); });
}

void* OpaqueDevice::allocate_memory(size_t bytes) {
  void* p = ::operator new(bytes, std::align_val_t(Allocator::kAlignment), std::nothrow);
  return p == nullptr ? nullptr : flip(p);
}

void OpaqueDevice::free_memory(void* address, size_t) {
  ::operator delete(flip(address), std::align_val_t(Allocator::kAlignment));
}

}  // namespace ferry::opaque
