#include "engine/session.h"

#include <cstring>

#include "core/error.h"

namespace ferry {

Session::Session(const ModelSpec& spec, const Placement& placement, const WeightStore& weights, int64_t context)
    : spec_(spec), executor_(placement, weights, states_), context_(context) {
  if (context <= 0) fail(ErrorKind::Usage, "the context must hold at least one token, got {}", context);
}

void Session::reset() {
  n_past_ = 0;
  next_pos_ = 0;
}

std::vector<float> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int32_t>(next_pos_ + static_cast<int64_t>(i));
  return eval(tokens, positions, all_logits);
}

std::vector<float> Session::eval(std::span<const int32_t> tokens, std::span<const int32_t> positions, bool all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail(ErrorKind::Usage, "nothing to evaluate: the token list is empty");
  if (positions.size() != tokens.size()) {
    fail(ErrorKind::Usage, "{} tokens but {} positions", tokens.size(), positions.size());
  }
  if (n_past_ + n > context_) {
    fail(ErrorKind::Usage,
         "the context is full: {} cached + {} new tokens exceed {} (raise --ctx or shorten the prompt/generation)",
         n_past_, n, context_);
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= spec_.config.vocab) {
      fail(ErrorKind::Usage, "token id {} is outside the vocabulary [0, {})", id, spec_.config.vocab);
    }
  }
  StepShape step;
  step.n_tokens = n;
  step.kv_offset = n_past_;
  step.kv_capacity = context_;
  step.all_logits = all_logits;
  const Graph graph = build_decoder_graph(spec_, step);

  Tensor tok = Tensor::host(DType::I32, Shape{n}, "tokens");
  Tensor pos = Tensor::host(DType::I32, Shape{n}, "positions");
  std::memcpy(tok.data(), tokens.data(), tokens.size_bytes());
  std::memcpy(pos.data(), positions.data(), positions.size_bytes());
  auto outputs = executor_.run(graph, {{"tokens", tok}, {"positions", pos}});

  n_past_ += n;
  int32_t max_pos = positions[0];
  for (int32_t p : positions) max_pos = std::max(max_pos, p);
  next_pos_ = std::max<int64_t>(next_pos_, static_cast<int64_t>(max_pos) + 1);

  const Tensor& logits = outputs.at("logits");
  const float* data = logits.data_as<float>();
  return std::vector<float>(data, data + logits.numel());
}

}  // namespace ferry
