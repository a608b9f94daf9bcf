// The CPU backend's device: host memory charged against a budget, its own thread pool driven by its
// own stream thread, and the kernels of backends/cpu/kernels.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace ferry::cpu {

// Runs one graph node with the CPU kernels (what a CPU program does for each op).
void run_node(const Node& node, const std::vector<Tensor*>& inputs, Tensor& out, ThreadPool& pool);
bool supports_node(Op op, std::span<const DType> input_dtypes);

class CpuDevice final : public Device {
 public:
  // n_threads counts the stream's own thread: n_threads - 1 workers are started.
  CpuDevice(DeviceId id, size_t budget_bytes, int n_threads);
  ~CpuDevice() override;

  // The device's workers. Kernels called outside the stream (tests, loading) may use it only while
  // no queued work runs (after synchronize()).
  ThreadPool& pool() { return pool_; }

  bool host_addressable() const override { return true; }
  DeviceMemory memory() const override;
  int threads() const override { return pool_.size(); }
  bool supports(Op op, std::span<const DType> input_dtypes) const override;
  bool repacks_weight(DType dtype, const Shape& shape) const override;
  Tensor repack_weight(const Tensor& weight) override;
  std::unique_ptr<Program> compile(std::span<const BoundOp> ops) override;
  void run(Program& program) override;
  void write(const Tensor& dst, const void* src) override;
  void read(const Tensor& src, void* dst) override;
  bool copy_from(const Tensor& src, const Tensor& dst) override;
  void fill_zero(const Tensor& dst) override;
  std::shared_ptr<const Event> record() override { return stream_.record(); }
  void wait(std::shared_ptr<const Event> event) override { stream_.wait(std::move(event)); }
  void synchronize() override { stream_.synchronize(); }

 protected:
  void* allocate_memory(size_t bytes) override;
  void free_memory(void* address, size_t bytes) override;

 private:
  ThreadPool pool_;
  Stream stream_;  // declared last: its thread stops before the pool goes
};

// Physical memory of this machine (total and available), from /proc/meminfo; zeros if unreadable.
DeviceMemory host_memory();

}  // namespace ferry::cpu
