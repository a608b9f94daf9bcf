#include "backends/cpu/cpu_device.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"
#include "graph/graph.h"

namespace ferry::cpu {

namespace {

// Attention's optional sixth input is the KV write position (i32 [1]): a per-step value kept out
// of the node's parameters so that a compiled program runs step after step unchanged.
constexpr size_t kAttentionWithPosition = 6;

class CpuProgram final : public Program {
 public:
  struct Step {
    const Node* node = nullptr;
    std::vector<Tensor*> inputs;  // the plan's tensors, read when the step runs
    Tensor* output = nullptr;
  };
  std::vector<Step> steps;
};

// Large transfers (weights at load) are split over the pool; small ones are one memcpy.
void parallel_memcpy(void* dst, const void* src, size_t bytes, ThreadPool& pool) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  if (bytes <= static_cast<size_t>(kChunk) || pool.size() == 1) {
    std::memmove(dst, src, bytes);
    return;
  }
  pool.parallel_range(static_cast<int64_t>(bytes), kChunk, [&](int64_t begin, int64_t end, int) {
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                static_cast<size_t>(end - begin));
  });
}

}  // namespace

void run_node(const Node& node, const std::vector<Tensor*>& inputs, Tensor& out, ThreadPool& pool) {
  if (node.op == Op::Attention && inputs.size() == kAttentionWithPosition) {
    const Tensor& position = *inputs.back();
    if (position.dtype() != DType::I32 || position.numel() != 1) {
      fail(ErrorKind::Shape, "attention '{}': the KV write position must be i32 [1], got {} {}", position.name(),
           dtype_name(position.dtype()), position.shape().str());
    }
    AttentionParams p = std::get<AttentionParams>(node.params);
    p.kv_offset = *position.data_as<const int32_t>();
    const std::vector<Tensor*> operands(inputs.begin(), inputs.end() - 1);
    kernels::compute(node.op, p, operands, out, pool);
    return;
  }
  kernels::compute(node.op, node.params, inputs, out, pool);
}

bool supports_node(Op op, std::span<const DType> d) {
  return kernels::supports(op, std::vector<DType>(d.begin(), d.end()));
}

DeviceMemory host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  DeviceMemory m;
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemTotal:") m.total = kib * 1024;
    if (key == "MemAvailable:") m.free = kib * 1024;
  }
  return m;
}

CpuDevice::CpuDevice(DeviceId id, size_t budget_bytes, int n_threads)
    : Device(id, budget_bytes), pool_(n_threads), stream_(id.str()) {}

CpuDevice::~CpuDevice() = default;

DeviceMemory CpuDevice::memory() const {
  return host_memory();
}

bool CpuDevice::supports(Op op, std::span<const DType> input_dtypes) const {
  return supports_node(op, input_dtypes);
}

bool CpuDevice::repacks_weight(DType dtype, const Shape& shape) const {
  return kernels::repacks_weight(dtype, shape);
}

Tensor CpuDevice::repack_weight(const Tensor& weight) {
  // On the stream, after the writes of the weight's bytes, the pool's one caller.
  Tensor packed;
  stream_.submit([this, &weight, &packed] { packed = kernels::repack_weight(weight, pool_); });
  synchronize();
  return packed;
}

std::unique_ptr<Program> CpuDevice::compile(std::span<const BoundOp> ops) {
  auto program = std::make_unique<CpuProgram>();
  for (const BoundOp& op : ops) {
    CpuProgram::Step step;
    step.node = op.node;
    for (const Tensor* t : op.inputs) step.inputs.push_back(const_cast<Tensor*>(t));
    step.output = const_cast<Tensor*>(op.output);
    program->steps.push_back(std::move(step));
  }
  return program;
}

void CpuDevice::run(Program& program) {
  auto* p = static_cast<CpuProgram*>(&program);
  stream_.submit([this, p] {
    for (const CpuProgram::Step& s : p->steps) run_node(*s.node, s.inputs, *s.output, pool_);
  });
}

void CpuDevice::write(const Tensor& dst, const void* src) {
  void* to = dst.data();
  const size_t n = dst.nbytes();
  stream_.submit([this, to, src, n] { parallel_memcpy(to, src, n, pool_); });
}

void CpuDevice::read(const Tensor& src, void* dst) {
  const void* from = src.data();
  const size_t n = src.nbytes();
  stream_.submit([this, from, dst, n] { parallel_memcpy(dst, from, n, pool_); });
}

bool CpuDevice::copy_from(const Tensor& src, const Tensor& dst) {
  if (src.storage() == nullptr || !src.storage()->host_addressable()) return false;
  write(dst, src.data());
  return true;
}

void CpuDevice::fill_zero(const Tensor& dst) {
  void* to = dst.data();
  const size_t n = dst.nbytes();
  stream_.submit([to, n] { std::memset(to, 0, n); });
}

void* CpuDevice::allocate_memory(size_t bytes) {
  return ::operator new(bytes, std::align_val_t(Allocator::kAlignment), std::nothrow);
}

void CpuDevice::free_memory(void* address, size_t) {
  ::operator delete(address, std::align_val_t(Allocator::kAlignment));
}

}  // namespace ferry::cpu
