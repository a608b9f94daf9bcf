// Tokens -> syntax tree, with the grammar and operator precedence of the reference renderer
// (@huggingface/jinja), including where it differs from Python's Jinja (tests bind tighter than
// `*`, `**` is left-associative, membership chains with comparisons).
#pragma once

#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace ferry::chat {

// Nesting deeper than this (brackets, blocks, chained operators) is refused: it keeps the
// recursive parser and the tree walks within a bounded stack.
inline constexpr int kMaxParseDepth = 200;
// A parsed tree deeper than this (long operator or filter chains build depth without nesting)
// is refused too: the walks over the tree are recursive.
inline constexpr int kMaxTreeDepth = 1000;

// The program's top-level statements. Error(Format) for syntax errors, Error(Unsupported) for
// Jinja statements the reference does not have ({% include %}, {% raw %}, ...), both naming the
// line.
NodeList parse(const std::vector<Token>& tokens, const SourceName& name);

}  // namespace ferry::chat
