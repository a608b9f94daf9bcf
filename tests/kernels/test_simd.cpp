// The SIMD level choice: what the machine offers, forcing a level, and bad names.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

TEST(SimdLevel, ListsAvailableLevelsBestFirstAndForcesEach) {
  SimdLevelGuard guard;
  const auto levels = kernels::available_simd_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.back(), "scalar");
  for (const std::string& level : levels) {
    kernels::set_simd_level(level);
    EXPECT_EQ(kernels::simd_level(), level);
  }
  // avx512 implies avx2 here: the avx512 path also uses AVX2/FMA/F16C instructions.
  if (std::find(levels.begin(), levels.end(), "avx512") != levels.end()) {
    EXPECT_NE(std::find(levels.begin(), levels.end(), "avx2"), levels.end());
  }
}

TEST(SimdLevel, RejectsUnknownNames) {
  SimdLevelGuard guard;
  expect_error(ErrorKind::Usage, [] { kernels::set_simd_level("neon"); },
               {"neon", "scalar, avx2, avx512, avx512vnni or avx512bf16"});
}
