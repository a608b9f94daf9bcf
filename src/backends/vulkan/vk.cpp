#include "backends/vulkan/vk.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace ferry::vulkan {

#define FERRY_VK_DEFINE(name) PFN_##name name = nullptr;
FERRY_VK_DEFINE(vkGetInstanceProcAddr)
FERRY_VK_GLOBAL_FUNCTIONS(FERRY_VK_DEFINE)
FERRY_VK_INSTANCE_FUNCTIONS(FERRY_VK_DEFINE)
#undef FERRY_VK_DEFINE

namespace {

template <typename Fn>
Fn function(VkInstance instance, const char* name) {
  return reinterpret_cast<Fn>(vkGetInstanceProcAddr(instance, name));
}

}  // namespace

void load_global_functions() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const char* configured = std::getenv("FERRY_VULKAN_LOADER");
    const std::string path = configured != nullptr && *configured != '\0' ? configured : "libvulkan.so.1";
    // Kept open for the life of the process: drivers and layers it loads stay mapped.
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = dlerror();
      error = "the Vulkan loader " + path + " cannot be opened (" + (why != nullptr ? why : "unknown error") +
              "): install it (Debian: apt-get install libvulkan1) and a driver (your GPU's, or Mesa's: "
              "mesa-vulkan-drivers), or run on cpu:N devices";
      return;
    }
    vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(library, "vkGetInstanceProcAddr"));
    if (vkGetInstanceProcAddr == nullptr) {
      error = path + " is not a Vulkan loader (it has no vkGetInstanceProcAddr)";
      return;
    }
#define FERRY_VK_LOAD(name) name = function<PFN_##name>(VK_NULL_HANDLE, #name);
    FERRY_VK_GLOBAL_FUNCTIONS(FERRY_VK_LOAD)
#undef FERRY_VK_LOAD
    if (vkCreateInstance == nullptr || vkEnumerateInstanceLayerProperties == nullptr) {
      error = path + " lacks vkCreateInstance: it is not a working Vulkan loader";
    }
  });
  if (!error.empty()) fail(ErrorKind::Unsupported, "{}", error);
}

void load_instance_functions(VkInstance instance) {
#define FERRY_VK_LOAD(name)                                                        \
  name = function<PFN_##name>(instance, #name);                                    \
  if (name == nullptr) {                                                           \
    fail(ErrorKind::Unsupported,                                                   \
         "the Vulkan loader has no {}: Vulkan 1.1 or later is needed (update the " \
         "loader, libvulkan1, and the driver)",                                    \
         #name);                                                                   \
  }
  FERRY_VK_INSTANCE_FUNCTIONS(FERRY_VK_LOAD)
#undef FERRY_VK_LOAD
}

}  // namespace ferry::vulkan
