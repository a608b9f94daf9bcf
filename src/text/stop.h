// When generation ends: an end-of-generation token, a stop string in the generated text, or the
// token budget. Also tells a streamer how much of the text's tail to hold back, because it might
// be the beginning of a stop string (which is never shown).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class StopRules {
 public:
  enum class Verdict { Continue, StopEog, StopString, StopMaxTokens };

  // eog_ids: Vocab::eog_ids. stop_strings: non-empty strings (Error(Usage) otherwise).
  // max_tokens: the most tokens to generate; <= 0 means no limit. ignore_eos: EOG ids do not
  // stop (fixed-length benchmarks); stop strings and max_tokens still do.
  StopRules(std::vector<int32_t> eog_ids, std::vector<std::string> stop_strings, int max_tokens, bool ignore_eos);

  // Call once per generated token, after appending its text: `generated` is all text generated so
  // far (not the prompt). Checks in order: EOG id, stop string, token budget.
  Verdict on_token(int32_t id, std::string_view generated);

  // After StopString: where the matched stop string starts in the generated text; the output is
  // generated.substr(0, stop_offset()). std::string_view::npos before a match.
  size_t stop_offset() const { return stop_offset_; }
  // After StopString: which stop string matched.
  const std::string& matched_stop_string() const { return matched_; }

  // Bytes at the end of `generated` that are the beginning of some stop string (the longest such
  // tail, shorter than the stop string itself): a streamer must not print them yet.
  size_t hold_back(std::string_view generated) const;

  int tokens_generated() const { return n_tokens_; }
  // Starts a new generation with the same rules.
  void reset();

 private:
  std::vector<int32_t> eog_ids_;  // sorted
  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;
  int max_tokens_;
  bool ignore_eos_;

  int n_tokens_ = 0;
  size_t searched_up_to_ = 0;  // text before this offset holds no complete stop string
  size_t stop_offset_ = std::string_view::npos;
  std::string matched_;
};

}  // namespace ferry
