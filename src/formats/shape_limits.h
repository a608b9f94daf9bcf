// Bounds on the dimensions a checkpoint may declare, shared by the readers.
#pragma once

#include <cstdint>
#include <optional>

namespace ferry {

// The largest element count a tensor may have, counting only its non-zero dimensions: far above
// any real tensor, and low enough that element counts, byte sizes and strides of every sub-shape
// fit in int64 in whatever order they are multiplied. (A zero-element tensor of shape
// [0, 2^40, 2^40] would otherwise overflow when its strides are computed.)
inline constexpr uint64_t kMaxTensorElements = uint64_t{1} << 56;

// The product of the non-zero entries of `dims`, or nullopt when it exceeds kMaxTensorElements.
inline std::optional<uint64_t> nonzero_element_count(const uint64_t* dims, int rank) {
  uint64_t product = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0) continue;
    if (dims[i] > kMaxTensorElements || product > kMaxTensorElements / dims[i]) return std::nullopt;
    product *= dims[i];
  }
  return product;
}

}  // namespace ferry
