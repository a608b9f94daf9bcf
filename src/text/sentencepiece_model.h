// sentencepiece tokenizer.model files (Llama 2, ChatGLM3) run by libsentencepiece itself.
#pragma once

#include <string>

#include "text/tokenizer.h"

namespace ferry {

// Loads `path` with libsentencepiece: the vocabulary (pieces, scores, types, bos/eos/unk/pad) and
// an encoder that runs the model on the text between added tokens, so encoding is the library's
// own (normalization, dummy prefix, byte fallback, unigram or BPE). Added tokens past the model's
// pieces and add_bos_token / add_eos_token come from tokenizer_config.json beside it; without
// one, bos is added when the model has it (as Llama's tokenizer does). A file the library cannot
// parse is Error(Format).
Tokenizer load_sentencepiece_tokenizer(const std::string& path);

// True when the file starts like a serialized sentencepiece ModelProto (field 1, a piece).
bool looks_like_sentencepiece(const std::string& path);

}  // namespace ferry
