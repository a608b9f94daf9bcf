// Template source -> tokens, as the reference renderer (@huggingface/jinja) splits it.
//
// Before tokenizing, the source goes through the reference's fixed preprocessing: one trailing
// newline dropped, lstrip_blocks (spaces and tabs before a block tag at the start of a line),
// trim_blocks (the newline after a block tag), and transformers' {% generation %} markers
// removed. Every token remembers the line of the original source it came from, for errors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ferry::chat {

enum class TokenType {
  Text,             // template text between tags
  NumericLiteral,   // 123, 1.5, -4 (a sign glued on where it cannot be a binary operator)
  StringLiteral,    // 'text' or "text", escapes resolved
  Identifier,       // names and keywords alike
  Equals,           // =
  OpenParen,        // (
  CloseParen,       // )
  OpenStatement,    // {%
  CloseStatement,   // %}
  OpenExpression,   // {{
  CloseExpression,  // }}
  OpenSquareBracket,
  CloseSquareBracket,
  OpenCurlyBracket,
  CloseCurlyBracket,
  Comma,
  Dot,
  Colon,
  Pipe,
  AdditiveOperator,        // + - ~
  MultiplicativeOperator,  // * / // %
  PowerOperator,           // **
  ComparisonOperator,      // < > <= >= == !=
  UnaryOperator,           // a lone - or + in prefix position
  Comment,                 // {# ... #}
  End,                     // past the last token (never stored; what the parser sees at the end)
};

const char* token_type_name(TokenType type);

struct Token {
  TokenType type = TokenType::End;
  std::string value;
  int line = 0;  // 1-based line in the original source
};

// Names the template in error messages: "chat template <origin>, line <n>: <what>".
struct SourceName {
  std::string origin;
};

[[noreturn]] void template_error(ErrorKind kind, const SourceName& source, int line, const std::string& what);

// `source` must be well-formed UTF-8 (js::sanitize_utf8). Error(Format) on input the reference
// rejects too: an unterminated string, comment or tag, an unknown escape, a stray character.
std::vector<Token> tokenize(std::string_view source, const SourceName& name);

}  // namespace ferry::chat
