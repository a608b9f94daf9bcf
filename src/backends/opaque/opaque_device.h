// A conformance device: it computes with the CPU kernels, but its memory is hidden from everything
// outside this room. The addresses it hands out are disguised (not host pointers: dereferencing one
// faults), Storage::data() refuses them, and data reach it or leave it only through write(), read()
// and the runtime's staging, which it counts. Every model that runs on it runs through the device
// interface alone, as it would on a GPU (`--devices opaque:0,cpu:0`).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "core/device.h"
#include "core/stream.h"
#include "core/thread_pool.h"

namespace ferry::opaque {

struct TransferCounts {
  uint64_t writes = 0;  // host -> device
  uint64_t reads = 0;   // device -> host
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
};

class OpaqueDevice final : public Device {
 public:
  OpaqueDevice(DeviceId id, size_t budget_bytes, int n_threads);
  ~OpaqueDevice() override;

  TransferCounts transfers() const;

  bool host_addressable() const override { return false; }
  DeviceMemory memory() const override;
  int threads() const override { return pool_.size(); }
  bool supports(Op op, std::span<const DType> input_dtypes) const override;
  bool repacks_weight(DType dtype, const Shape& shape) const override;
  Tensor repack_weight(const Tensor& weight) override;
  std::unique_ptr<Program> compile(std::span<const BoundOp> ops) override;
  void run(Program& program) override;
  void write(const Tensor& dst, const void* src) override;
  void read(const Tensor& src, void* dst) override;
  // Never direct: every transfer from another device goes through write() or host staging.
  bool copy_from(const Tensor& src, const Tensor& dst) override;
  void fill_zero(const Tensor& dst) override;
  std::shared_ptr<const Event> record() override { return stream_.record(); }
  void wait(std::shared_ptr<const Event> event) override { stream_.wait(std::move(event)); }
  void synchronize() override { stream_.synchronize(); }

 protected:
  void* allocate_memory(size_t bytes) override;
  void free_memory(void* address, size_t bytes) override;

 private:
  void* host_pointer(const Tensor& t) const;  // the real bytes behind a tensor of this device

  ThreadPool pool_;
  std::atomic<uint64_t> writes_{0}, reads_{0}, bytes_written_{0}, bytes_read_{0};
  Stream stream_;  // declared last: its thread stops before the rest goes
};

}  // namespace ferry::opaque
