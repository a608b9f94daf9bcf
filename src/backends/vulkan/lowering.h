// Graph ops to what a Vulkan device records: shader dispatches and buffer copies, checked against
// the op's contract (graph/op.h) once, when a split is compiled. Knows tensors and shaders, not the
// device: the device binds the tensors and records the steps.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace ferry::vulkan {

inline constexpr int kBindings = 8;  // storage buffers every pipeline's layout has
inline constexpr int kParams = 23;   // 32-bit op parameters in the push constants

struct Dispatch {
  std::string_view shader;
  std::array<const Tensor*, kBindings> tensors{};  // binding i; nullptr: unused
  // An internal constant buffer the program owns (e.g. RoPE's frequencies), bound at this binding.
  int constants_binding = -1;
  std::vector<float> constants;
  std::array<uint32_t, kParams> params{};
  uint64_t groups = 0;  // workgroups of 64 invocations
};

// Byte ranges from src to dst, offsets relative to the tensors' first bytes.
struct BufferCopy {
  const Tensor* src = nullptr;
  const Tensor* dst = nullptr;
  struct Region {
    uint64_t src_offset = 0, dst_offset = 0, size = 0;
  };
  std::vector<Region> regions;
};

using Step = std::variant<Dispatch, BufferCopy>;

// The steps of one op, in order (a barrier between each). Error(Shape/Usage) for an op that breaks
// its contract, Error(Unsupported) for one this backend cannot run (e.g. head_dim over 256).
std::vector<Step> lower(const BoundOp& op);
bool supports(Op op, std::span<const DType> input_dtypes);

}  // namespace ferry::vulkan
