#include "text/added_tokens.h"

#include <algorithm>

#include "text/normalizer.h"
#include "text/pipeline.h"
#include "text/utf8.h"

namespace ferry {

AddedTokenMatcher::AddedTokenMatcher() : nodes_(1), word_char_("\\w", "added-token single_word check") {}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  for (const auto& [b, next] : nodes_[node].children) {
    if (b == byte) return next;
  }
  return -1;
}

void AddedTokenMatcher::add(std::string_view text, int32_t id, uint8_t flags, bool special) {
  if (text.empty()) return;
  int32_t node = 0;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(byte, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  if (nodes_[node].entry >= 0) return;  // a repeated text keeps its first (lowest) id
  nodes_[node].entry = static_cast<int32_t>(entries_.size());
  entries_.push_back({id, flags, special});
}

namespace {

// The character that ends just before `at` (one byte when the bytes there are not well-formed).
std::string_view char_before(std::string_view text, size_t at) {
  size_t start = at - 1;
  while (start > 0 && at - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  const std::string_view c = text.substr(start, at - start);
  return utf8::char_length(c) == c.size() ? c : text.substr(at - 1, 1);
}

size_t white_space_before(std::string_view text, size_t at, size_t floor) {
  while (at > floor) {
    const std::string_view c = char_before(text, at);
    const utf8::Decoded d = utf8::decode(c);
    if (d.status != utf8::Status::Ok || !unicode::is_white_space(d.codepoint)) break;
    at -= c.size();
  }
  return std::max(at, floor);
}

size_t white_space_after(std::string_view text, size_t at) {
  while (at < text.size()) {
    const utf8::Decoded d = utf8::decode(text.substr(at));
    if (d.status != utf8::Status::Ok || !unicode::is_white_space(d.codepoint)) break;
    at += d.length;
  }
  return at;
}

}  // namespace

// single_word: no word character right before or right after the token (tokenizers' \w$ / ^\w).
bool AddedTokenMatcher::is_word_boundary(std::string_view text, size_t start, size_t end) const {
  Regex::Match m;
  if (start > 0) {
    const std::string_view c = char_before(text, start);
    if (word_char_.find(c, 0, m) && m.start == 0 && m.end == c.size()) return false;
  }
  if (end < text.size()) {
    const std::string_view c = text.substr(end, utf8::char_length(text.substr(end)));
    if (word_char_.find(c, 0, m) && m.start == 0 && m.end == c.size()) return false;
  }
  return true;
}

std::vector<AddedTokenMatcher::Part> AddedTokenMatcher::split(std::string_view text, bool parse_special) const {
  std::vector<Part> parts;
  size_t consumed = 0;  // text before this is already in `parts`
  size_t at = 0;
  while (at < text.size()) {
    // The longest usable token starting here.
    int32_t best = -1;
    size_t best_end = 0;
    int32_t node = 0;
    for (size_t i = at; i < text.size(); ++i) {
      node = child(node, static_cast<unsigned char>(text[i]));
      if (node < 0) break;
      const int32_t e = nodes_[node].entry;
      if (e >= 0 && (parse_special || !entries_[e].special)) {
        best = e;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++at;
      continue;
    }
    const Entry& entry = entries_[best];
    if ((entry.flags & kAddedSingleWord) && !is_word_boundary(text, at, best_end)) {
      at = best_end;  // the match is dropped, and its text stays ordinary text
      continue;
    }
    size_t start = at;
    size_t end = best_end;
    if (entry.flags & kAddedLStrip) start = white_space_before(text, start, consumed);
    if (entry.flags & kAddedRStrip) end = white_space_after(text, end);
    if (start > consumed) parts.push_back({consumed, start, -1});
    parts.push_back({start, end, entry.id});
    consumed = end;
    at = end;
  }
  if (consumed < text.size()) parts.push_back({consumed, text.size(), -1});
  return parts;
}

}  // namespace ferry
