#include "chat/js_text.h"

#include <fmt/format.h>
#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace ferry::chat::js {

// --- UTF-8 ---------------------------------------------------------------------------------------

uint32_t next_code_point(std::string_view text, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(text[i])); };
  const uint32_t b0 = byte(pos);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  // Well-formed input is a precondition; the lengths below still never read past the end.
  size_t length = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  length = std::min(length, text.size() - pos);
  uint32_t cp = b0 & (length == 4 ? 0x07u : length == 3 ? 0x0Fu : 0x1Fu);
  for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (byte(pos + i) & 0x3Fu);
  pos += length;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate has no UTF-8 form
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  const auto at = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  while (i < bytes.size()) {
    const unsigned char b0 = at(i);
    if (b0 < 0x80) {
      out += static_cast<char>(b0);
      ++i;
      continue;
    }
    // The WHATWG decoder: the maximal well-formed prefix of a bad sequence becomes one U+FFFD.
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 2;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 3;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      append_utf8(out, 0xFFFD);
      ++i;
      continue;
    }
    size_t j = i + 1;
    size_t got = 0;
    while (got < need && j < bytes.size()) {
      const unsigned char b = at(j);
      const unsigned char l = got == 0 ? lo : 0x80;
      const unsigned char h = got == 0 ? hi : 0xBF;
      if (b < l || b > h) break;
      ++j;
      ++got;
    }
    if (got == need) {
      out.append(bytes.substr(i, j - i));
    } else {
      append_utf8(out, 0xFFFD);
    }
    i = j;
  }
  return out;
}

std::vector<std::string> code_points(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    next_code_point(text, pos);
    out.emplace_back(text.substr(start, pos - start));
  }
  return out;
}

// --- UTF-16 view ---------------------------------------------------------------------------------

size_t utf16_length(std::string_view text) {
  size_t units = 0;
  size_t pos = 0;
  while (pos < text.size()) units += next_code_point(text, pos) >= 0x10000 ? 2 : 1;
  return units;
}

std::optional<std::string> utf16_at(std::string_view text, double index) {
  const double length = static_cast<double>(utf16_length(text));
  // Array.prototype.at: ToIntegerOrInfinity, then relative to the end when negative.
  double k = std::isnan(index) ? 0 : std::trunc(index);
  if (k < 0) k += length;
  if (k < 0 || k >= length) return std::nullopt;
  const auto target = static_cast<size_t>(k);
  size_t unit = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cp = next_code_point(text, pos);
    const size_t width = cp >= 0x10000 ? 2 : 1;
    if (target < unit + width) {
      if (width == 2) return std::string("\xEF\xBF\xBD");  // half of a surrogate pair
      return std::string(text.substr(start, pos - start));
    }
    unit += width;
  }
  return std::nullopt;
}

namespace {

// The first UTF-16 code unit of a code point, for ordering.
uint32_t leading_unit(uint32_t cp) {
  return cp >= 0x10000 ? 0xD800 + ((cp - 0x10000) >> 10) : cp;
}
uint32_t trailing_unit(uint32_t cp) {
  return 0xDC00 + ((cp - 0x10000) & 0x3FF);
}

}  // namespace

int compare_utf16(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint32_t ca = next_code_point(a, i);
    const uint32_t cb = next_code_point(b, j);
    if (ca == cb) continue;
    const uint32_t ua = leading_unit(ca), ub = leading_unit(cb);
    if (ua != ub) return ua < ub ? -1 : 1;
    // Same leading surrogate: both are supplementary, ordered by their trailing units.
    return trailing_unit(ca) < trailing_unit(cb) ? -1 : 1;
  }
  if (i < a.size()) return 1;
  if (j < b.size()) return -1;
  return 0;
}

// --- whitespace and case -------------------------------------------------------------------------

bool is_line_terminator(uint32_t cp) {
  return cp == 0x0A || cp == 0x0D || cp == 0x2028 || cp == 0x2029;
}

bool is_space(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view trim_start(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!is_space(next_code_point(text, next))) break;
    pos = next;
  }
  return text.substr(pos);
}

std::string_view trim_end(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!is_space(next_code_point(text, pos))) break;
    end = start;
  }
  return text.substr(0, end);
}

std::string_view trim(std::string_view text) {
  return trim_end(trim_start(text));
}

namespace {

// Code points whose full upper-case mapping is more than one character (SpecialCasing.txt's
// unconditional entries), or whose mapping the C library's tables (older Unicode) and the
// reference's disagree on (found by comparing every code point): refused rather than converted
// differently.
bool upper_needs_special_casing(uint32_t cp) {
  switch (cp) {
    case 0x00DF:  // ß -> SS
    case 0x0149:
    case 0x019B:
    case 0x01F0:
    case 0x0264:
    case 0x0390:
    case 0x03B0:
    case 0x0587:
    case 0x1C8A:
      return true;
    default:
      break;
  }
  return (cp >= 0x1E96 && cp <= 0x1E9A) || (cp >= 0x1F50 && cp <= 0x1F57) || (cp >= 0x1F80 && cp <= 0x1FFF) ||
         (cp >= 0xA7C0 && cp <= 0xA7FF) || (cp >= 0xFB00 && cp <= 0xFB06) || (cp >= 0xFB13 && cp <= 0xFB17) ||
         (cp >= 0x10D40 && cp <= 0x10D8F) || (cp >= 0x16E40 && cp <= 0x16EFF);
}

bool lower_needs_special_casing(uint32_t cp) {
  return cp == 0x0130     // İ -> i + combining dot above
         || cp == 0x03A3  // Σ: final sigma depends on the following character
         || cp == 0x1C89 || (cp >= 0xA7C0 && cp <= 0xA7FF) || (cp >= 0x10D40 && cp <= 0x10D8F) ||
         (cp >= 0x16E40 && cp <= 0x16EFF);
}

// The C library's Unicode tables (C.UTF-8), used through an explicit locale object so no global
// locale is touched. nullptr when the locale is missing: then only ASCII can be converted.
locale_t unicode_ctype() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

std::string change_case(std::string_view text, bool upper) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cp = next_code_point(text, pos);
    if (cp < 0x80) {
      char c = static_cast<char>(cp);
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      out += c;
      continue;
    }
    if (upper ? upper_needs_special_casing(cp) : lower_needs_special_casing(cp)) {
      fail(ErrorKind::Unsupported, "{} of the character U+{:04X} (its case mapping is not one to one) is not supported",
           upper ? "upper-casing" : "lower-casing", cp);
    }
    const locale_t loc = unicode_ctype();
    if (loc == static_cast<locale_t>(nullptr)) {
      fail(ErrorKind::Unsupported, "changing the case of U+{:04X} needs the C.UTF-8 locale, which is missing", cp);
    }
    const auto wide = static_cast<wint_t>(cp);
    const wint_t mapped = upper ? towupper_l(wide, loc) : towlower_l(wide, loc);
    append_utf8(out, static_cast<uint32_t>(mapped));
  }
  return out;
}

}  // namespace

std::string to_upper(std::string_view text) {
  return change_case(text, true);
}
std::string to_lower(std::string_view text) {
  return change_case(text, false);
}

std::string capitalize(std::string_view text) {
  if (text.empty()) return {};
  size_t pos = 0;
  const uint32_t cp = next_code_point(text, pos);
  // A supplementary character's first code unit is a lone surrogate, which has no case.
  if (cp >= 0x10000) return std::string(text);
  return to_upper(text.substr(0, pos)) + std::string(text.substr(pos));
}

std::string title_case(std::string_view text) {
  const auto is_word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  std::string out(text);
  for (size_t i = 0; i < out.size(); ++i) {
    if (is_word(out[i]) && (i == 0 || !is_word(out[i - 1])) && out[i] >= 'a' && out[i] <= 'z') {
      out[i] = static_cast<char>(out[i] - 'a' + 'A');
    }
  }
  return out;
}

// --- numbers -------------------------------------------------------------------------------------

std::string number_to_string(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  if (value == 0) return "0";  // also -0
  std::string out;
  if (value < 0) {
    out = "-";
    value = -value;
  }
  // Shortest round-trip digits in scientific form: d[.ddd]e[+-]x.
  std::array<char, 64> buf{};
  const auto res = std::to_chars(buf.data(), buf.data() + buf.size(), value, std::chars_format::scientific);
  const std::string_view sci(buf.data(), static_cast<size_t>(res.ptr - buf.data()));
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exponent);
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;  // value = 0.digits x 10^n
  if (k <= n && n <= 21) {
    out += digits + std::string(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{}", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
  }
  return out;
}

std::string float_to_string(double value) {
  if (value == 0 && std::signbit(value)) return "-0.0";
  if (std::isfinite(value) && std::fmod(value, 1.0) == 0) {
    // Number.prototype.toFixed(1), which switches to toString from 1e21 up.
    if (std::fabs(value) >= 1e21) return number_to_string(value);
    return fmt::format("{:.1f}", value);
  }
  return number_to_string(value);
}

std::string number_to_json(double value) {
  return std::isfinite(value) ? number_to_string(value) : "null";
}

bool is_integral(double value) {
  return std::isfinite(value) && std::trunc(value) == value;
}

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

double parse_decimal(std::string_view digits) {
  double value = 0;
  const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (res.ec == std::errc::result_out_of_range) {
    // from_chars leaves overflow to the caller: JavaScript gives Infinity or 0.
    const size_t e = digits.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < digits.size() && digits[e + 1] == '-';
    return tiny ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return value;
}

// The longest prefix of `text` that is a StrUnsignedDecimalLiteral (digits, a fraction, an
// exponent), or 0 when none.
size_t decimal_prefix(std::string_view text) {
  size_t i = 0;
  size_t int_digits = 0, frac_digits = 0;
  while (i < text.size() && is_digit(text[i])) ++i, ++int_digits;
  if (i < text.size() && text[i] == '.') {
    size_t j = i + 1;
    while (j < text.size() && is_digit(text[j])) ++j, ++frac_digits;
    if (int_digits + frac_digits > 0) i = j;
  }
  if (int_digits + frac_digits == 0) return 0;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
    const size_t exp_start = j;
    while (j < text.size() && is_digit(text[j])) ++j;
    if (j > exp_start) i = j;
  }
  return i;
}

}  // namespace

double parse_int(std::string_view text) {
  text = trim_start(text);
  double sign = 1;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    if (text[0] == '-') sign = -1;
    text.remove_prefix(1);
  }
  size_t n = 0;
  while (n < text.size() && is_digit(text[n])) ++n;
  if (n == 0) return std::nan("");
  return sign * parse_decimal(text.substr(0, n));
}

double parse_float(std::string_view text) {
  text = trim_start(text);
  double sign = 1;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    if (text[0] == '-') sign = -1;
    text.remove_prefix(1);
  }
  if (text.substr(0, 8) == "Infinity") return sign * std::numeric_limits<double>::infinity();
  const size_t n = decimal_prefix(text);
  if (n == 0) return std::nan("");
  // from_chars wants a digit first
  const std::string literal = text[0] == '.' ? fmt::format("0{}", text.substr(0, n)) : std::string(text.substr(0, n));
  return sign * parse_decimal(literal);
}

double string_to_number(std::string_view text) {
  text = trim(text);
  if (text.empty()) return 0;
  if (text.size() > 2 && text[0] == '0') {
    int base = 0;
    const char p = static_cast<char>(text[1] | 0x20);
    if (p == 'x') base = 16;
    if (p == 'o') base = 8;
    if (p == 'b') base = 2;
    if (base != 0) {
      double value = 0;
      for (char c : text.substr(2)) {
        int d = -1;
        if (is_digit(c)) d = c - '0';
        if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d < 0 || d >= base) return std::nan("");
        value = value * base + d;
      }
      return value;
    }
  }
  double sign = 1;
  std::string_view body = text;
  if (body[0] == '+' || body[0] == '-') {
    if (body[0] == '-') sign = -1;
    body.remove_prefix(1);
  }
  if (body == "Infinity") return sign * std::numeric_limits<double>::infinity();
  const size_t n = decimal_prefix(body);
  if (n == 0 || n != body.size()) return std::nan("");
  // Built by appending: GCC 12's -Wrestrict misreads insert(0, ...) and "..." + string here.
  std::string literal;
  if (body.front() == '.') literal.push_back('0');
  literal.append(body);
  return sign * parse_decimal(literal);
}

// --- JSON ----------------------------------------------------------------------------------------

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string ascii_escape(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  size_t pos = 0;
  while (pos < json.size()) {
    const uint32_t cp = next_code_point(json, pos);
    if (cp < 0x7F) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out += fmt::format("\\u{:04x}\\u{:04x}", leading_unit(cp), trailing_unit(cp));
    }
  }
  return out;
}

namespace {

// Printable ASCII in the order of the reference's collation (CLDR root, as ICU implements it);
// an upper-case letter shares its lower-case letter's primary weight.
constexpr std::string_view kCollationOrder = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz";

int primary_weight(char c) {
  if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return static_cast<int>(kCollationOrder.find(c));
}

}  // namespace

std::optional<int> locale_compare_ascii(std::string_view a, std::string_view b) {
  for (std::string_view s : {a, b}) {
    for (char c : s) {
      if (c < 0x20 || c > 0x7E) return std::nullopt;
    }
  }
  // Primary level (the character, case ignored), then the tertiary level (lower before upper).
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const int wa = primary_weight(a[i]), wb = primary_weight(b[i]);
    if (wa != wb) return wa < wb ? -1 : 1;
  }
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ua = a[i] >= 'A' && a[i] <= 'Z', ub = b[i] >= 'A' && b[i] <= 'Z';
    if (ua != ub) return ua ? 1 : -1;
  }
  return 0;
}

}  // namespace ferry::chat::js
