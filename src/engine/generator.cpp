#include "engine/generator.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "text/tokenizer_loader.h"
#include "text/vocab.h"

namespace ferry {

namespace fs = std::filesystem;

std::optional<Tokenizer> load_checkpoint_tokenizer(const Checkpoint& ckpt) {
  if (ckpt.is_gguf) {
    if (!ckpt.gguf->has("tokenizer.ggml.model")) return std::nullopt;
    return Tokenizer::from_vocab(vocab_from_gguf(*ckpt.gguf));
  }
  // tokenizer.json first, else a sentencepiece or tiktoken tokenizer.model (ChatGLM3, GLM-4).
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    const fs::path path = fs::path(ckpt.directory) / name;
    std::error_code ec;
    if (fs::exists(path, ec)) return load_tokenizer(path.string());
  }
  return std::nullopt;
}

std::vector<int32_t> end_of_generation_ids(const Checkpoint& ckpt, const Tokenizer* tokenizer) {
  std::vector<int32_t> ids = ckpt.config().eos_ids;
  if (tokenizer != nullptr) {
    for (int32_t id : tokenizer->vocab().eog_ids) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

namespace {

// Checkpoint tensors (float dtypes) holding a NaN or an infinity, the first `most` of them.
std::vector<std::string> non_finite_tensors(const Checkpoint& ckpt, size_t most) {
  std::vector<std::string> found;
  ThreadPool pool(1);
  for (const TensorRecord& r : ckpt.tensors.all()) {
    if (found.size() == most) break;
    if (r.dtype != DType::F32 && r.dtype != DType::F16 && r.dtype != DType::BF16) continue;
    const Tensor stored = r.view();
    const Tensor flat = stored.reshape(Shape{stored.numel()});
    std::vector<float> values(static_cast<size_t>(stored.numel()));
    Tensor into = Tensor::view(Storage::view(values.data(), values.size() * sizeof(float), nullptr), 0, DType::F32,
                               Shape{stored.numel()}, r.name);
    kernels::to_f32(flat, into, pool);
    if (std::any_of(values.begin(), values.end(), [](float x) { return !std::isfinite(x); })) found.push_back(r.name);
  }
  return found;
}

}  // namespace

void refuse_non_finite_logits(std::span<const float> logits, const Checkpoint* source) {
  const auto bad = std::find_if(logits.begin(), logits.end(), [](float x) { return !std::isfinite(x); });
  if (bad == logits.end()) return;
  const std::string what = fmt::format("the logits are not finite (token {} is {})", bad - logits.begin(), *bad);
  if (source == nullptr) {
    fail(ErrorKind::Format, "{}: the model's weights hold NaN or Inf values, or its activations overflow", what);
  }
  const std::vector<std::string> tensors = non_finite_tensors(*source, 5);
  if (tensors.empty()) {
    fail(ErrorKind::Format,
         "{}: {}; every float weight of the checkpoint is finite, so its activations overflow f32 (a damaged or "
         "wrongly converted checkpoint)",
         source->path, what);
  }
  fail(ErrorKind::Format,
       "{}: {}: the checkpoint holds NaN or Inf weights, e.g. in {}; the file is damaged or was "
       "saved from a diverged training run",
       source->path, what, fmt::join(tensors, ", "));
}

const char* stop_name(const GenerateResult& result) {
  if (result.context_full) return "context";
  if (result.interrupted) return "interrupted";
  switch (result.stop) {
    case StopRules::Verdict::StopEog:
      return "eog";
    case StopRules::Verdict::StopString:
      return "stop_string";
    case StopRules::Verdict::StopMaxTokens:
      return "max_tokens";
    case StopRules::Verdict::Continue:
      break;
  }
  return "none";
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

GenerateResult generate(Session& session, const Tokenizer* tokenizer, std::span<const int32_t> prompt,
                        const std::vector<int32_t>& eog_ids, const GenerateOptions& options, const TextSink& on_text) {
  if (prompt.empty()) fail(ErrorKind::Usage, "the prompt is empty: give --prompt text or --prompt-ids");
  if (options.max_tokens < 1) fail(ErrorKind::Usage, "--max-tokens must be at least 1, got {}", options.max_tokens);
  // The prompt must fit; the generation then runs until the context's last row is used (the last
  // sampled token is never fed back, so it needs no row).
  if (session.n_past() + static_cast<int64_t>(prompt.size()) > session.context()) {
    if (session.n_past() > 0) {
      fail(ErrorKind::Usage,
           "the prompt ({} tokens) does not fit the context of {} tokens after the {} cached; raise --ctx",
           prompt.size(), session.context(), session.n_past());
    }
    fail(ErrorKind::Usage,
         "the prompt ({} tokens) does not fit the context of {} tokens; raise --ctx or shorten the prompt",
         prompt.size(), session.context());
  }
  GenerateResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  Sampler sampler(options.sampling);
  for (int32_t id : prompt) sampler.accept(id);
  StopRules stops(eog_ids, options.stop_strings, options.max_tokens, options.ignore_eos);
  std::optional<StreamDecoder> decoder;
  if (tokenizer != nullptr) decoder.emplace(*tokenizer);

  auto start = std::chrono::steady_clock::now();
  std::vector<float> logits = session.eval(prompt);
  refuse_non_finite_logits(logits, options.source);
  result.prompt_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();

  // Padded vocabularies (ChatGLM's padded_vocab_size, Qwen2's 151936 rows) have logits for ids no
  // tokenizer knows: they are never sampled.
  const int n_sampled = tokenizer != nullptr ? std::min(session.vocab(), tokenizer->n_vocab()) : session.vocab();
  size_t emitted = 0;  // bytes of result.text already streamed
  for (;;) {
    if (options.interrupt != nullptr && options.interrupt->load()) {
      result.interrupted = true;
      break;
    }
    const int32_t id = sampler.sample(logits.data(), n_sampled);
    sampler.accept(id);
    if (decoder) result.text += decoder->push(id);
    const StopRules::Verdict verdict = stops.on_token(id, result.text);
    if (verdict == StopRules::Verdict::StopEog) {
      result.stop = verdict;
      break;
    }
    result.ids.push_back(id);
    if (verdict == StopRules::Verdict::StopString) {
      result.text.resize(stops.stop_offset());
      result.stop = verdict;
      break;
    }
    if (on_text) {
      const size_t safe = result.text.size() - stops.hold_back(result.text);
      if (safe > emitted) {
        on_text(std::string_view(result.text).substr(emitted, safe - emitted));
        emitted = safe;
      }
    }
    if (verdict == StopRules::Verdict::StopMaxTokens) {
      result.stop = verdict;
      break;
    }
    if (session.n_past() >= session.context()) {  // no row left to feed `id` back
      result.context_full = true;
      break;
    }
    logits = session.eval(std::vector<int32_t>{id});
    refuse_non_finite_logits(logits, options.source);
  }
  if (decoder && result.stop != StopRules::Verdict::StopString) result.text += decoder->flush();
  if (on_text && result.text.size() > emitted) on_text(std::string_view(result.text).substr(emitted));
  result.generate_seconds = seconds_since(start);
  return result;
}

}  // namespace ferry
