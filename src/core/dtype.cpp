#include "core/dtype.h"

#include <cctype>
#include <iterator>
#include <string>

namespace ferry {

namespace {
constexpr DTypeTraits kTraits[] = {
    {"f32", 1, 4, false, true},
    {"f16", 1, 2, false, true},
    {"bf16", 1, 2, false, true},
    {"q8_0", kQK8_0, sizeof(BlockQ8_0), true, false},
    {"q4_0", kQK4_0, sizeof(BlockQ4_0), true, false},
    {"q4_1", 32, sizeof(BlockQ4_1), true, false},
    {"q5_0", 32, sizeof(BlockQ5_0), true, false},
    {"q5_1", 32, sizeof(BlockQ5_1), true, false},
    {"iq4_nl", 32, sizeof(BlockIQ4_NL), true, false},
    {"q2_k", kQK_K, sizeof(BlockQ2_K), true, false},
    {"q3_k", kQK_K, sizeof(BlockQ3_K), true, false},
    {"q4_k", kQK_K, sizeof(BlockQ4_K), true, false},
    {"q5_k", kQK_K, sizeof(BlockQ5_K), true, false},
    {"q6_k", kQK_K, sizeof(BlockQ6_K), true, false},
    {"iq4_xs", kQK_K, sizeof(BlockIQ4_XS), true, false},
    {"i32", 1, 4, false, false},
};
static_assert(std::size(kTraits) == static_cast<size_t>(DType::Count), "every DType needs traits");
}  // namespace

const DTypeTraits& dtype_traits(DType dtype) {
  return kTraits[static_cast<size_t>(dtype)];
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < std::size(kTraits); ++i) {
    if (kTraits[i].name == lower) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<size_t> dtype_bytes(DType dtype, uint64_t count) {
  const DTypeTraits& t = dtype_traits(dtype);
  if (count % static_cast<uint64_t>(t.block_size) != 0) return std::nullopt;
  const uint64_t blocks = count / static_cast<uint64_t>(t.block_size);
  if (blocks != 0 && t.block_bytes > SIZE_MAX / blocks) return std::nullopt;
  return static_cast<size_t>(blocks * t.block_bytes);
}

}  // namespace ferry
