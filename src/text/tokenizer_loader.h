// Loading a tokenizer from whatever file a user points at.
#pragma once

#include <string>

#include "text/tokenizer.h"

namespace ferry {

// `path` is a Hugging Face tokenizer.json, a tokenizer.model (sentencepiece, or a tiktoken rank
// file such as GLM-4's), a GGUF file with a tokenizer.ggml vocabulary, or a model directory holding
// one of them (tokenizer.json first, then tokenizer.model, then a single .gguf). The kind of file
// is told by its content, not its name. Anything else is Error(Usage) or Error(Format) saying
// what was found and what ferry reads.
Tokenizer load_tokenizer(const std::string& path);

}  // namespace ferry
