// The process's Vulkan instance and what it knows of the machine's physical devices. Shared by
// every Vulkan device of the process; created on first use. With FERRY_VULKAN_VALIDATION=1 the
// Khronos validation layer is enabled and every message it reports is printed and counted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/vulkan/vk.h"

namespace ferry::vulkan {

// Throws Error(Internal) naming the call when a Vulkan call fails (Error(OutOfMemory) for the
// out-of-memory results).
void check(VkResult result, std::string_view call);

struct PhysicalDeviceInfo {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  std::string name;
  std::string kind;  // "discrete", "integrated", "virtual", "cpu" or "other"
  uint32_t api_version = 0;
  uint64_t total_memory = 0;  // the device-local heaps
  uint64_t free_memory = 0;   // VK_EXT_memory_budget's budget minus usage where present, else total
  bool has_memory_budget = false;
  uint32_t subgroup_size = 0;
  bool float16 = false;             // shaderFloat16
  bool int8 = false;                // shaderInt8
  bool storage_16bit = false;       // storageBuffer16BitAccess
  bool integer_dot = false;         // VK_KHR_shader_integer_dot_product
  bool cooperative_matrix = false;  // VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix
  uint32_t compute_queue_family = UINT32_MAX;
  uint32_t compute_queue_count = 0;
  VkPhysicalDeviceLimits limits{};
};

class Instance {
 public:
  // The shared instance; Error(Unsupported) saying what is missing when Vulkan cannot start.
  static std::shared_ptr<Instance> get();
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  // Physical devices with a compute queue, in the loader's order (vulkan:N is the N-th).
  const std::vector<PhysicalDeviceInfo>& devices() const { return devices_; }
  // Re-reads device N's free memory (it changes as other processes allocate).
  uint64_t free_memory(size_t index) const;
  bool validation() const { return messenger_ != VK_NULL_HANDLE; }

 private:
  Instance();
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::vector<PhysicalDeviceInfo> devices_;
};

// Messages the validation layer reported so far in this process (0 when it is not enabled).
uint64_t validation_messages();

}  // namespace ferry::vulkan
