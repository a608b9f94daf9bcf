// Whether this machine can run the Vulkan suites. Without a Vulkan device they skip, saying why;
// with FERRY_REQUIRE_VULKAN=1 (CI, and builds configured with -DFERRY_REQUIRE_VULKAN=ON) a missing
// device fails instead. Every test also fails on any message of the validation layer
// (FERRY_VULKAN_VALIDATION=1, the suite's second CTest run).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backends/vulkan/context.h"
#include "core/error.h"

namespace ferry::testing {

inline bool vulkan_required() {
  const char* v = std::getenv("FERRY_REQUIRE_VULKAN");
  return v != nullptr && std::string(v) == "1";
}

// Empty when this machine has a Vulkan device; else why not.
inline std::string missing_vulkan() {
  try {
    if (vulkan::Instance::get()->devices().empty()) return "the Vulkan loader finds no device with compute";
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// A fixture base: skips (or fails, when required) without a device, and fails on any message of
// the validation layer. A derived SetUp calls this one first and returns when no_device().
template <typename Base>
class VulkanTest : public Base {
 protected:
  void SetUp() override {
    messages_before_ = vulkan::validation_messages();
    const std::string why = missing_vulkan();
    if (why.empty()) return;
    no_device_ = true;
    if (vulkan_required()) FAIL() << "FERRY_REQUIRE_VULKAN=1 but " << why;
    GTEST_SKIP() << "no Vulkan device: " << why;
  }
  void TearDown() override {
    EXPECT_EQ(vulkan::validation_messages(), messages_before_)
        << "the Vulkan validation layer reported messages (above)";
  }
  bool no_device() const { return no_device_; }

 private:
  uint64_t messages_before_ = 0;
  bool no_device_ = false;
};

}  // namespace ferry::testing
