// Whether this machine can run the Vulkan suites. Without a Vulkan device, or in a build without
// the Vulkan backend (FERRY_HAVE_VULKAN=0: only the files that need no backend header build), they
// skip, saying why; with FERRY_REQUIRE_VULKAN=1 (CI, and builds configured with
// -DFERRY_REQUIRE_VULKAN=ON) that fails instead. Every test also fails on any message of the validation layer
// (FERRY_VULKAN_VALIDATION=1, the suite's second CTest run).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#if FERRY_HAVE_VULKAN
#include "backends/vulkan/context.h"
#endif

namespace ferry::testing {

inline bool vulkan_required() {
  const char* v = std::getenv("FERRY_REQUIRE_VULKAN");
  return v != nullptr && std::string(v) == "1";
}

// Whether this build lacks the Vulkan backend altogether.
constexpr bool missing_backend() {
  return !FERRY_HAVE_VULKAN;
}

// Empty when this machine has a Vulkan device; else why not.
inline std::string missing_vulkan() {
#if FERRY_HAVE_VULKAN
  try {
    if (vulkan::Instance::get()->devices().empty()) return "the Vulkan loader finds no device with compute";
    return "";
  } catch (const Error& e) {
    return e.what();
  }
#else
  return "this build has no Vulkan backend (CMake found no Vulkan headers or glslc; scripts/install-deps.sh installs "
         "them)";
#endif
}

// Messages the validation layer reported so far in this process.
inline uint64_t validation_messages() {
#if FERRY_HAVE_VULKAN
  return vulkan::validation_messages();
#else
  return 0;
#endif
}

// A fixture base: skips (or fails, when required) without a device, and fails on any message of
// the validation layer. A derived SetUp calls this one first and returns when no_device().
template <typename Base>
class VulkanTest : public Base {
 protected:
  void SetUp() override {
    messages_before_ = validation_messages();
    const std::string why = missing_vulkan();
    if (why.empty()) return;
    no_device_ = true;
    if (vulkan_required()) FAIL() << "FERRY_REQUIRE_VULKAN=1 but " << why;
    GTEST_SKIP() << "no Vulkan device: " << why;
  }
  void TearDown() override {
    EXPECT_EQ(validation_messages(), messages_before_) << "the Vulkan validation layer reported messages (above)";
  }
  bool no_device() const { return no_device_; }
  // For a test that provokes the layer on purpose: the messages so far are expected.
  void accept_validation_messages() { messages_before_ = validation_messages(); }

 private:
  uint64_t messages_before_ = 0;
  bool no_device_ = false;
};

}  // namespace ferry::testing
