#include "text/vocab.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace ferry {

namespace {

// Tokens that end generation, known by their text (the same list llama.cpp keeps in
// llama_vocab::load, since converters rarely record them all as ids).
constexpr std::array<std::string_view, 10> kEogTexts = {
    "<|eot_id|>", "<|im_end|>",      "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<|end_of_text|>", "<EOT>",   "_<EOT>",        "<｜end▁of▁sentence｜>",
};

// GLM-4 / ChatGLM end an assistant turn by starting the next one: its generation_config lists
// <|user|> and <|observation|> as eos ids. Both must be present, so other chat formats that have
// only a <|user|> token (Phi-3, Zephyr) are not affected.
constexpr std::string_view kGlmUser = "<|user|>";
constexpr std::string_view kGlmObservation = "<|observation|>";

void check_id(const Vocab& vocab, int32_t id, std::string_view what) {
  if (id < -1 || id >= vocab.size()) {
    fail(ErrorKind::Format, "{}: {} id {} is outside the vocabulary of {} tokens; fix the tokenizer metadata",
         vocab.source, what, id, vocab.size());
  }
}

}  // namespace

bool Vocab::is_eog(int32_t id) const {
  return std::binary_search(eog_ids.begin(), eog_ids.end(), id);
}

void Vocab::validate() const {
  if (tokens.empty()) fail(ErrorKind::Format, "{}: the vocabulary has no tokens", source);
  if (scores.size() != tokens.size()) {
    fail(ErrorKind::Format, "{}: {} scores for {} tokens; there must be one score per token", source, scores.size(),
         tokens.size());
  }
  if (types.size() != tokens.size()) {
    fail(ErrorKind::Format, "{}: {} token types for {} tokens; there must be one type per token", source, types.size(),
         tokens.size());
  }
  for (size_t id = 0; id < types.size(); ++id) {
    if (types[id] < 0 || types[id] > static_cast<int32_t>(TokenType::Byte)) {
      fail(ErrorKind::Format, "{}: token {} ('{}') has type {}; valid token types are 0..6", source, id, tokens[id],
           types[id]);
    }
  }
  check_id(*this, bos, "bos");
  check_id(*this, eos, "eos");
  check_id(*this, unk, "unknown-token");
  check_id(*this, pad, "padding");
  check_id(*this, eot, "end-of-turn");
  check_id(*this, eom, "end-of-message");
  for (int32_t id : eog_ids) {
    if (id < 0) fail(ErrorKind::Format, "{}: end-of-generation id {} is negative", source, id);
    check_id(*this, id, "end-of-generation");
  }
  for (const auto* ids : {&special_prefix, &special_suffix}) {
    for (int32_t id : *ids) {
      if (id < 0) fail(ErrorKind::Format, "{}: the post-processor template names token id {}", source, id);
      check_id(*this, id, "post-processor template");
    }
  }
  if (!token_flags.empty() && token_flags.size() != tokens.size()) {
    fail(ErrorKind::Format, "{}: {} added-token flags for {} tokens; there must be one per token", source,
         token_flags.size(), tokens.size());
  }
  if (!std::is_sorted(eog_ids.begin(), eog_ids.end()) ||
      std::adjacent_find(eog_ids.begin(), eog_ids.end()) != eog_ids.end()) {
    fail(ErrorKind::Usage, "{}: eog_ids must be sorted and unique (call finalize_special_tokens)", source);
  }
  if (add_bos && bos < 0) {
    fail(ErrorKind::Format, "{}: the tokenizer asks to add a bos token but names none; set the bos token id", source);
  }
  if (add_eos && eos < 0) {
    fail(ErrorKind::Format, "{}: the tokenizer asks to add an eos token but names none; set the eos token id", source);
  }
}

void finalize_special_tokens(Vocab& vocab, const std::vector<int64_t>& extra_eog) {
  std::vector<int32_t> eog = vocab.eog_ids;
  for (int32_t id : {vocab.eos, vocab.eot, vocab.eom}) {
    if (id >= 0) eog.push_back(id);
  }
  for (int64_t id : extra_eog) {
    if (id < 0 || id >= vocab.size()) {
      fail(ErrorKind::Format, "{}: end-of-generation id {} is outside the vocabulary of {} tokens", vocab.source, id,
           vocab.size());
    }
    eog.push_back(static_cast<int32_t>(id));
  }

  int32_t glm_user = -1, glm_observation = -1;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& text = vocab.tokens[id];
    if (text.size() < 5 || (text.front() != '<' && text.front() != '_')) continue;  // cheap filter
    if (std::find(kEogTexts.begin(), kEogTexts.end(), text) != kEogTexts.end()) {
      eog.push_back(id);
      // Like llama.cpp: an end token stored as a normal piece is a converter bug; treating it as
      // control keeps it out of decoded text.
      if (static_cast<size_t>(id) < vocab.types.size() && vocab.types[id] == static_cast<int32_t>(TokenType::Normal)) {
        vocab.types[id] = static_cast<int32_t>(TokenType::Control);
      }
    }
    if (text == kGlmUser) glm_user = id;
    if (text == kGlmObservation) glm_observation = id;
  }
  if (glm_user >= 0 && glm_observation >= 0) {
    eog.push_back(glm_user);
    eog.push_back(glm_observation);
  }

  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  vocab.eog_ids = std::move(eog);
}

}  // namespace ferry
