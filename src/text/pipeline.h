// The stages a tokenizer runs on the text between added tokens, as data: Hugging Face
// tokenizers' normalizers and pre-tokenizers (tokenizer.json "normalizer" / "pre_tokenizer"), which
// the GGUF and tiktoken loaders also use to describe their fixed pipelines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

// One normalizer of a tokenizer.json (a "Sequence" is flattened into a list of these).
struct NormalizerStep {
  enum class Kind {
    Nfc,  // Unicode normalization forms
    Nfd,
    Nfkc,
    Nfkd,
    Lowercase,  // Unicode lower case
    Prepend,    // `content` before non-empty text
    Append,     // `content` after non-empty text
    Replace,    // every match of `pattern` (a literal, or a PCRE2 regex when `regex`) becomes `content`
    Strip,      // removes white space at the start (`left`) and/or end (`right`)
  };
  Kind kind = Kind::Nfc;
  std::string pattern;
  bool regex = false;
  std::string content;
  bool left = false;
  bool right = false;
};

// How a Split keeps the delimiters it finds (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior {
  Removed,             // delimiters dropped
  Isolated,            // delimiters are pieces of their own
  MergedWithPrevious,  // a delimiter joins the piece before it
  MergedWithNext,      // a delimiter joins the piece after it
  Contiguous,          // adjacent delimiters form one piece
};

// One pre-tokenizer of a tokenizer.json (a "Sequence" is flattened into a list of these). Each
// step splits every piece the previous steps made; ByteLevel and Metaspace also rewrite them.
struct PreTokenizerStep {
  enum class Kind {
    Split,      // `pattern` (PCRE2 regex in UTF mode, or a literal) with `behavior` and `invert`
    ByteLevel,  // optional ' ' prefix, optional GPT-2 regex split, then bytes -> printable characters
    Metaspace,  // ' ' -> `replacement`, optional prefix, optional split before each replacement
  };
  enum class Prepend { Always, First, Never };  // Metaspace: which pieces get the prefix

  Kind kind = Kind::Split;
  std::string pattern;
  bool regex = true;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;             // ByteLevel
  bool use_regex = true;                     // ByteLevel
  std::string replacement = "\xE2\x96\x81";  // Metaspace: U+2581 "▁"
  Prepend prepend = Prepend::Always;         // Metaspace
  bool split = true;                         // Metaspace

  static PreTokenizerStep split_regex(std::string pattern, SplitBehavior behavior = SplitBehavior::Isolated) {
    PreTokenizerStep s;
    s.pattern = std::move(pattern);
    s.behavior = behavior;
    return s;
  }
  static PreTokenizerStep byte_level(bool add_prefix_space, bool use_regex) {
    PreTokenizerStep s;
    s.kind = Kind::ByteLevel;
    s.add_prefix_space = add_prefix_space;
    s.use_regex = use_regex;
    return s;
  }
};

// How an added token is matched in the text (tokenizers' AddedToken options). Bits of
// Vocab::token_flags.
enum AddedTokenFlag : uint8_t {
  kAddedLStrip = 1,      // swallows the white space before it
  kAddedRStrip = 2,      // swallows the white space after it
  kAddedSingleWord = 4,  // only matches when no word character touches it
  kAddedNormalized = 8,  // matched in the normalized text rather than the raw text
};

}  // namespace ferry
