// A format-neutral vocabulary: what a tokenizer needs, whichever file it came from (a GGUF's
// tokenizer.ggml.* keys or a Hugging Face tokenizer.json + tokenizer_config.json).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/pipeline.h"

namespace ferry {

class GgufFile;

// Token types, numbered as GGUF's tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,      // <s>, </s>, <|im_end|>: never produced from ordinary text, hidden on decode
  UserDefined = 4,  // added tokens matched verbatim in the text, decoded verbatim
  Unused = 5,
  Byte = 6,  // <0xXX> byte-fallback tokens
};

struct Vocab {
  enum class Kind {
    Spm,  // sentencepiece style: ' ' written as U+2581 "▁", optional dummy "▁" prefix, <0xXX>
          // byte fallback. Merges by token score (GGUF "llama") or, when `merges` is not empty,
          // by merge rank (HF tokenizer.json converted from sentencepiece).
    Bpe,  // byte-level BPE (GPT-2 style): bytes mapped to printable characters, text pre-split
          // into words, merges by rank (tiktoken: by the rank of the merged token).
  };
  Kind kind = Kind::Spm;

  std::vector<std::string> tokens;  // id -> piece as stored (Spm: "▁the"; Bpe: "Ġthe")
  std::vector<float> scores;        // id -> score (Spm merge priority; may be all 0 for Bpe)
  std::vector<int32_t> types;       // id -> TokenType value (1 normal, 2 unknown, 3 control, ...)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order (rank 0 first)

  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  int32_t eot = -1, eom = -1;    // end of turn / end of message, when the file names them
  std::vector<int32_t> eog_ids;  // every id that ends generation (sorted, unique): eos, eot, eom,
                                 // <|endoftext|>, <|im_end|>, <|eot_id|>, ..., GLM's <|user|> and
                                 // <|observation|>, generation_config.json's eos_token_id list

  bool add_bos = false;  // prepend bos when encoding with add_special
  bool add_eos = false;  // append eos when encoding with add_special
  // What encode(add_special) puts around the text when a post-processor template names more than
  // a bos/eos (GLM-4: [gMASK] <sop>). When empty, add_bos / add_eos decide.
  std::vector<int32_t> special_prefix, special_suffix;

  bool add_space_prefix = true;    // Spm: the text starts with "▁" (decode drops that space again)
  bool byte_fallback = true;       // unknown characters become <0xXX> tokens when they exist
  bool ignore_merges = false;      // Bpe (Llama-3, tiktoken): a word that is itself a token is not merged
  bool fuse_unk = false;           // consecutive unknown characters become one unknown token
  bool merges_from_ranks = false;  // tiktoken: no merge list; adjacent pieces whose concatenation is a
                                   // token merge, the lowest id first

  // The text pipeline between added tokens: normalizers, then pre-tokenizers, then the model. A
  // vocabulary built by hand may leave them empty: a Bpe one then splits with GPT-2's pattern and
  // maps bytes; a Spm one escapes spaces as "▁" after the add_space_prefix dummy prefix (llama.cpp).
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  // id -> AddedTokenFlag bits (lstrip, rstrip, single_word, normalized) of added tokens; may be
  // empty (no flags). Added tokens are the control, user-defined and unknown ones.
  std::vector<uint8_t> token_flags;

  std::string pre;            // pre-tokenizer name (GGUF tokenizer.ggml.pre, e.g. "llama-bpe", "qwen2")
  std::string chat_template;  // Jinja template from the file, empty when it has none
  std::string source;         // the file(s) it was read from, for error messages

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  TokenType type(int32_t id) const { return static_cast<TokenType>(types[id]); }
  bool is_eog(int32_t id) const;

  // Checks the invariants the tokenizer relies on: non-empty, scores/types (and token_flags when
  // present) sized like tokens, special ids in range, eog_ids sorted and in range. Error(Format)
  // naming `source` otherwise.
  void validate() const;
};

// Reads the tokenizer.ggml.* keys: model "llama" -> Spm, "gpt2" -> Bpe (anything else is
// Error(Unsupported)); tokens, scores, token_type, merges, bos/eos/unknown/padding/eot/eom ids,
// add_bos_token, add_eos_token, add_space_prefix, chat_template, and pre, which picks the split
// regexes (see pre_tokenizer_for_gguf).
Vocab vocab_from_gguf(const GgufFile& file);

// Reads a Hugging Face tokenizer.json whose model.type is "BPE" (anything else is
// Error(Unsupported)): vocabulary, merges, added tokens with their options, normalizers,
// pre-tokenizers and the post-processor template. A ByteLevel pre-tokenizer or decoder makes it
// Bpe; a Metaspace pre-tokenizer or a normalizer replacing ' ' with "▁" makes it Spm (with rank
// merges). A component ferry does not implement is Error(Unsupported) naming it. Reads
// tokenizer_config.json (bos/eos tokens, add_bos_token, add_eos_token, chat_template) and
// generation_config.json (eos_token_id list) when they sit in the same directory.
Vocab vocab_from_tokenizer_json(const std::string& path);
// The same for tokenizer.json text in memory (no config files); `name` appears in error messages.
Vocab vocab_from_tokenizer_json_text(std::string_view json_text, const std::string& name);

// Reads a tiktoken rank file (GLM-4's tokenizer.model: "<base64 token> <rank>" per line) as a
// byte-level vocabulary that merges by rank, split with GLM-4's pattern. Special tokens come from
// tokenizer_config.json's added_tokens_decoder beside it, else GLM-4's own list after the ranks
// ([gMASK] <sop> prefix the text on encode(add_special)).
Vocab vocab_from_tiktoken(const std::string& path);

// True when the file starts like a tiktoken rank file (base64, a space, a number).
bool looks_like_tiktoken(const std::string& path);

// Derives eog_ids from eos/eot/eom, the end-of-generation tokens known by their text, and
// `extra_eog` (e.g. generation_config.json's eos_token_id list; out-of-range ids are
// Error(Format)). Text-detected end tokens are marked Control. Loaders call it last.
void finalize_special_tokens(Vocab& vocab, const std::vector<int64_t>& extra_eog = {});

}  // namespace ferry
