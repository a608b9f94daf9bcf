// A scratch directory for one test's files, shared by every test suite.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::testing {

// A fresh, empty directory under the system temp dir, named
// ferry_<prefix>_<pid>_<counter>, removed with everything in it on destruction.
// The directory is created exclusively: a name that already exists (left over by a crashed run,
// or taken by another test binary running at the same time) is skipped, never reused or deleted.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix) {
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    const std::string stem = "ferry_" + std::string(prefix) + "_" + std::to_string(::getpid()) + "_";
    for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
      path_ = base / (stem + std::to_string(next_id()));
      if (std::filesystem::create_directory(path_)) return;
    }
    throw std::runtime_error("cannot create a fresh directory " + (base / (stem + "*")).string() + " after " +
                             std::to_string(kMaxAttempts) + " attempts; clear out stale ferry_* directories there");
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string file(std::string_view name) const { return (path_ / name).string(); }

  // Write a file in the directory (replacing it if present) and return its path.
  std::string write(std::string_view name, const std::vector<uint8_t>& bytes) const {
    return write_raw(name, reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  std::string write_text(std::string_view name, std::string_view text) const {
    return write_raw(name, text.data(), text.size());
  }

 private:
  static constexpr int kMaxAttempts = 1000;

  static uint64_t next_id() {
    static std::atomic<uint64_t> counter{0};
    return counter++;
  }

  std::string write_raw(std::string_view name, const char* data, size_t size) const {
    const std::string p = file(name);
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(data, static_cast<std::streamsize>(size));
    out.close();
    // A helper that fails quietly would make the test fail later for a confusing reason.
    if (!out) throw std::runtime_error("test helper could not write " + p);
    return p;
  }

  std::filesystem::path path_;
};

}  // namespace ferry::testing
