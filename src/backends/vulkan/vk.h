// Vulkan's functions, loaded at run time from the system's Vulkan loader (libvulkan.so.1) instead
// of linked: a ferry built with the backend starts on a machine without Vulkan, runs on its CPU
// devices, and asking for a GPU there says what to install. Every file of the backend includes
// this header instead of <vulkan/vulkan.h>; the functions are pointers in ferry::vulkan, named as
// Vulkan names them, so calls read as usual and no symbol of ours can stand in for a driver's.
#pragma once

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

// Loader-level functions: callable before any instance exists.
#define FERRY_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)                \
  X(vkEnumerateInstanceLayerProperties)

// Everything else, read through vkGetInstanceProcAddr once the instance exists.
#define FERRY_VK_INSTANCE_FUNCTIONS(X)        \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties2)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkCreateDevice)                           \
  X(vkDestroyDevice)                          \
  X(vkGetDeviceQueue)                         \
  X(vkDeviceWaitIdle)                         \
  X(vkQueueSubmit)                            \
  X(vkCreateFence)                            \
  X(vkDestroyFence)                           \
  X(vkResetFences)                            \
  X(vkWaitForFences)                          \
  X(vkCreateBuffer)                           \
  X(vkDestroyBuffer)                          \
  X(vkGetBufferMemoryRequirements)            \
  X(vkAllocateMemory)                         \
  X(vkFreeMemory)                             \
  X(vkBindBufferMemory)                       \
  X(vkMapMemory)                              \
  X(vkUnmapMemory)                            \
  X(vkCreateCommandPool)                      \
  X(vkDestroyCommandPool)                     \
  X(vkAllocateCommandBuffers)                 \
  X(vkFreeCommandBuffers)                     \
  X(vkResetCommandBuffer)                     \
  X(vkBeginCommandBuffer)                     \
  X(vkEndCommandBuffer)                       \
  X(vkCmdBindPipeline)                        \
  X(vkCmdBindDescriptorSets)                  \
  X(vkCmdPushConstants)                       \
  X(vkCmdDispatch)                            \
  X(vkCmdCopyBuffer)                          \
  X(vkCmdFillBuffer)                          \
  X(vkCmdPipelineBarrier)                     \
  X(vkCreateDescriptorSetLayout)              \
  X(vkDestroyDescriptorSetLayout)             \
  X(vkCreateDescriptorPool)                   \
  X(vkDestroyDescriptorPool)                  \
  X(vkAllocateDescriptorSets)                 \
  X(vkUpdateDescriptorSets)                   \
  X(vkCreatePipelineLayout)                   \
  X(vkDestroyPipelineLayout)                  \
  X(vkCreateShaderModule)                     \
  X(vkDestroyShaderModule)                    \
  X(vkCreateComputePipelines)                 \
  X(vkDestroyPipeline)

namespace ferry::vulkan {

#define FERRY_VK_DECLARE(name) extern PFN_##name name;
FERRY_VK_DECLARE(vkGetInstanceProcAddr)
FERRY_VK_GLOBAL_FUNCTIONS(FERRY_VK_DECLARE)
FERRY_VK_INSTANCE_FUNCTIONS(FERRY_VK_DECLARE)
#undef FERRY_VK_DECLARE

// Opens the loader (FERRY_VULKAN_LOADER names another file; default libvulkan.so.1) and reads the
// global functions, once per process. Error(Unsupported) saying what to install when it is missing.
void load_global_functions();
// Reads every other function through the instance (the loader's dispatch serves every device).
// Error(Unsupported) naming a function the loader lacks.
void load_instance_functions(VkInstance instance);

}  // namespace ferry::vulkan
