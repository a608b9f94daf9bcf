// vocab_from_gguf: the tokenizer.ggml.* keys of a GGUF file.
#include <algorithm>
#include <cctype>
#include <optional>

#include "core/error.h"
#include "formats/gguf.h"
#include "text/pretokenizer.h"
#include "text/vocab.h"

namespace ferry {

namespace {

// A special-token id key: absent -> -1. Out of range is an error, except for padding, which
// several published conversions set to n_vocab and which generation never uses.
int32_t read_special_id(const GgufFile& file, const std::string& key, int32_t n_tokens, bool lenient) {
  const std::optional<int64_t> id = file.opt_int(key);
  if (!id) return -1;
  if (*id < 0 || *id >= n_tokens) {
    if (lenient) return -1;
    fail(ErrorKind::Format, "{}: {} = {} is outside the vocabulary of {} tokens; fix the tokenizer metadata",
         file.path(), key, *id, n_tokens);
  }
  return static_cast<int32_t>(*id);
}

std::vector<std::pair<std::string, std::string>> read_merges(const GgufFile& file) {
  const std::string key = "tokenizer.ggml.merges";
  if (!file.has(key)) {
    fail(ErrorKind::Format, "{}: a gpt2 (byte-level BPE) vocabulary needs '{}', which is missing", file.path(), key);
  }
  const std::vector<std::string> lines = file.get_string_array(key);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    // "left right"; searching from 1 keeps a left part that is itself a space intact (as llama.cpp).
    const size_t space = lines[i].find(' ', 1);
    if (space == std::string::npos || space + 1 >= lines[i].size()) {
      fail(ErrorKind::Format, "{}: {}[{}] = \"{}\" is not a merge of the form \"left right\"", file.path(), key, i,
           lines[i]);
    }
    merges.emplace_back(lines[i].substr(0, space), lines[i].substr(space + 1));
  }
  return merges;
}

// GGUF has no per-token match options; llama.cpp sets the ones Phi-3's tokenizer.json has (its
// added tokens swallow the white space after them) by the model's name.
void set_token_flags(const GgufFile& file, Vocab& vocab) {
  std::string name = file.opt_string("general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
  vocab.token_flags.assign(vocab.tokens.size(), 0);
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const auto type = static_cast<TokenType>(vocab.types[id]);
    const std::string& text = vocab.tokens[id];
    const bool special = type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown;
    if ((special || text == "</s>") && text != "<unk>" && text != "<s>" && text != "<|endoftext|>") {
      vocab.token_flags[id] = kAddedRStrip;
    }
  }
}

}  // namespace

Vocab vocab_from_gguf(const GgufFile& file) {
  Vocab vocab;
  vocab.source = file.path();

  const std::string model = file.get_string("tokenizer.ggml.model");
  if (model == "llama") {
    vocab.kind = Vocab::Kind::Spm;
  } else if (model == "gpt2") {
    vocab.kind = Vocab::Kind::Bpe;
  } else {
    fail(ErrorKind::Unsupported,
         "{}: tokenizer.ggml.model = \"{}\" is not supported; ferry reads \"llama\" (sentencepiece) and \"gpt2\" "
         "(byte-level BPE) vocabularies",
         file.path(), model);
  }

  vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
  const auto n_tokens = static_cast<int32_t>(vocab.tokens.size());
  if (n_tokens == 0) fail(ErrorKind::Format, "{}: tokenizer.ggml.tokens is empty", file.path());

  if (file.has("tokenizer.ggml.scores")) {
    vocab.scores = file.get_f32_array("tokenizer.ggml.scores");
  } else {
    vocab.scores.assign(vocab.tokens.size(), 0.0f);
  }
  if (file.has("tokenizer.ggml.token_type")) {
    vocab.types = file.get_i32_array("tokenizer.ggml.token_type");
  } else {
    vocab.types.assign(vocab.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  }
  if (vocab.kind == Vocab::Kind::Bpe) vocab.merges = read_merges(file);

  vocab.bos = read_special_id(file, "tokenizer.ggml.bos_token_id", n_tokens, false);
  vocab.eos = read_special_id(file, "tokenizer.ggml.eos_token_id", n_tokens, false);
  vocab.unk = read_special_id(file, "tokenizer.ggml.unknown_token_id", n_tokens, false);
  vocab.pad = read_special_id(file, "tokenizer.ggml.padding_token_id", n_tokens, true);
  vocab.eot = read_special_id(file, "tokenizer.ggml.eot_token_id", n_tokens, false);
  vocab.eom = read_special_id(file, "tokenizer.ggml.eom_token_id", n_tokens, false);

  const bool spm = vocab.kind == Vocab::Kind::Spm;
  vocab.pre = file.opt_string("tokenizer.ggml.pre").value_or("");
  bool default_add_bos = spm && vocab.bos >= 0;
  if (!spm) {
    GgufPreTokenizer pre = pre_tokenizer_for_gguf(vocab.pre, file.path());
    vocab.pre_tokenizers = std::move(pre.steps);
    vocab.ignore_merges = pre.ignore_merges;
    default_add_bos = pre.add_bos && vocab.bos >= 0;
  }
  // Defaults as llama.cpp's: sentencepiece vocabularies add bos and a dummy space prefix unless
  // told otherwise; byte-level ones do neither (but Llama-3 style ones add bos). An explicit
  // add_bos_token = true without a bos id is reported by validate().
  vocab.add_bos = file.opt_bool("tokenizer.ggml.add_bos_token").value_or(default_add_bos);
  vocab.add_eos = file.opt_bool("tokenizer.ggml.add_eos_token").value_or(false);
  vocab.add_space_prefix = spm && file.opt_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  vocab.byte_fallback = true;
  vocab.chat_template = file.opt_string("tokenizer.chat_template").value_or("");
  set_token_flags(file, vocab);

  finalize_special_tokens(vocab);
  vocab.validate();
  return vocab;
}

}  // namespace ferry
