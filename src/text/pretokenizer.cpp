#include "text/pretokenizer.h"

#include <cstdint>
#include <string>

#include "text/utf8.h"

namespace ferry {

namespace {

enum class CharClass { Letter, Digit, Space, Other };

bool is_unicode_space(uint32_t cp) {
  // White_Space characters of Unicode (what \s matches in PCRE2 with UCP).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

CharClass classify(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Digit;
    if (is_unicode_space(cp)) return CharClass::Space;
    return CharClass::Other;
  }
  if (is_unicode_space(cp)) return CharClass::Space;
  return CharClass::Letter;  // the approximation: see the header
}

// One character of the text: where it starts, how long it is, what class it has.
struct Char {
  size_t offset;
  size_t length;
  uint32_t codepoint;
  CharClass cls;
};

std::vector<Char> split_chars(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const utf8::Decoded d = utf8::decode(text.substr(i));
    if (d.status == utf8::Status::Ok) {
      chars.push_back({i, d.length, d.codepoint, classify(d.codepoint)});
      i += d.length;
    } else {
      chars.push_back({i, 1, 0xFFFD, CharClass::Letter});
      i += 1;
    }
  }
  return chars;
}

class Gpt2ApproxPreTokenizer final : public PreTokenizer {
 public:
  const char* name() const override { return "gpt2-approx"; }

  std::vector<std::string_view> split(std::string_view text) const override {
    const std::vector<Char> chars = split_chars(text);
    const size_t n = chars.size();
    const auto cls = [&](size_t i) { return chars[i].cls; };
    const auto cp = [&](size_t i) { return chars[i].codepoint; };
    const auto offset = [&](size_t i) { return i < n ? chars[i].offset : text.size(); };

    std::vector<std::string_view> words;
    size_t i = 0;
    const auto emit = [&](size_t end) {
      words.push_back(text.substr(offset(i), offset(end) - offset(i)));
      i = end;
    };
    // End of the run of characters of class `c` that starts at `from`.
    const auto run_end = [&](size_t from, CharClass c) {
      while (from < n && cls(from) == c) ++from;
      return from;
    };

    while (i < n) {
      // 's|'t|'re|'ve|'m|'ll|'d  (lower case only, as in GPT-2)
      if (cp(i) == '\'' && i + 1 < n) {
        const uint32_t a = cp(i + 1);
        const uint32_t b = i + 2 < n ? cp(i + 2) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') {
          emit(i + 2);
          continue;
        }
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          emit(i + 3);
          continue;
        }
      }
      //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+  : an optional single ' ' then a run of one class
      const size_t body = (cp(i) == ' ' && i + 1 < n && cls(i + 1) != CharClass::Space) ? i + 1 : i;
      if (cls(body) != CharClass::Space) {
        emit(run_end(body, cls(body)));
        continue;
      }
      // \s+(?!\S) | \s+ : a run of white space gives up its last character when a non-space
      // follows, so that a ' ' can lead the next word.
      const size_t end = run_end(i, CharClass::Space);
      if (end == n || end - i == 1) {
        emit(end);
      } else {
        emit(end - 1);
      }
    }
    return words;
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_gpt2_pretokenizer() {
  return std::make_unique<Gpt2ApproxPreTokenizer>();
}

}  // namespace ferry
