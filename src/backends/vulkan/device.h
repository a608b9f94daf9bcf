// A Vulkan device: one physical GPU (vulkan:N), or a logical partition of one (vulkan:N.K) with
// its own VkDevice, queue, budget and allocations. Memory is device-local buffers, mapped for
// direct host access where the memory type allows it (integrated GPUs, resizable BAR, lavapipe),
// else reached through a staging buffer. Work runs on the device's stream thread, which records
// and submits command buffers and waits for them, so the host thread goes on at once.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backends/vulkan/context.h"
#include "core/device.h"
#include "core/device_description.h"
#include "core/stream.h"

namespace ferry::vulkan {

// What allocate_memory hands out as a Storage's address: the backend's handle, never a host pointer.
struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t size = 0;
  void* mapped = nullptr;        // host view of the memory when the memory type is host-visible and mapping is on
  uint64_t allocation_size = 0;  // what the driver allocated for it (its memory requirements)
  bool budgeted = false;         // device memory charged against the budget (allocated_bytes counts it)
};

struct DeviceOptions {
  // Map host-visible device memory for direct reads and writes. Off: every transfer goes through
  // the staging buffer, as on a discrete GPU without resizable BAR (tests use it on lavapipe).
  bool map_memory = true;
};

class VulkanDevice final : public Device {
 public:
  // Error(Unsupported) naming what is missing when there is no such Vulkan device.
  VulkanDevice(DeviceId id, size_t budget_bytes, DeviceOptions options = {});
  ~VulkanDevice() override;

  const PhysicalDeviceInfo& info() const { return *info_; }
  // Bytes per second a shader streams from this device's memory (a sum over `bytes`, at most the
  // largest binding and half the budget), the best of a few passes: decode's ceiling.
  double measure_read_bandwidth(size_t bytes = size_t{256} << 20);
  // The budget a device gets when none is given: free memory less a reserve for the driver.
  static size_t default_budget(const PhysicalDeviceInfo& info, uint64_t free_memory);

  bool host_addressable() const override { return false; }
  DeviceMemory memory() const override;
  int threads() const override { return 1; }
  uint64_t allocated_bytes() const override { return allocated_bytes_.load(); }
  bool supports(Op op, std::span<const DType> input_dtypes) const override;
  std::unique_ptr<Program> compile(std::span<const BoundOp> ops) override;
  void run(Program& program) override;
  void write(const Tensor& dst, const void* src) override;
  void read(const Tensor& src, void* dst) override;
  bool copy_from(const Tensor& src, const Tensor& dst) override;
  void fill_zero(const Tensor& dst) override;
  std::shared_ptr<const Event> record() override { return stream_.record(); }
  void wait(std::shared_ptr<const Event> event) override { stream_.wait(std::move(event)); }
  void synchronize() override { stream_.synchronize(); }

  // For programs (backends/vulkan only), on the stream thread.
  VkDevice handle() const { return device_; }
  VkPipeline pipeline(std::string_view shader);
  VkPipelineLayout pipeline_layout() const { return pipeline_layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  Buffer* dummy() const { return dummy_; }
  // A host-visible buffer outside the budget (a program's constants); freed with release().
  Buffer* create_host_buffer(uint64_t bytes);
  void release(Buffer* buffer);
  // Submits and waits (stream thread only).
  void submit(VkCommandBuffer commands);
  VkCommandPool command_pool() const { return command_pool_; }
  void destroy_later(std::function<void()> cleanup);  // queued behind the work in flight

 protected:
  void* allocate_memory(size_t bytes) override;
  void free_memory(void* address, size_t bytes) override;

 private:
  Buffer* create_buffer(uint64_t bytes, uint32_t memory_type, bool map);
  // Records fn into the device's transfer command buffer, submits it and waits (stream thread).
  void run_transfer(const std::function<void(VkCommandBuffer)>& fn);

  std::shared_ptr<Instance> instance_;
  const PhysicalDeviceInfo* info_ = nullptr;
  size_t physical_index_ = 0;
  DeviceOptions options_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer transfer_commands_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  uint32_t device_memory_type_ = 0;
  bool device_memory_mapped_ = false;
  uint32_t host_memory_type_ = 0;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout_ = VK_NULL_HANDLE;
  std::map<std::string, std::pair<VkShaderModule, VkPipeline>, std::less<>> pipelines_;
  Buffer* dummy_ = nullptr;
  Buffer* staging_ = nullptr;
  std::atomic<uint64_t> allocated_bytes_{0};  // the driver's sizes of the budgeted buffers
  Stream stream_;                             // declared last: its thread stops before the rest goes
};

// A device for spec (the registry's factory): without a budget, default_budget of its free memory.
std::unique_ptr<Device> make_device(const DeviceSpec& spec);

// Every Vulkan device of this machine with its memory, default budget and features (Error
// (Unsupported) when Vulkan cannot start).
std::vector<DeviceDescription> describe_devices();

// Gives unbudgeted vulkan:N and vulkan:N.K specs the device's default budget (free memory less the
// reserve), shared equally by its unbudgeted partitions after the budgeted ones take theirs.
// Error(Unsupported) when the device is not on this machine.
void resolve_default_budgets(std::vector<DeviceSpec>& specs);

}  // namespace ferry::vulkan
