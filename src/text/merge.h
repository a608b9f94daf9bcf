// The two BPE merge loops, on UTF-8 text split into characters. Both return the final symbols as
// views into the input; mapping symbols to ids (and byte fallback) is the tokenizer's job.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace ferry {

// sentencepiece BPE as llama.cpp's llm_tokenizer_spm runs it: repeatedly merge the adjacent pair
// whose concatenation is a token with the highest score (the leftmost pair on equal scores).
// `score_of` returns the score of a mergeable token, nullopt when the text is not one.
using ScoreLookup = std::function<std::optional<float>(std::string_view)>;
std::vector<std::string_view> merge_by_score(std::string_view text, const ScoreLookup& score_of);

// Rank-ordered BPE (GPT-2, tokenizers' BPE model): repeatedly merge the adjacent pair with the
// lowest merge rank (the leftmost pair on equal ranks). `rank_of` returns the rank of the merge
// (left, right), or -1 when there is none.
using RankLookup = std::function<int64_t(std::string_view left, std::string_view right)>;
std::vector<std::string_view> merge_by_rank(std::string_view text, const RankLookup& rank_of);

}  // namespace ferry
