#include "backends/vulkan/context.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace ferry::vulkan {

namespace {

std::atomic<uint64_t> g_validation_messages{0};

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    g_validation_messages.fetch_add(1);
    fmt::print(stderr, "vulkan validation: {}\n", data && data->pMessage ? data->pMessage : "(no message)");
  }
  return VK_FALSE;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (const auto& l : layers) {
    if (std::strcmp(l.layerName, name) == 0) return true;
  }
  return false;
}

bool has_device_extension(VkPhysicalDevice device, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(device, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(device, nullptr, &n, exts.data());
  for (const auto& e : exts) {
    if (std::strcmp(e.extensionName, name) == 0) return true;
  }
  return false;
}

const char* kind_of(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

// Device-local heap sizes, and budget minus usage where VK_EXT_memory_budget says it.
void read_memory(PhysicalDeviceInfo& info) {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
  budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
  VkPhysicalDeviceMemoryProperties2 props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
  if (info.has_memory_budget) props.pNext = &budget;
  vkGetPhysicalDeviceMemoryProperties2(info.handle, &props);
  info.total_memory = 0;
  info.free_memory = 0;
  for (uint32_t h = 0; h < props.memoryProperties.memoryHeapCount; ++h) {
    const VkMemoryHeap& heap = props.memoryProperties.memoryHeaps[h];
    if ((heap.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) == 0) continue;
    info.total_memory += heap.size;
    if (info.has_memory_budget) {
      const uint64_t b = std::min<uint64_t>(budget.heapBudget[h], heap.size);
      info.free_memory += b > budget.heapUsage[h] ? b - budget.heapUsage[h] : 0;
    } else {
      info.free_memory += heap.size;
    }
  }
}

PhysicalDeviceInfo describe(VkPhysicalDevice device) {
  PhysicalDeviceInfo info;
  info.handle = device;
  VkPhysicalDeviceSubgroupProperties subgroup{};
  subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceProperties2 props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props.pNext = &subgroup;
  vkGetPhysicalDeviceProperties2(device, &props);
  info.name = props.properties.deviceName;
  info.kind = kind_of(props.properties.deviceType);
  info.api_version = props.properties.apiVersion;
  info.limits = props.properties.limits;
  info.subgroup_size = subgroup.subgroupSize;

  VkPhysicalDeviceShaderFloat16Int8Features f16{};
  f16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
  VkPhysicalDevice16BitStorageFeatures storage16{};
  storage16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
  storage16.pNext = &f16;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &storage16;
  vkGetPhysicalDeviceFeatures2(device, &features);
  info.float16 = f16.shaderFloat16 == VK_TRUE;
  info.int8 = f16.shaderInt8 == VK_TRUE;
  info.storage_16bit = storage16.storageBuffer16BitAccess == VK_TRUE;
  info.integer_dot = has_device_extension(device, "VK_KHR_shader_integer_dot_product");
  info.cooperative_matrix = has_device_extension(device, "VK_KHR_cooperative_matrix") ||
                            has_device_extension(device, "VK_NV_cooperative_matrix");
  info.has_memory_budget = has_device_extension(device, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);

  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, families.data());
  // Prefer a compute family without graphics (a dedicated compute queue), else any with compute.
  for (int pass = 0; pass < 2 && info.compute_queue_family == UINT32_MAX; ++pass) {
    for (uint32_t f = 0; f < n; ++f) {
      const VkQueueFlags flags = families[f].queueFlags;
      if ((flags & VK_QUEUE_COMPUTE_BIT) == 0) continue;
      if (pass == 0 && (flags & VK_QUEUE_GRAPHICS_BIT) != 0) continue;
      info.compute_queue_family = f;
      info.compute_queue_count = families[f].queueCount;
      break;
    }
  }
  read_memory(info);
  return info;
}

}  // namespace

void check(VkResult result, std::string_view call) {
  if (result == VK_SUCCESS) return;
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY) {
    fail(ErrorKind::OutOfMemory,
         "{} ran out of memory (VkResult {}): give the Vulkan device a smaller budget or "
         "place fewer modules on it",
         call, static_cast<int>(result));
  }
  fail(ErrorKind::Internal, "{} failed with VkResult {}", call, static_cast<int>(result));
}

uint64_t validation_messages() {
  return g_validation_messages.load();
}

std::shared_ptr<Instance> Instance::get() {
  static std::mutex mutex;
  static std::weak_ptr<Instance> shared;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto alive = shared.lock()) return alive;
  std::shared_ptr<Instance> made(new Instance());
  shared = made;
  return made;
}

Instance::Instance() {
  load_global_functions();
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "ferry";
  app.pEngineName = "ferry";
  app.apiVersion = VK_API_VERSION_1_2;

  std::vector<const char*> layers;
  std::vector<const char*> extensions;
  const bool validate = env_flag("FERRY_VULKAN_VALIDATION");
  if (validate) {
    if (!has_layer("VK_LAYER_KHRONOS_validation")) {
      fail(ErrorKind::Unsupported,
           "FERRY_VULKAN_VALIDATION is set but the Khronos validation layer is not installed "
           "(Debian: apt-get install vulkan-validationlayers)");
    }
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
  }
  // Synchronization validation too: a missing barrier between steps that share memory is a hazard
  // it reports, where the API checks alone see nothing wrong.
  const VkValidationFeatureEnableEXT enabled_features[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{};
  features.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enabled_features;
  VkInstanceCreateInfo create{};
  create.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  create.pApplicationInfo = &app;
  if (validate) create.pNext = &features;
  create.enabledLayerCount = static_cast<uint32_t>(layers.size());
  create.ppEnabledLayerNames = layers.data();
  create.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  create.ppEnabledExtensionNames = extensions.data();
  const VkResult made = vkCreateInstance(&create, nullptr, &instance_);
  if (made == VK_ERROR_INCOMPATIBLE_DRIVER || made == VK_ERROR_INITIALIZATION_FAILED) {
    fail(ErrorKind::Unsupported,
         "Vulkan could not start (VkResult {}): no Vulkan driver is installed. Install your GPU's driver, or Mesa's "
         "(Debian: apt-get install mesa-vulkan-drivers), or run on cpu:N devices",
         static_cast<int>(made));
  }
  check(made, "vkCreateInstance");
  try {
    load_instance_functions(instance_);
  } catch (...) {
    if (vkDestroyInstance != nullptr) vkDestroyInstance(instance_, nullptr);
    throw;
  }

  if (validate) {
    VkDebugUtilsMessengerCreateInfoEXT info{};
    info.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
    info.messageSeverity =
        VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    info.pfnUserCallback = on_validation_message;
    auto create_messenger = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create_messenger != nullptr)
      check(create_messenger(instance_, &info, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
  }

  uint32_t n = 0;
  check(vkEnumeratePhysicalDevices(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> handles(n);
  check(vkEnumeratePhysicalDevices(instance_, &n, handles.data()), "vkEnumeratePhysicalDevices");
  for (VkPhysicalDevice h : handles) {
    PhysicalDeviceInfo info = describe(h);
    if (info.compute_queue_family == UINT32_MAX || info.api_version < VK_API_VERSION_1_1) continue;
    devices_.push_back(std::move(info));
  }
}

Instance::~Instance() {
  if (messenger_ != VK_NULL_HANDLE) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy != nullptr) destroy(instance_, messenger_, nullptr);
  }
  vkDestroyInstance(instance_, nullptr);
}

uint64_t Instance::free_memory(size_t index) const {
  PhysicalDeviceInfo info = devices_.at(index);
  read_memory(info);
  return info.free_memory;
}

}  // namespace ferry::vulkan
