// Levenshtein distance, for "did you mean ...?" suggestions in error messages.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace ferry {

size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or "" when none is within max(2, |word| / 3) edits (a guess
// that far off would mislead more than help).
std::string nearest_word(std::string_view word, std::span<const std::string> candidates);

}  // namespace ferry
