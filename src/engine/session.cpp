#include "engine/session.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace ferry {

namespace {
// Step shapes whose graphs a session keeps: decode, and a few prompt lengths.
constexpr size_t kKeptStepGraphs = 4;
}  // namespace

Session::Session(const ModelSpec& spec, const Placement& placement, const WeightStore& weights, int64_t context,
                 int64_t max_step_tokens)
    : spec_(spec), executor_(placement, weights, states_), context_(context), max_step_tokens_(max_step_tokens) {
  if (context <= 0) fail(ErrorKind::Usage, "the context must hold at least one token, got {}", context);
  if (max_step_tokens <= 0) fail(ErrorKind::Usage, "a step must take at least one token, got {}", max_step_tokens);
}

size_t Session::peak_bytes(const std::string& device) const {
  for (const auto& [name, peak] : peaks_) {
    if (name == device) return peak;
  }
  return 0;
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

Session::StepGraph& Session::step_graph(int64_t n_tokens, bool all_logits) {
  auto it = std::find_if(step_graphs_.begin(), step_graphs_.end(),
                         [&](const auto& s) { return s->n_tokens == n_tokens && s->all_logits == all_logits; });
  if (it != step_graphs_.end()) {
    std::rotate(it, it + 1, step_graphs_.end());  // most recently used last
    return *step_graphs_.back();
  }
  StepShape shape;
  shape.n_tokens = n_tokens;
  shape.kv_capacity = context_;
  shape.all_logits = all_logits;
  auto s = std::make_unique<StepGraph>(n_tokens, all_logits, build_decoder_graph(spec_, shape));
  const Graph& g = s->graph.graph();
  if (g.outputs().size() != 1 || g.value(g.outputs()[0]).dtype != DType::F32) {
    fail(ErrorKind::Internal, "a decoder step must have one f32 output (its logits)");
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (std::holds_alternative<AttentionParams>(g.nodes()[i].params)) s->attention_nodes.push_back(static_cast<int>(i));
  }
  s->tokens = Tensor::host(DType::I32, Shape{n_tokens}, "tokens");
  s->positions = Tensor::host(DType::I32, Shape{n_tokens}, "positions");
  s->inputs = {{"tokens", s->tokens}, {"positions", s->positions}};
  if (step_graphs_.size() == kKeptStepGraphs) step_graphs_.erase(step_graphs_.begin());
  step_graphs_.push_back(std::move(s));
  return *step_graphs_.back();
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
  // Long prompts go in chunks, so no step holds more activations than the plan reserved.
  if (n > max_step_tokens_) {
    std::vector<float> all;
    for (int64_t start = 0; start < n; start += max_step_tokens_) {
      const auto len = static_cast<size_t>(std::min(max_step_tokens_, n - start));
      const auto at = static_cast<size_t>(start);
      std::vector<float> part = eval_step(tokens.subspan(at, len), positions.subspan(at, len), all_logits);
      if (all_logits) {
        all.insert(all.end(), part.begin(), part.end());
      } else {
        all = std::move(part);
      }
    }
    return all;
  }
  return eval_step(tokens, positions, all_logits);
}

std::vector<float> Session::eval_step(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                      bool all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  StepGraph& step = step_graph(n, all_logits);
  for (int node : step.attention_nodes) {
    AttentionParams p = std::get<AttentionParams>(step.graph.graph().nodes()[static_cast<size_t>(node)].params);
    p.kv_offset = n_past_;
    step.graph.set_params(node, p);
  }
  std::memcpy(step.tokens.data(), tokens.data(), tokens.size_bytes());
  std::memcpy(step.positions.data(), positions.data(), positions.size_bytes());

  // The executor copies the logits from their device straight into the vector returned.
  const Value& out = step.graph.graph().value(step.graph.graph().outputs()[0]);
  std::vector<float> logits(static_cast<size_t>(out.shape.numel()));
  Tensor into = Tensor::view(Storage::view(logits.data(), logits.size() * sizeof(float), nullptr), 0, out.dtype,
                             out.shape, out.name);
  executor_.run(step.graph, step.inputs, std::span<Tensor>(&into, 1));
  for (const auto& d : executor_.stats().devices) {
    auto it = std::find_if(peaks_.begin(), peaks_.end(), [&](const auto& p) { return p.first == d.device; });
    if (it == peaks_.end()) {
      peaks_.emplace_back(d.device, d.peak_bytes);
    } else {
      it->second = std::max(it->second, d.peak_bytes);
    }
  }

  n_past_ += n;
  int32_t max_pos = positions[0];
  for (int32_t p : positions) max_pos = std::max(max_pos, p);
  next_pos_ = std::max<int64_t>(next_pos_, static_cast<int64_t>(max_pos) + 1);
  return logits;
}

}  // namespace ferry
