// The generation loop: prompt -> logits -> sampler -> stop rules -> streamed text.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/session.h"
#include "text/sampling.h"
#include "text/stop.h"
#include "text/tokenizer.h"

namespace ferry {

// The tokenizer a checkpoint carries: the GGUF's embedded vocabulary, or tokenizer.json in the
// model directory. nullopt when there is none (token ids still work).
std::optional<Tokenizer> load_checkpoint_tokenizer(const Checkpoint& ckpt);

// Every end-of-generation id: the checkpoint's (generation_config.json / GGUF eos, eot, eom)
// together with the tokenizer's.
std::vector<int32_t> end_of_generation_ids(const Checkpoint& ckpt, const Tokenizer* tokenizer);

struct GenerateOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;             // fixed-length runs for benchmarks
  const Checkpoint* source = nullptr;  // named (and searched) when the logits are not finite
  // Raised (by a Ctrl-C handler, another thread): the reply ends before the next token. Not reset.
  const std::atomic<bool>* interrupt = nullptr;
};

// Throws Error(Format) when `logits` hold a NaN or an infinity: the model, not ferry, is the cause.
// With `source` the message names the checkpoint and its tensors that hold non-finite values
// (checked only now, on the failure path), or says every weight is finite and the activations
// overflow.
void refuse_non_finite_logits(std::span<const float> logits, const Checkpoint* source);

struct GenerateResult {
  std::vector<int32_t> ids;  // generated ids (the stopping EOG id is not included)
  std::string text;          // their text, without a matched stop string
  // Why it ended: the stop rules' verdict, or Continue when one of these came first.
  StopRules::Verdict stop = StopRules::Verdict::Continue;
  bool context_full = false;  // every row of the session's context is used
  bool interrupted = false;   // GenerateOptions::interrupt was raised
  double prompt_seconds = 0;
  double generate_seconds = 0;  // all decode steps after the prompt
  int prompt_tokens = 0;
};

// Why generation ended, as `generate` and its --json print it: "eog", "stop_string",
// "max_tokens", "context" or "interrupted".
const char* stop_name(const GenerateResult& result);

// Streams text as it becomes final (never half a UTF-8 character, never the start of a possible
// stop string). `tokenizer` may be null: then text stays empty and only ids are produced.
using TextSink = std::function<void(std::string_view)>;

// Generation ends at the first of: an end-of-generation id, a stop string, max_tokens, the
// context's last row (the prompt must fit the context: Error(Usage) otherwise), or the interrupt
// flag (checked before each token).
GenerateResult generate(Session& session, const Tokenizer* tokenizer, std::span<const int32_t> prompt,
                        const std::vector<int32_t>& eog_ids, const GenerateOptions& options,
                        const TextSink& on_text = {});

}  // namespace ferry
