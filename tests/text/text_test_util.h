// Helpers shared by the text tests.
#pragma once

#include <random>
#include <string>

#include "common/golden_dir.h"
#include "common/temp_dir.h"

namespace ferry::test {

// The shared helpers, under the name these tests use.
using ferry::testing::golden_dir;
using ferry::testing::TempDir;

// Random text: ASCII letters, digits, punctuation, spaces and newlines, plus (when `unicode`)
// 2-, 3- and 4-byte characters.
inline std::string random_text(std::mt19937& rng, size_t max_chars, bool unicode) {
  static const char* const kMultiByte[] = {"é", "ß", "ж", "中", "文", "€", "→", "😀", "🦀", "ü", "\u00A0", "\u3000"};
  std::uniform_int_distribution<size_t> length(0, max_chars);
  std::uniform_int_distribution<int> kind(0, unicode ? 9 : 7);
  std::uniform_int_distribution<int> printable(0x20, 0x7E);
  std::uniform_int_distribution<size_t> multi(0, std::size(kMultiByte) - 1);
  std::string text;
  const size_t n = length(rng);
  for (size_t i = 0; i < n; ++i) {
    const int k = kind(rng);
    if (k <= 4) {
      text += static_cast<char>(printable(rng));
    } else if (k == 5) {
      text += ' ';
    } else if (k == 6) {
      text += "  ";
    } else if (k == 7) {
      text += '\n';
    } else {
      text += kMultiByte[multi(rng)];
    }
  }
  return text;
}

}  // namespace ferry::test
