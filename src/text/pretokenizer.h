// Pre-tokenization: splitting text into the words that BPE merges never cross, with Hugging Face
// tokenizers' semantics (each step splits every piece the previous steps made; regexes run by
// PCRE2 in UTF mode, see text/regex.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/pipeline.h"
#include "text/regex.h"

namespace ferry {

// Words as spans of one buffer (a ByteLevel or Metaspace step rewrites the text, so the words are
// not always views into the input).
struct Words {
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;  // (offset, length) into text, never empty

  size_t size() const { return spans.size(); }
  std::string_view operator[](size_t i) const { return std::string_view(text).substr(spans[i].first, spans[i].second); }
};

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no steps: the whole text is one word
  // Compiles the steps' regexes; `where` names the file and field for error messages.
  PreTokenizer(std::vector<PreTokenizerStep> steps, std::string_view where);

  // Splits one run of text (the text between two added tokens). `at_start`: the run begins the
  // input (Metaspace with prepend_scheme "first" only prefixes that run).
  Words split(std::string_view text, bool at_start = true) const;

  // The words as strings (for tests and tools).
  std::vector<std::string> split_to_strings(std::string_view text) const;

  // True when a ByteLevel step maps the words' bytes to GPT-2's printable characters.
  bool maps_bytes() const { return maps_bytes_; }
  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

 private:
  std::vector<PreTokenizerStep> steps_;
  std::vector<Regex> regexes_;  // steps_[i] uses regexes_[regex_index_[i]] (-1: none)
  std::vector<int> regex_index_;
  bool maps_bytes_ = false;
};

// GPT-2's pattern, which a ByteLevel step with use_regex applies.
extern const char* const kGpt2SplitPattern;

// What a GGUF tokenizer.ggml.pre name of a byte-level ("gpt2") vocabulary stands for: the split
// regexes llama.cpp uses for that name (the patterns of the original tokenizer.json, applied in
// order, each isolating its matches), then the byte-level mapping; and the original tokenizer's
// ignore_merges and bos defaults. "default" and an empty name mean GPT-2's pattern. An unknown
// name is Error(Unsupported) naming `where`.
struct GgufPreTokenizer {
  std::vector<PreTokenizerStep> steps;
  bool ignore_merges = false;
  bool add_bos = false;  // when the file has no tokenizer.ggml.add_bos_token
};
GgufPreTokenizer pre_tokenizer_for_gguf(std::string_view pre, std::string_view where);

}  // namespace ferry
