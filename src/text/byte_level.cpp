#include "text/byte_level.h"

#include <array>

#include "text/utf8.h"

namespace ferry::byte_level {

namespace {

// Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes are
// given the codepoints 256, 257, ... in byte order.
bool maps_to_itself(int byte) {
  return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
}

struct Tables {
  std::array<uint32_t, 256> codepoint_of{};
  std::array<std::string, 256> utf8_of;
  std::array<int16_t, 512> byte_of{};  // every codepoint in the table is < 512

  Tables() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const uint32_t cp = maps_to_itself(byte) ? static_cast<uint32_t>(byte) : next++;
      codepoint_of[byte] = cp;
      utf8_of[byte] = utf8::encode(cp);
      byte_of[cp] = static_cast<int16_t>(byte);
    }
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

}  // namespace

const std::string& byte_to_char(uint8_t byte) {
  return tables().utf8_of[byte];
}

int char_to_byte(uint32_t codepoint) {
  return codepoint < 512 ? tables().byte_of[codepoint] : -1;
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_char(static_cast<uint8_t>(c));
  return out;
}

std::string decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const utf8::Decoded d = utf8::decode(text.substr(i));
    const int byte = d.status == utf8::Status::Ok ? char_to_byte(d.codepoint) : -1;
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      out.append(text.substr(i, d.length));
    }
    i += d.length;
  }
  return out;
}

}  // namespace ferry::byte_level
