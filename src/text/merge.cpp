#include "text/merge.h"

#include <queue>

#include "text/utf8.h"

namespace ferry {

namespace {

// A doubly linked list of symbols over the text; a merged-away symbol has length 0.
struct Symbol {
  size_t offset = 0;
  size_t length = 0;
  int prev = -1;
  int next = -1;
};

std::vector<Symbol> split_into_chars(std::string_view text) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t length = utf8::char_length(text.substr(offset));
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({offset, length, index - 1, offset + length < text.size() ? index + 1 : -1});
    offset += length;
  }
  return symbols;
}

// A candidate merge of symbols[left] and symbols[right] as they were when it was queued.
template <typename Priority>
struct Candidate {
  Priority priority;
  int left;
  int right;
  size_t left_length;
  size_t right_length;
};

// Runs the merge loop. `priority_of(left, right)` gives a pair's priority (nullopt: no merge);
// `before(a, b)` is true when a must be merged before b.
template <typename Priority, typename PriorityOf, typename Before>
std::vector<std::string_view> run_merges(std::string_view text, PriorityOf priority_of, Before before) {
  std::vector<Symbol> symbols = split_into_chars(text);
  if (symbols.empty()) return {};

  using C = Candidate<Priority>;
  const auto later = [&](const C& a, const C& b) {  // the queue's top is the pair merged first
    if (before(a.priority, b.priority)) return false;
    if (before(b.priority, a.priority)) return true;
    return a.left > b.left;
  };
  std::priority_queue<C, std::vector<C>, decltype(later)> queue(later);
  const auto view = [&](int i) { return text.substr(symbols[i].offset, symbols[i].length); };
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    if (const std::optional<Priority> p = priority_of(view(left), view(right))) {
      queue.push({*p, left, right, symbols[left].length, symbols[right].length});
    }
  };

  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i - 1), static_cast<int>(i));

  while (!queue.empty()) {
    const C top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Skip a pair made stale by an earlier merge of either side.
    if (left.length != top.left_length || right.length != top.right_length || left.next != top.right) continue;

    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }

  std::vector<std::string_view> out;
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(view(i));
  return out;
}

}  // namespace

std::vector<std::string_view> merge_by_score(std::string_view text, const ScoreLookup& score_of) {
  return run_merges<float>(
      text,
      [&](std::string_view left, std::string_view right) -> std::optional<float> {
        // left and right are adjacent in `text`, so their concatenation is a view too.
        return score_of(std::string_view(left.data(), left.size() + right.size()));
      },
      [](float a, float b) { return a > b; });
}

std::vector<std::string_view> merge_by_rank(std::string_view text, const RankLookup& rank_of) {
  return run_merges<int64_t>(
      text,
      [&](std::string_view left, std::string_view right) -> std::optional<int64_t> {
        const int64_t rank = rank_of(left, right);
        return rank >= 0 ? std::optional<int64_t>(rank) : std::nullopt;
      },
      [](int64_t a, int64_t b) { return a < b; });
}

}  // namespace ferry
