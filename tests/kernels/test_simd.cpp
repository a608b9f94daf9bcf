// The SIMD level choice: what the machine offers, forcing a level, and bad names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

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
  // Every kernel test runs at each of these: say which, so a run on a CPU without the wider
  // levels is not read as having tested them.
  std::string ran;
  for (const std::string& level : levels) ran += (ran.empty() ? "" : ", ") + level;
  std::printf("SIMD levels this CPU runs (each kernel test runs at every one): %s\n", ran.c_str());
  RecordProperty("simd_levels", ran);
  for (const std::string& level : levels) {
    kernels::set_simd_level(level);
    EXPECT_EQ(kernels::simd_level(), level);
  }
  // Each level implies the ones below it: every path uses the instructions of those below.
  const char* ladder[] = {"amx", "avx512bf16", "avx512vnni", "avx512", "avx2"};
  for (size_t i = 0; i + 1 < std::size(ladder); ++i) {
    if (std::find(levels.begin(), levels.end(), ladder[i]) != levels.end()) {
      EXPECT_NE(std::find(levels.begin(), levels.end(), ladder[i + 1]), levels.end()) << ladder[i];
    }
  }
}

TEST(SimdLevel, RejectsUnknownNames) {
  SimdLevelGuard guard;
  expect_error(ErrorKind::Usage, [] { kernels::set_simd_level("neon"); },
               {"neon", "scalar, avx2, avx512, avx512vnni, avx512bf16 or amx"});
}
