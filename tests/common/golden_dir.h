// Where the golden reference data lives (see ../shared/golden/README.md).
#pragma once

#include <cstdlib>
#include <string>

namespace ferry::testing {

// FERRY_GOLDEN_DIR (set by CTest), else the checkout's sibling ../shared/golden.
inline std::string golden_dir() {
  if (const char* env = std::getenv("FERRY_GOLDEN_DIR")) return env;
  return std::string(FERRY_SOURCE_DIR) + "/../shared/golden";
}

}  // namespace ferry::testing
