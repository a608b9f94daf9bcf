// Small helpers for the tools tests: whole-file reads, plus the shared scratch directory and goldens' location.
#pragma once

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/golden_dir.h"
#include "common/temp_dir.h"

namespace ferry::test {

// The shared helpers, under the name these tests use.
using ferry::testing::golden_dir;
using ferry::testing::TempDir;

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace ferry::test
