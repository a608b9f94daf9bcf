// The compute shaders of the Vulkan backend, compiled from shaders/*.comp by glslc at build time
// and embedded in the binary (see cmake/embed_spirv.cmake).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace ferry::vulkan {

// The SPIR-V words of the shader `name` (its file name without .comp); empty if there is none.
std::span<const uint32_t> spirv(std::string_view name);

}  // namespace ferry::vulkan
