// Runs a tokenizer's normalizers (NFC, Prepend, Replace, ...) on a piece of text. Unicode
// normalization and case mapping use ICU; invalid UTF-8 bytes pass through every step unchanged.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/pipeline.h"
#include "text/regex.h"

namespace ferry {

class Normalizer {
 public:
  Normalizer() = default;
  // Compiles the steps' regexes; `where` names the file for error messages.
  Normalizer(std::vector<NormalizerStep> steps, std::string_view where);

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  struct Compiled {
    NormalizerStep step;
    std::vector<Regex> regex;  // one entry for a regex Replace
  };
  std::vector<Compiled> steps_;
};

namespace unicode {
// Unicode normalization forms and full lower-casing of the well-formed runs of `text`.
std::string normalize(std::string_view text, NormalizerStep::Kind form);
std::string to_lower(std::string_view text);
// Unicode White_Space (what \s matches).
bool is_white_space(uint32_t codepoint);
}  // namespace unicode

}  // namespace ferry
