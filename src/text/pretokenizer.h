// Pre-tokenization: splitting raw text into the words that BPE merges never cross.
//
// Behind an interface so that the Unicode-exact, regex-driven pre-tokenizers (GPT-2, Llama-3,
// Qwen2, GLM-4 patterns via PCRE2) can replace the hand-written approximation below without
// touching the tokenizer.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace ferry {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual const char* name() const = 0;
  // Splits `text` into consecutive pieces whose concatenation is `text` (views into it).
  virtual std::vector<std::string_view> split(std::string_view text) const = 0;
};

// GPT-2's pattern  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written out by hand. Exact for ASCII. Outside ASCII it only knows the Unicode white-space
// characters; every other non-ASCII character counts as a letter (so non-ASCII digits and
// punctuation are grouped with letters, unlike \p{N} and \p{P}). Malformed UTF-8 bytes count as
// letters too.
std::unique_ptr<PreTokenizer> make_gpt2_pretokenizer();

}  // namespace ferry
