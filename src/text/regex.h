// Unicode regular expressions for pre-tokenizers and normalizers, run by PCRE2 in UTF mode with
// Unicode properties (\p{L}, \s and \w follow the Unicode tables, as in Hugging Face tokenizers'
// Oniguruma patterns). Invalid UTF-8 in a subject never matches anything; it is never an error.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace ferry {

class Regex {
 public:
  // Compiles `pattern`; a bad pattern is Error(Format) naming `where` (the file and field it came
  // from) and the position PCRE2 reports.
  Regex(std::string_view pattern, std::string_view where);

  struct Match {
    size_t start = 0;
    size_t end = 0;
  };

  // The first match starting at or after `from`, searching the whole of `subject` (lookbehinds see
  // the text before `from`). False when there is none.
  bool find(std::string_view subject, size_t from, Match& match) const;

  // Calls on_match(start, end) for each match from left to right, as Oniguruma's find_iter does:
  // an empty match right where the previous match ended is skipped by one character.
  template <typename OnMatch>
  void for_each_match(std::string_view subject, OnMatch&& on_match) const {
    size_t from = 0;
    bool matched_before = false;
    size_t last_match_end = 0;
    Match m;
    while (from <= subject.size() && find(subject, from, m)) {
      if (m.start == m.end && matched_before && last_match_end == m.end) {
        from = m.end + next_char_length(subject, m.end);
        continue;
      }
      on_match(m.start, m.end);
      from = m.end;
      matched_before = true;
      last_match_end = m.end;
    }
  }

  // `subject` with every match replaced by `replacement` (taken literally).
  std::string replace_all(std::string_view subject, std::string_view replacement) const;

  const std::string& pattern() const { return pattern_; }

 private:
  static size_t next_char_length(std::string_view subject, size_t at);

  struct Code;
  std::shared_ptr<const Code> code_;  // compiled once; matching is thread-safe
  std::string pattern_;
  std::string where_;
};

}  // namespace ferry
