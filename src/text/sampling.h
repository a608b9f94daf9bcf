// Choosing the next token from a row of logits: a chain of small samplers sharing one interface,
// as llama.cpp's sampler chain (penalties -> top-k -> top-p -> min-p -> temperature -> draw).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ferry {

struct TokenCandidate {
  int32_t id;
  float logit;
  float p;  // probability; valid after Candidates::softmax()
};

// The tokens still in the running. Samplers shrink or reorder it, change logits, or pick one.
struct Candidates {
  std::vector<TokenCandidate> items;
  bool sorted = false;    // items are in descending logit order (ties: lower id first)
  int32_t selected = -1;  // the chosen id, set by a final sampler

  void assign(const float* logits, int n_vocab);
  void sort();     // descending logit, lower id first on ties
  void softmax();  // sorts, then sets p (over the current items)
};

class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual const char* name() const = 0;
  virtual void apply(Candidates& candidates) = 0;
  virtual void accept(int32_t /*id*/) {}  // a token entered the context (prompt or generated)
  virtual void reset() {}
};

// CTRL-style repetition penalty over the last `last_n` accepted ids (-1: all of them): each id
// that occurs there has a positive logit divided by `penalty` and a negative one multiplied by
// it, once however often it occurs. penalty 1 does nothing.
class RepetitionPenalty final : public SamplerStage {
 public:
  RepetitionPenalty(float penalty, int last_n);
  const char* name() const override { return "repetition-penalty"; }
  void apply(Candidates& candidates) override;
  void accept(int32_t id) override;
  void reset() override { history_.clear(); }

 private:
  float penalty_;
  int last_n_;
  std::deque<int32_t> history_;
};

// Keeps the k highest logits (ties: lower id). k <= 0 keeps all.
class TopK final : public SamplerStage {
 public:
  explicit TopK(int k) : k_(k) {}
  const char* name() const override { return "top-k"; }
  void apply(Candidates& candidates) override;

 private:
  int k_;
};

// Keeps the smallest prefix of the most probable tokens whose probabilities sum to >= p (always
// at least one). p >= 1 keeps all.
class TopP final : public SamplerStage {
 public:
  explicit TopP(float p) : p_(p) {}
  const char* name() const override { return "top-p"; }
  void apply(Candidates& candidates) override;

 private:
  float p_;
};

// Keeps the tokens whose probability is at least p times the largest one's. p <= 0 keeps all.
class MinP final : public SamplerStage {
 public:
  explicit MinP(float p) : p_(p) {}
  const char* name() const override { return "min-p"; }
  void apply(Candidates& candidates) override;

 private:
  float p_;
};

// Divides the logits by t (t > 0).
class Temperature final : public SamplerStage {
 public:
  explicit Temperature(float t) : t_(t) {}
  const char* name() const override { return "temperature"; }
  void apply(Candidates& candidates) override;

 private:
  float t_;
};

// Selects the highest logit, the lowest id on exact ties.
class Greedy final : public SamplerStage {
 public:
  const char* name() const override { return "greedy"; }
  void apply(Candidates& candidates) override;
};

// Draws from the softmax of the candidates with a generator seeded by `seed`, so the same seed and
// the same logits give the same ids on every platform.
class Draw final : public SamplerStage {
 public:
  explicit Draw(uint64_t seed) : seed_(seed), rng_(seed) {}
  const char* name() const override { return "draw"; }
  void apply(Candidates& candidates) override;
  void reset() override { rng_.seed(seed_); }

 private:
  uint64_t seed_;
  std::mt19937_64 rng_;
};

// Stages run in order; the last one must select a token.
class SamplerChain {
 public:
  void add(std::unique_ptr<SamplerStage> stage) { stages_.push_back(std::move(stage)); }
  // Error(Usage) for n_vocab <= 0; Error(Internal) when a logit is NaN or +inf (a broken
  // forward pass) or no stage selected a token.
  int32_t sample(const float* logits, int n_vocab);
  void accept(int32_t id);
  void reset();
  // "repetition-penalty -> top-k -> ... -> draw"
  std::string describe() const;
  const Candidates& last_candidates() const { return candidates_; }

 private:
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  Candidates candidates_;
};

struct SamplingParams {
  float temperature = 0.8f;     // <= 0: greedy
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int repeat_last_n = 64;       // ids the penalty looks back over; 0: off, -1: all
  uint64_t seed = 0x5EED'F3E1'7A11'0001ull;
};

// The standard chain for a SamplingParams: repetition penalty (if on), then greedy when
// temperature <= 0, else top-k, top-p, min-p, temperature and a seeded draw (the order
// llama.cpp's default chain uses: the filters see temperature-1 probabilities).
class Sampler {
 public:
  // Error(Usage) for out-of-range parameters (top_p or min_p outside [0, 1], repeat_penalty <= 0,
  // repeat_last_n < -1, a NaN anywhere).
  explicit Sampler(SamplingParams params);
  int32_t sample(const float* logits, int n_vocab) { return chain_.sample(logits, n_vocab); }
  // Feed every prompt id and every generated id, in order (the repetition penalty looks at them).
  void accept(int32_t id) { chain_.accept(id); }
  // Forgets the history and restarts the random sequence from the seed.
  void reset() { chain_.reset(); }
  const SamplingParams& params() const { return params_; }
  std::string describe() const { return chain_.describe(); }

 private:
  SamplingParams params_;
  SamplerChain chain_;
};

}  // namespace ferry
