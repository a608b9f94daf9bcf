#include "text/utf8.h"

namespace ferry::utf8 {

namespace {

bool in_range(uint8_t byte, uint8_t lo, uint8_t hi) {
  return byte >= lo && byte <= hi;
}

}  // namespace

Decoded decode(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {Status::Ok, lead, 1};

  size_t length = 0;
  uint8_t second_lo = 0x80, second_hi = 0xBF;  // the second byte's range depends on the lead
  uint32_t codepoint = 0;
  if (in_range(lead, 0xC2, 0xDF)) {
    length = 2;
    codepoint = lead & 0x1Fu;
  } else if (in_range(lead, 0xE0, 0xEF)) {
    length = 3;
    codepoint = lead & 0x0Fu;
    if (lead == 0xE0) second_lo = 0xA0;  // no overlongs
    if (lead == 0xED) second_hi = 0x9F;  // no surrogates
  } else if (in_range(lead, 0xF0, 0xF4)) {
    length = 4;
    codepoint = lead & 0x07u;
    if (lead == 0xF0) second_lo = 0x90;  // no overlongs
    if (lead == 0xF4) second_hi = 0x8F;  // <= U+10FFFF
  } else {
    return {Status::Invalid, 0, 1};  // continuation byte, C0/C1 or F5..FF
  }

  for (size_t i = 1; i < length; ++i) {
    if (i >= text.size()) return {Status::Incomplete, 0, i};
    const uint8_t lo = i == 1 ? second_lo : uint8_t{0x80};
    const uint8_t hi = i == 1 ? second_hi : uint8_t{0xBF};
    if (!in_range(byte(i), lo, hi)) return {Status::Invalid, 0, i};
    codepoint = (codepoint << 6) | (byte(i) & 0x3Fu);
  }
  return {Status::Ok, codepoint, length};
}

void append(std::string& out, uint32_t codepoint) {
  if (codepoint < 0x80) {
    out += static_cast<char>(codepoint);
  } else if (codepoint < 0x800) {
    out += static_cast<char>(0xC0 | (codepoint >> 6));
    out += static_cast<char>(0x80 | (codepoint & 0x3F));
  } else if (codepoint < 0x10000) {
    out += static_cast<char>(0xE0 | (codepoint >> 12));
    out += static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (codepoint & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (codepoint >> 18));
    out += static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (codepoint & 0x3F));
  }
}

std::string encode(uint32_t codepoint) {
  std::string out;
  append(out, codepoint);
  return out;
}

size_t char_length(std::string_view text) {
  const Decoded d = decode(text);
  return d.status == Status::Ok ? d.length : 1;
}

bool is_valid(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const Decoded d = decode(text.substr(i));
    if (d.status != Status::Ok) return false;
    i += d.length;
  }
  return true;
}

size_t complete_prefix_length(std::string_view text) {
  // An incomplete sequence is at most 3 bytes long, so only the tail needs a look.
  const size_t start = text.size() > 3 ? text.size() - 3 : 0;
  for (size_t i = start; i < text.size(); ++i) {
    const Decoded d = decode(text.substr(i));
    if (d.status == Status::Incomplete && i + d.length == text.size()) return i;
  }
  return text.size();
}

std::string sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Decoded d = decode(text.substr(i));
    if (d.status == Status::Ok) {
      out.append(text.substr(i, d.length));
    } else {
      append(out, 0xFFFD);
    }
    i += d.length;
  }
  return out;
}

}  // namespace ferry::utf8
