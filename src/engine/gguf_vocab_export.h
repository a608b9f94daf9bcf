// A tokenizer as GGUF tokenizer.* keys, the way llama.cpp's convert_hf_to_gguf.py writes them:
// byte-level BPE vocabularies as model "gpt2" with their merges and a tokenizer.ggml.pre name that
// stands for their pre-tokenizer, sentencepiece-style ones as model "llama" with scores, the
// vocabulary padded to the model's embedding rows with unused "[PAD<id>]" tokens, the special ids
// and the chat template. The result is checked by reading it back: the GGUF form must tokenize a
// set of test texts to the same ids as the original tokenizer, or nothing is written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf_writer.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

namespace ferry {

// Writes `vocab` as tokenizer.ggml.* keys (model, pre, tokens, scores for "llama", token_type,
// merges for "gpt2", bos/eos/unknown/eot/eom/padding ids that are set, add_bos_token,
// add_eos_token, add_space_prefix for "llama") and tokenizer.chat_template when it has one:
// what vocab_from_gguf reads back.
void add_gguf_vocab(GgufWriter& gguf, const Vocab& vocab);

struct GgufVocabOptions {
  int64_t n_vocab = 0;  // the model's embedding rows: the vocabulary is padded to this size
  // tokenizer.ggml.pre names to try first (the architecture's own, e.g. chatglm-bpe for GLM).
  std::vector<std::string> preferred_pre;
  std::string eot_piece;      // a control token to name as eot when the tokenizer names none ("<|user|>")
  int32_t fallback_bos = -1;  // config.json's ids, for a tokenizer that names none
  int32_t fallback_eos = -1;
};

// The vocabulary a GGUF of `tokenizer` carries. Byte-level tokenizers get the first pre-tokenizer
// name whose splits equal theirs on the test texts; tiktoken ranks become merges (llama.cpp's
// QwenModel.bpe). Then the vocabulary is written, read back and run on the test texts. Throws
// Error(Unsupported) when no GGUF form tokenizes the same (an unknown pre-tokenizer, a normalizer
// GGUF cannot express), Error(Shape) when the tokenizer has more tokens than the model has rows.
Vocab gguf_vocab_for(const Tokenizer& tokenizer, const GgufVocabOptions& options);

// The texts the check runs: white space runs, digits, punctuation, contractions, several scripts
// and emoji, and the vocabulary's own added tokens inside text.
std::vector<std::string> gguf_vocab_check_texts(const Vocab& vocab);

}  // namespace ferry
