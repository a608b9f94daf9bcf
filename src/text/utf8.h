// UTF-8 helpers shared by the tokenizers and the streaming decoder. Well-formedness follows the
// Unicode standard's table of well-formed byte sequences (no overlongs, no surrogates, <= U+10FFFF).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::utf8 {

enum class Status {
  Ok,          // a complete, well-formed sequence
  Invalid,     // these bytes can never start a well-formed sequence
  Incomplete,  // a well-formed prefix cut off by the end of the input
};

struct Decoded {
  Status status = Status::Invalid;
  uint32_t codepoint = 0;  // valid when status == Ok
  size_t length = 1;       // bytes consumed: the sequence (Ok), the maximal well-formed prefix
                           // (Incomplete), or the bytes to skip (Invalid, at least 1)
};

// Decodes the sequence that starts at text[0]. `text` must not be empty.
Decoded decode(std::string_view text);

// Appends the UTF-8 encoding of `codepoint` (must be <= U+10FFFF).
void append(std::string& out, uint32_t codepoint);
std::string encode(uint32_t codepoint);

// Byte length of the character starting at text[0] for splitting text into characters: the
// sequence length when well-formed, else 1 (a malformed byte is its own "character"). Never
// returns more than text.size(), never 0 for non-empty text.
size_t char_length(std::string_view text);

bool is_valid(std::string_view text);

// Length of the longest prefix that does not end inside an incomplete sequence: what a streamer
// may emit now. Malformed bytes count as complete (they will never become valid).
size_t complete_prefix_length(std::string_view text);

// A copy with every malformed or truncated sequence replaced by U+FFFD.
std::string sanitize(std::string_view text);

}  // namespace ferry::utf8
