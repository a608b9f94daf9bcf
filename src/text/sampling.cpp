#include "text/sampling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ferry {

namespace {

// Descending logit, lower id first on exact ties: the one order every stage agrees on.
bool ranks_before(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

void Candidates::assign(const float* logits, int n_vocab) {
  items.resize(static_cast<size_t>(n_vocab));
  for (int i = 0; i < n_vocab; ++i) items[i] = {i, logits[i], 0.0f};
  sorted = false;
  selected = -1;
}

void Candidates::sort() {
  if (!sorted) std::sort(items.begin(), items.end(), ranks_before);
  sorted = true;
}

void Candidates::softmax() {
  sort();
  if (items.empty()) return;
  const double max_logit = items.front().logit;
  double sum = 0.0;
  for (const TokenCandidate& c : items) sum += std::exp(static_cast<double>(c.logit) - max_logit);
  for (TokenCandidate& c : items) c.p = static_cast<float>(std::exp(static_cast<double>(c.logit) - max_logit) / sum);
}

RepetitionPenalty::RepetitionPenalty(float penalty, int last_n) : penalty_(penalty), last_n_(last_n) {}

void RepetitionPenalty::accept(int32_t id) {
  if (last_n_ == 0) return;
  history_.push_back(id);
  if (last_n_ > 0 && history_.size() > static_cast<size_t>(last_n_)) history_.pop_front();
}

void RepetitionPenalty::apply(Candidates& candidates) {
  if (penalty_ == 1.0f || history_.empty()) return;
  std::vector<int32_t> seen(history_.begin(), history_.end());
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (TokenCandidate& c : candidates.items) {
    if (!std::binary_search(seen.begin(), seen.end(), c.id)) continue;
    c.logit = c.logit > 0.0f ? c.logit / penalty_ : c.logit * penalty_;
  }
  candidates.sorted = false;
}

void TopK::apply(Candidates& candidates) {
  if (k_ <= 0 || static_cast<size_t>(k_) >= candidates.items.size()) return;
  auto& items = candidates.items;
  if (!candidates.sorted) {
    std::partial_sort(items.begin(), items.begin() + k_, items.end(), ranks_before);
  }
  items.resize(static_cast<size_t>(k_));
  candidates.sorted = true;
}

void TopP::apply(Candidates& candidates) {
  if (p_ >= 1.0f || candidates.items.empty()) return;
  candidates.softmax();
  double cumulative = 0.0;
  size_t keep = candidates.items.size();
  for (size_t i = 0; i < candidates.items.size(); ++i) {
    cumulative += candidates.items[i].p;
    if (cumulative >= p_) {
      keep = i + 1;
      break;
    }
  }
  candidates.items.resize(keep);
}

void MinP::apply(Candidates& candidates) {
  if (p_ <= 0.0f || candidates.items.empty()) return;
  float max_logit = candidates.items.front().logit;
  for (const TokenCandidate& c : candidates.items) max_logit = std::max(max_logit, c.logit);
  // p_i >= p * p_max  <=>  logit_i >= max_logit + ln(p): no softmax needed.
  const float threshold = max_logit + std::log(p_);
  auto& items = candidates.items;
  items.erase(std::remove_if(items.begin(), items.end(), [&](const TokenCandidate& c) { return c.logit < threshold; }),
              items.end());
}

void Temperature::apply(Candidates& candidates) {
  if (t_ <= 0.0f) {  // the limit t -> 0: only the best token survives
    Greedy().apply(candidates);
    const TokenCandidate best = *std::find_if(candidates.items.begin(), candidates.items.end(),
                                              [&](const TokenCandidate& c) { return c.id == candidates.selected; });
    candidates.items.assign(1, best);
    candidates.selected = -1;
    return;
  }
  for (TokenCandidate& c : candidates.items) c.logit /= t_;
}

void Greedy::apply(Candidates& candidates) {
  if (candidates.items.empty()) return;
  const TokenCandidate* best = &candidates.items.front();
  for (const TokenCandidate& c : candidates.items) {
    if (ranks_before(c, *best)) best = &c;
  }
  candidates.selected = best->id;
}

void Draw::apply(Candidates& candidates) {
  if (candidates.items.empty()) return;
  candidates.softmax();
  double total = 0.0;
  for (const TokenCandidate& c : candidates.items) total += c.p;
  // 53 random bits -> a double in [0, 1), the same on every platform (std's distributions are not).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double target = u * total;
  double cumulative = 0.0;
  for (const TokenCandidate& c : candidates.items) {
    cumulative += c.p;
    if (target < cumulative) {
      candidates.selected = c.id;
      return;
    }
  }
  candidates.selected = candidates.items.back().id;  // rounding left target at the very end
}

int32_t SamplerChain::sample(const float* logits, int n_vocab) {
  if (n_vocab <= 0) fail(ErrorKind::Usage, "sampler: n_vocab is {}; it must be positive", n_vocab);
  bool any_finite = false;
  for (int i = 0; i < n_vocab; ++i) {
    if (std::isnan(logits[i]) || logits[i] == INFINITY) {
      fail(ErrorKind::Internal, "sampler: the logit of token {} is {}; the forward pass produced invalid values", i,
           logits[i]);
    }
    any_finite = any_finite || std::isfinite(logits[i]);
  }
  if (!any_finite) fail(ErrorKind::Internal, "sampler: every logit is -inf; no token can be chosen");

  candidates_.assign(logits, n_vocab);
  for (const auto& stage : stages_) {
    stage->apply(candidates_);
    if (candidates_.items.empty()) {
      fail(ErrorKind::Internal, "sampler: stage '{}' removed every candidate", stage->name());
    }
  }
  if (candidates_.selected < 0) {
    fail(ErrorKind::Internal, "sampler chain '{}' ended without choosing a token; its last stage must select one",
         describe());
  }
  return candidates_.selected;
}

void SamplerChain::accept(int32_t id) {
  for (const auto& stage : stages_) stage->accept(id);
}

void SamplerChain::reset() {
  for (const auto& stage : stages_) stage->reset();
}

std::string SamplerChain::describe() const {
  std::string out;
  for (const auto& stage : stages_) {
    if (!out.empty()) out += " -> ";
    out += stage->name();
  }
  return out;
}

Sampler::Sampler(SamplingParams params) : params_(params) {
  const auto check = [](bool ok, const char* what, double value, const char* rule) {
    if (!ok) fail(ErrorKind::Usage, "sampling: {} = {} is invalid; {}", what, value, rule);
  };
  check(!std::isnan(params.temperature), "temperature", params.temperature, "use 0 for greedy or a value > 0");
  check(params.top_p >= 0.0f && params.top_p <= 1.0f, "top_p", params.top_p, "it must be in [0, 1] (1 = off)");
  check(params.min_p >= 0.0f && params.min_p <= 1.0f, "min_p", params.min_p, "it must be in [0, 1] (0 = off)");
  check(params.repeat_penalty > 0.0f && std::isfinite(params.repeat_penalty), "repeat_penalty", params.repeat_penalty,
        "it must be > 0 (1 = off)");
  check(params.repeat_last_n >= -1, "repeat_last_n", params.repeat_last_n, "use -1 (all), 0 (off) or a count");

  if (params.repeat_penalty != 1.0f && params.repeat_last_n != 0) {
    chain_.add(std::make_unique<RepetitionPenalty>(params.repeat_penalty, params.repeat_last_n));
  }
  if (params.temperature <= 0.0f) {
    chain_.add(std::make_unique<Greedy>());
    return;
  }
  if (params.top_k > 0) chain_.add(std::make_unique<TopK>(params.top_k));
  if (params.top_p < 1.0f) chain_.add(std::make_unique<TopP>(params.top_p));
  if (params.min_p > 0.0f) chain_.add(std::make_unique<MinP>(params.min_p));
  chain_.add(std::make_unique<Temperature>(params.temperature));
  chain_.add(std::make_unique<Draw>(params.seed));
}

}  // namespace ferry
