// Text <-> token ids for a Vocab: sentencepiece-style (Spm) and byte-level BPE tokenizers, and a
// streaming decoder for printing generated tokens as they come.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/vocab.h"

namespace ferry {

// Encodes the text between added tokens in place of a vocabulary's own pipeline (a
// sentencepiece model run by libsentencepiece itself).
class FragmentEncoder {
 public:
  virtual ~FragmentEncoder() = default;
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
};

class Tokenizer {
 public:
  // Validates the vocabulary (Error(Format) naming vocab.source), compiles its pipeline and builds
  // the lookup tables. Empty scores/types default to 0 / normal; eog_ids are sorted.
  static Tokenizer from_vocab(Vocab vocab);
  // The same, with `encoder` turning the text between added tokens into ids.
  static Tokenizer from_vocab(Vocab vocab, std::shared_ptr<const FragmentEncoder> encoder);

  // Text to ids, as Hugging Face tokenizers encodes: added tokens are found first (leftmost, then
  // longest, with their lstrip/rstrip/single_word options); the text between them is normalized,
  // pre-tokenized and run through the model (rank BPE, score BPE or tiktoken ranks); add_special
  // puts the post-processor's tokens around the result (Vocab::special_prefix/suffix, bos/eos).
  // parse_special = false leaves control and unknown tokens written in the text as text
  // (user-defined ones are still matched). Invalid UTF-8 is encoded byte for byte where the
  // vocabulary can (byte-level pieces or <0xXX> byte fallback).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = true) const;

  // Ids to bytes. Control and unknown tokens are left out unless render_special. Spm: "▁" becomes
  // ' ', <0xXX> becomes the byte, and the space the dummy prefix added is dropped from the first
  // token that is not a control token. The result may hold invalid UTF-8 when the ids cut a
  // character (use StreamDecoder or utf8::sanitize for display). Out-of-range ids: Error(Usage).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  // The bytes one token stands for, in running text (no leading-space removal).
  std::string decode_token(int32_t id, bool render_special = false) const;

  // The token's piece as stored in the vocabulary ("▁the", "Ġthe", "<0x0A>", "<s>").
  std::string token_piece(int32_t id) const;

  // The id of a piece as stored (lowest id if repeated), -1 when absent.
  int32_t find_token(std::string_view piece) const;

  const Vocab& vocab() const;
  int32_t n_vocab() const { return vocab().size(); }

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable and shared: copies are cheap and thread-safe
};

// Turns generated ids into printable text as they arrive. It never emits part of a UTF-8
// character: bytes of a character split across tokens (byte-fallback or byte-level pieces) wait
// until the character is complete. Malformed bytes come out as U+FFFD, so the output is always
// valid UTF-8. No leading space is removed: the ids continue a prompt.
class StreamDecoder {
 public:
  explicit StreamDecoder(Tokenizer tokenizer, bool render_special = false);
  // The text that became complete with this token (may be empty).
  std::string push(int32_t id);
  // Whatever is still held back (an unfinished character comes out as U+FFFD); resets.
  std::string flush();
  // Bytes held back right now.
  size_t pending() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace ferry
