// Helpers for the format tests: byte builders for hand-made (and deliberately broken)
// safetensors and GGUF files, and a check that a call fails with a given error kind and a message
// naming what it should. The scratch directory (TempDir) comes from common/temp_dir.h.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/expect_error.h"
#include "common/golden_dir.h"
#include "common/temp_dir.h"
#include "core/error.h"

namespace ferry::testing {

// Little-endian byte writer.
class Bytes {
 public:
  Bytes& u8(uint8_t v) {
    b_.push_back(v);
    return *this;
  }
  Bytes& u32(uint32_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& i32(int32_t v) { return le(static_cast<uint32_t>(v), 4); }
  Bytes& f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return le(bits, 4);
  }
  Bytes& f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    return le(bits, 8);
  }
  Bytes& raw(std::string_view s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& v) {
    b_.insert(b_.end(), v.begin(), v.end());
    return *this;
  }
  Bytes& zeros(size_t n) {
    b_.resize(b_.size() + n, 0);
    return *this;
  }
  Bytes& pad_to(size_t alignment) {
    while (b_.size() % alignment != 0) b_.push_back(0);
    return *this;
  }
  // A GGUF string: u64 length + bytes.
  Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }

  size_t size() const { return b_.size(); }
  const std::vector<uint8_t>& vec() const { return b_; }
  std::vector<uint8_t> take() { return std::move(b_); }

 private:
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> b_;
};

// A safetensors file: 8-byte length, the header text as given (not validated here), then
// `data_bytes` of data where byte i is (i * 7 + 3) & 0xff.
inline std::vector<uint8_t> safetensors_bytes(const std::string& header, size_t data_bytes) {
  Bytes b;
  b.u64(header.size()).raw(header);
  for (size_t i = 0; i < data_bytes; ++i) b.u8(static_cast<uint8_t>((i * 7 + 3) & 0xff));
  return b.take();
}

// GGUF value type ids as written in files.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

}  // namespace ferry::testing
