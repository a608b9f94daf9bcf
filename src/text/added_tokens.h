// Finding added tokens ("<|im_start|>", "<s>", user-defined pieces) in text before anything else
// runs on it, as Hugging Face tokenizers' AddedVocabulary does: leftmost match first, the longest
// one at that position, with each token's lstrip / rstrip / single_word options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/regex.h"

namespace ferry {

class AddedTokenMatcher {
 public:
  AddedTokenMatcher();

  // `flags`: AddedTokenFlag bits. `special`: matched only when the caller parses special tokens.
  void add(std::string_view text, int32_t id, uint8_t flags, bool special);
  bool empty() const { return entries_.empty(); }

  struct Part {
    size_t start;
    size_t end;
    int32_t id;  // -1: text between tokens
  };
  // Covers `text` with tokens and the runs of text between them (runs are never empty).
  std::vector<Part> split(std::string_view text, bool parse_special) const;

 private:
  struct Entry {
    int32_t id;
    uint8_t flags;
    bool special;
  };
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node
    int32_t entry = -1;
  };
  int32_t child(int32_t node, unsigned char byte) const;
  bool is_word_boundary(std::string_view text, size_t start, size_t end) const;

  std::vector<Node> nodes_;
  std::vector<Entry> entries_;
  Regex word_char_;
};

}  // namespace ferry
