#include "text/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "core/error.h"
#include "text/utf8.h"

namespace ferry {

namespace unicode {

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// Applies `transform` to each well-formed run of `text`, copying malformed bytes through.
template <typename Transform>
std::string per_valid_run(std::string_view text, Transform transform) {
  std::string out;
  out.reserve(text.size());
  size_t run = 0;
  for (size_t i = 0; i < text.size();) {
    const utf8::Decoded d = utf8::decode(text.substr(i));
    if (d.status == utf8::Status::Ok) {
      i += d.length;
      continue;
    }
    if (i > run) transform(text.substr(run, i - run), out);
    out.append(text.substr(i, d.length));
    i += d.length;
    run = i;
  }
  if (text.size() > run) transform(text.substr(run), out);
  return out;
}

bool is_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

std::string normalize(std::string_view text, NormalizerStep::Kind form) {
  if (is_ascii(text)) return std::string(text);  // ASCII is invariant under every form
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case NormalizerStep::Kind::Nfc:
      normalizer = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalizerStep::Kind::Nfd:
      normalizer = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalizerStep::Kind::Nfkc:
      normalizer = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalizerStep::Kind::Nfkd:
      normalizer = icu::Normalizer2::getNFKDInstance(status);
      break;
    default:
      fail(ErrorKind::Internal, "unicode::normalize called with a step that is not a normalization form");
  }
  if (U_FAILURE(status)) fail(ErrorKind::Internal, "ICU has no normalizer data: {}", u_errorName(status));
  return per_valid_run(text, [&](std::string_view run, std::string& out) {
    icu::StringByteSink<std::string> sink(&out);
    UErrorCode s = U_ZERO_ERROR;
    normalizer->normalizeUTF8(0, icu::StringPiece(run.data(), static_cast<int32_t>(run.size())), sink, nullptr, s);
    if (U_FAILURE(s)) fail(ErrorKind::Internal, "ICU normalization failed: {}", u_errorName(s));
  });
}

std::string to_lower(std::string_view text) {
  if (!is_ascii(text)) {
    return per_valid_run(text, [&](std::string_view run, std::string& out) {
      icu::StringByteSink<std::string> sink(&out);
      UErrorCode s = U_ZERO_ERROR;
      icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(run.data(), static_cast<int32_t>(run.size())), sink, nullptr,
                                s);
      if (U_FAILURE(s)) fail(ErrorKind::Internal, "ICU lower-casing failed: {}", u_errorName(s));
    });
  }
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace unicode

Normalizer::Normalizer(std::vector<NormalizerStep> steps, std::string_view where) {
  for (NormalizerStep& step : steps) {
    Compiled c{std::move(step), {}};
    if (c.step.kind == NormalizerStep::Kind::Replace && c.step.regex) {
      c.regex.emplace_back(c.step.pattern, std::string(where) + " normalizer Replace");
    }
    steps_.push_back(std::move(c));
  }
}

namespace {

size_t strip_left_length(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const utf8::Decoded d = utf8::decode(text.substr(i));
    if (d.status != utf8::Status::Ok || !unicode::is_white_space(d.codepoint)) break;
    i += d.length;
  }
  return i;
}

size_t strip_right_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;  // back up to the first byte of the last character
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    const utf8::Decoded d = utf8::decode(text.substr(start, end - start));
    if (d.status != utf8::Status::Ok || d.length != end - start || !unicode::is_white_space(d.codepoint)) break;
    end = start;
  }
  return end;
}

std::string replace_literal(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t copied = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, copied)) {
    out.append(text.substr(copied, at - copied));
    out.append(to);
    copied = at + from.size();
  }
  out.append(text.substr(copied));
  return out;
}

}  // namespace

std::string Normalizer::apply(std::string_view input) const {
  std::string text(input);
  for (const Compiled& c : steps_) {
    const NormalizerStep& s = c.step;
    switch (s.kind) {
      case NormalizerStep::Kind::Nfc:
      case NormalizerStep::Kind::Nfd:
      case NormalizerStep::Kind::Nfkc:
      case NormalizerStep::Kind::Nfkd:
        text = unicode::normalize(text, s.kind);
        break;
      case NormalizerStep::Kind::Lowercase:
        text = unicode::to_lower(text);
        break;
      case NormalizerStep::Kind::Prepend:
        if (!text.empty()) text.insert(0, s.content);
        break;
      case NormalizerStep::Kind::Append:
        if (!text.empty()) text.append(s.content);
        break;
      case NormalizerStep::Kind::Replace:
        text = s.regex ? c.regex.front().replace_all(text, s.content) : replace_literal(text, s.pattern, s.content);
        break;
      case NormalizerStep::Kind::Strip: {
        const size_t end = s.right ? strip_right_start(text) : text.size();
        text.erase(end);
        if (s.left) text.erase(0, strip_left_length(text));
        break;
      }
    }
  }
  return text;
}

}  // namespace ferry
