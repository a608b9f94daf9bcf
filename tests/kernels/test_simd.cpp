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
  auto offered = [&](const char* level) { return std::find(levels.begin(), levels.end(), level) != levels.end(); };
  for (size_t i = 0; i + 1 < std::size(ladder); ++i) {
    if (offered(ladder[i])) {
      EXPECT_TRUE(offered(ladder[i + 1])) << ladder[i];
    }
  }
  // avxvnni is avx2 plus AVX-VNNI, ranked below the AVX-512 levels.
  if (offered("avxvnni")) {
    EXPECT_TRUE(offered("avx2"));
    const auto at = [&](const char* level) { return std::find(levels.begin(), levels.end(), level) - levels.begin(); };
    EXPECT_EQ(at("avxvnni") + 1, at("avx2"));
    if (offered("avx512")) {
      EXPECT_LT(at("avx512"), at("avxvnni"));
    }
  }
}

TEST(SimdLevel, RejectsUnknownNames) {
  SimdLevelGuard guard;
  expect_error(ErrorKind::Usage, [] { kernels::set_simd_level("neon"); },
               {"neon", "scalar, avx2, avxvnni, avx512, avx512vnni, avx512bf16 or amx"});
}
