// Helpers shared by the text tests.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace ferry::test {

inline std::string golden_dir() {
  if (const char* dir = std::getenv("FERRY_GOLDEN_DIR")) return dir;
  return std::string(FERRY_SOURCE_DIR) + "/../shared/golden";
}

// A fresh directory for one test's files, removed when the object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / ("ferry_text_" + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream out(file(name), std::ios::binary);
    out << text;
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

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
