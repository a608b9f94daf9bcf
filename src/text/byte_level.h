// GPT-2's reversible byte <-> printable-character mapping ("bytes_to_unicode"), used by byte-level
// BPE vocabularies: every byte of the input becomes one printable character before the merges, so
// a vocabulary's token strings never hold raw control bytes or spaces (' ' is stored as "Ġ").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::byte_level {

// The character (as UTF-8) that stands for `byte`.
const std::string& byte_to_char(uint8_t byte);

// The byte a character stands for, or -1 if the codepoint is not in the table.
int char_to_byte(uint32_t codepoint);

// Maps every byte of `bytes` to its character.
std::string encode(std::string_view bytes);

// Maps the characters of `text` back to bytes. A character outside the table (a vocabulary that
// holds raw text) is copied through unchanged.
std::string decode(std::string_view text);

}  // namespace ferry::byte_level
