#include "text/stop.h"

#include <algorithm>

#include "core/error.h"

namespace ferry {

StopRules::StopRules(std::vector<int32_t> eog_ids, std::vector<std::string> stop_strings, int max_tokens,
                     bool ignore_eos)
    : eog_ids_(std::move(eog_ids)),
      stop_strings_(std::move(stop_strings)),
      max_tokens_(max_tokens),
      ignore_eos_(ignore_eos) {
  std::sort(eog_ids_.begin(), eog_ids_.end());
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    if (stop_strings_[i].empty()) {
      fail(ErrorKind::Usage, "stop string {} is empty; an empty stop string would end generation at once", i);
    }
    longest_stop_ = std::max(longest_stop_, stop_strings_[i].size());
  }
}

void StopRules::reset() {
  n_tokens_ = 0;
  searched_up_to_ = 0;
  stop_offset_ = std::string_view::npos;
  matched_.clear();
}

StopRules::Verdict StopRules::on_token(int32_t id, std::string_view generated) {
  ++n_tokens_;
  if (!ignore_eos_ && std::binary_search(eog_ids_.begin(), eog_ids_.end(), id)) return Verdict::StopEog;

  if (!stop_strings_.empty()) {
    // Only a match that ends in the new text can be new: start where the last search could not
    // have seen a whole stop string. (If the caller's text shrank, search it all again.)
    if (searched_up_to_ > generated.size()) searched_up_to_ = 0;
    const size_t from = searched_up_to_ >= longest_stop_ ? searched_up_to_ - longest_stop_ + 1 : 0;
    size_t best = std::string_view::npos;
    for (const std::string& stop : stop_strings_) {
      const size_t at = generated.find(stop, from);
      if (at < best) {
        best = at;
        matched_ = stop;
      }
    }
    searched_up_to_ = generated.size();
    if (best != std::string_view::npos) {
      stop_offset_ = best;
      return Verdict::StopString;
    }
  }

  if (max_tokens_ > 0 && n_tokens_ >= max_tokens_) return Verdict::StopMaxTokens;
  return Verdict::Continue;
}

size_t StopRules::hold_back(std::string_view generated) const {
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    // The longest k < |stop| such that generated ends with stop[0, k).
    const size_t max_k = std::min(stop.size() - 1, generated.size());
    for (size_t k = max_k; k > hold; --k) {
      if (generated.substr(generated.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

}  // namespace ferry
