#include "core/error.h"

#include <cstdint>

namespace ferry {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Io:
      return "I/O error";
    case ErrorKind::Format:
      return "format error";
    case ErrorKind::Config:
      return "config error";
    case ErrorKind::Shape:
      return "shape error";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::OutOfMemory:
      return "out of memory";
    case ErrorKind::DeviceMismatch:
      return "device mismatch";
    case ErrorKind::Usage:
      return "usage error";
    case ErrorKind::Internal:
      return "internal error";
  }
  return "error";
}

namespace {

// Bytes in a valid UTF-8 sequence starting at s[i] (overlong forms, surrogates and code points past
// U+10FFFF are invalid), or 0.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (b >= 0xc2 && b <= 0xdf) {
    n = 2, cp = b & 0x1fu;
  } else if (b >= 0xe0 && b <= 0xef) {
    n = 3, cp = b & 0x0fu;
  } else if (b >= 0xf0 && b <= 0xf4) {
    n = 4, cp = b & 0x07u;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3fu);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  // C1 controls (U+0080..U+009F) move terminals too.
  if (cp >= 0x80 && cp <= 0x9f) return 0;
  return n;
}

}  // namespace

std::string printable_message(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size();) {
    const auto b = static_cast<unsigned char>(message[i]);
    if (b == '\n' || b == '\t' || (b >= 0x20 && b < 0x7f)) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    if (const size_t n = b >= 0x80 ? utf8_sequence(message, i) : 0; n > 0) {
      out.append(message.substr(i, n));
      i += n;
      continue;
    }
    out += fmt::format("\\x{:02x}", b);
    ++i;
  }
  return out;
}

}  // namespace ferry
