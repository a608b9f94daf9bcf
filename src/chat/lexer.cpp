#include "chat/lexer.h"

#include <array>
#include <utility>

#include "chat/js_text.h"

namespace ferry::chat {

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::Text:
      return "text";
    case TokenType::NumericLiteral:
      return "number";
    case TokenType::StringLiteral:
      return "string";
    case TokenType::Identifier:
      return "name";
    case TokenType::Equals:
      return "'='";
    case TokenType::OpenParen:
      return "'('";
    case TokenType::CloseParen:
      return "')'";
    case TokenType::OpenStatement:
      return "'{%'";
    case TokenType::CloseStatement:
      return "'%}'";
    case TokenType::OpenExpression:
      return "'{{'";
    case TokenType::CloseExpression:
      return "'}}'";
    case TokenType::OpenSquareBracket:
      return "'['";
    case TokenType::CloseSquareBracket:
      return "']'";
    case TokenType::OpenCurlyBracket:
      return "'{'";
    case TokenType::CloseCurlyBracket:
      return "'}'";
    case TokenType::Comma:
      return "','";
    case TokenType::Dot:
      return "'.'";
    case TokenType::Colon:
      return "':'";
    case TokenType::Pipe:
      return "'|'";
    case TokenType::AdditiveOperator:
    case TokenType::MultiplicativeOperator:
    case TokenType::PowerOperator:
    case TokenType::ComparisonOperator:
    case TokenType::UnaryOperator:
      return "operator";
    case TokenType::Comment:
      return "comment";
    case TokenType::End:
      return "end of template";
  }
  return "token";
}

void template_error(ErrorKind kind, const SourceName& source, int line, const std::string& what) {
  if (line > 0) fail(kind, "chat template {}, line {}: {}", source.origin, line, what);
  fail(kind, "chat template {}: {}", source.origin, what);
}

namespace {

// The source as code points, each with its original line; preprocessing and tokenizing work on
// this so that a character is one element (every character the grammar cares about is ASCII).
struct Chars {
  std::vector<uint32_t> cp;
  std::vector<int> line;

  size_t size() const { return cp.size(); }
  void push(uint32_t c, int l) {
    cp.push_back(c);
    line.push_back(l);
  }
};

Chars decode(std::string_view source) {
  Chars out;
  int line = 1;
  size_t pos = 0;
  while (pos < source.size()) {
    const uint32_t c = js::next_code_point(source, pos);
    out.push(c, line);
    if (c == '\n') ++line;
  }
  return out;
}

bool is_block_opener(const Chars& s, size_t i) {
  return i + 1 < s.size() && s.cp[i] == '{' && (s.cp[i + 1] == '#' || s.cp[i + 1] == '%' || s.cp[i + 1] == '-');
}

// /^[ \t]*({[#%-])/gm -> "$1": blanks before a block opener at the start of a line go.
Chars lstrip_blocks(const Chars& s) {
  Chars out;
  bool line_start = true;
  size_t i = 0;
  while (i < s.size()) {
    if (line_start) {
      size_t j = i;
      while (j < s.size() && (s.cp[j] == ' ' || s.cp[j] == '\t')) ++j;
      if (is_block_opener(s, j)) i = j;
    }
    if (i >= s.size()) break;
    line_start = js::is_line_terminator(s.cp[i]);
    out.push(s.cp[i], s.line[i]);
    ++i;
  }
  return out;
}

// /([#%-]})\n/g -> "$1": the newline right after a block closer goes.
Chars trim_blocks(const Chars& s) {
  Chars out;
  size_t i = 0;
  while (i < s.size()) {
    const uint32_t c = s.cp[i];
    if ((c == '#' || c == '%' || c == '-') && i + 2 < s.size() && s.cp[i + 1] == '}' && s.cp[i + 2] == '\n') {
      out.push(s.cp[i], s.line[i]);
      out.push(s.cp[i + 1], s.line[i + 1]);
      i += 3;
      continue;
    }
    out.push(c, s.line[i]);
    ++i;
  }
  return out;
}

bool matches_at(const Chars& s, size_t i, std::string_view word) {
  if (i + word.size() > s.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    if (s.cp[i + k] != static_cast<unsigned char>(word[k])) return false;
  }
  return true;
}

// transformers' {% generation %} / {% endgeneration %} markers only delimit the assistant's part
// for training masks; the reference drops them (and the blanks around them unless - says
// otherwise): /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs.
Chars remove_generation_tags(const Chars& s) {
  Chars out;
  size_t scan = 0;  // where the next regex search starts
  size_t copied = 0;
  for (size_t p = 0; p + 1 < s.size(); ++p) {
    if (p < scan || s.cp[p] != '{' || s.cp[p + 1] != '%') continue;
    size_t q = p + 2;
    const bool lstrip = q < s.size() && s.cp[q] == '-';
    if (lstrip) ++q;
    while (q < s.size() && js::is_space(s.cp[q])) ++q;
    if (matches_at(s, q, "endgeneration")) {
      q += 13;
    } else if (matches_at(s, q, "generation")) {
      q += 10;
    } else {
      continue;
    }
    while (q < s.size() && js::is_space(s.cp[q])) ++q;
    const bool rstrip = q < s.size() && s.cp[q] == '-';
    if (rstrip) ++q;
    if (!matches_at(s, q, "%}")) continue;
    q += 2;
    size_t before = p;
    while (before > scan && js::is_space(s.cp[before - 1])) --before;
    size_t after = q;
    while (after < s.size() && js::is_space(s.cp[after])) ++after;
    for (size_t k = copied; k < before; ++k) out.push(s.cp[k], s.line[k]);
    if (!lstrip) {
      for (size_t k = before; k < p; ++k) out.push(s.cp[k], s.line[k]);
    }
    if (!rstrip) {
      for (size_t k = q; k < after; ++k) out.push(s.cp[k], s.line[k]);
    }
    copied = after;
    scan = after;
    p = after == 0 ? 0 : after - 1;
  }
  for (size_t k = copied; k < s.size(); ++k) out.push(s.cp[k], s.line[k]);
  return out;
}

Chars preprocess(std::string_view source) {
  Chars s = decode(source);
  if (!s.cp.empty() && s.cp.back() == '\n') {
    s.cp.pop_back();
    s.line.pop_back();
  }
  return remove_generation_tags(trim_blocks(lstrip_blocks(s)));
}

bool is_word_char(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit_char(uint32_t c) {
  return c >= '0' && c <= '9';
}

// Multi-character tokens first where one is a prefix of another, as the reference orders them.
constexpr std::array<std::pair<std::string_view, TokenType>, 29> kOperators = {{
    {"{%", TokenType::OpenStatement},
    {"%}", TokenType::CloseStatement},
    {"{{", TokenType::OpenExpression},
    {"}}", TokenType::CloseExpression},
    {"(", TokenType::OpenParen},
    {")", TokenType::CloseParen},
    {"{", TokenType::OpenCurlyBracket},
    {"}", TokenType::CloseCurlyBracket},
    {"[", TokenType::OpenSquareBracket},
    {"]", TokenType::CloseSquareBracket},
    {",", TokenType::Comma},
    {".", TokenType::Dot},
    {":", TokenType::Colon},
    {"|", TokenType::Pipe},
    {"<=", TokenType::ComparisonOperator},
    {">=", TokenType::ComparisonOperator},
    {"==", TokenType::ComparisonOperator},
    {"!=", TokenType::ComparisonOperator},
    {"<", TokenType::ComparisonOperator},
    {">", TokenType::ComparisonOperator},
    {"+", TokenType::AdditiveOperator},
    {"-", TokenType::AdditiveOperator},
    {"~", TokenType::AdditiveOperator},
    {"**", TokenType::PowerOperator},
    {"*", TokenType::MultiplicativeOperator},
    {"//", TokenType::MultiplicativeOperator},
    {"/", TokenType::MultiplicativeOperator},
    {"%", TokenType::MultiplicativeOperator},
    {"=", TokenType::Equals},
}};

class Lexer {
 public:
  Lexer(Chars chars, const SourceName& name) : s_(std::move(chars)), name_(name) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) step();
    return std::move(tokens_);
  }

 private:
  uint32_t at(size_t i) const { return i < s_.size() ? s_.cp[i] : 0xFFFFFFFFu; }
  int line_at(size_t i) const {
    if (s_.size() == 0) return 1;
    return s_.line[std::min(i, s_.size() - 1)];
  }
  bool starts(std::string_view word) const { return matches_at(s_, pos_, word); }
  TokenType last_type() const { return tokens_.empty() ? TokenType::End : tokens_.back().type; }

  [[noreturn]] void error(const std::string& what) const {
    template_error(ErrorKind::Format, name_, line_at(pos_), what);
  }

  void push(TokenType type, std::string value, int line) { tokens_.push_back(Token{type, std::move(value), line}); }

  // The reference's consumeWhile: reads characters while `keep` holds, resolving backslash
  // escapes; reaching the end of the template inside is an error.
  template <typename Keep>
  std::string consume_while(Keep keep) {
    std::string out;
    while (keep(at(pos_))) {
      if (pos_ >= s_.size()) error("unexpected end of template inside a tag");
      if (at(pos_) == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) error("unexpected end of template after a backslash");
        const uint32_t escaped = s_.cp[pos_++];
        if (escaped == 'x' || escaped == 'u') {
          const size_t length = escaped == 'x' ? 2 : 4;
          uint32_t code = 0;
          for (size_t k = 0; k < length; ++k) {
            const uint32_t h = at(pos_ + k);
            uint32_t d = 16;
            if (h >= '0' && h <= '9') d = h - '0';
            if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
            if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
            if (d >= 16)
              error(fmt::format("invalid \\{} escape: {} hex digits expected", static_cast<char>(escaped), length));
            code = code * 16 + d;
          }
          pos_ += length;
          append_escaped_unit(out, code);
          continue;
        }
        flush_surrogate(out);
        switch (escaped) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'v':
            out += '\v';
            break;
          case '\'':
          case '"':
          case '\\':
            out += static_cast<char>(escaped);
            break;
          default: {
            std::string shown;
            js::append_utf8(shown, escaped);
            error(fmt::format("unknown escape \\{} in a string", shown));
          }
        }
        continue;
      }
      flush_surrogate(out);
      js::append_utf8(out, s_.cp[pos_++]);
      if (pos_ >= s_.size()) error("unexpected end of template inside a tag");
    }
    flush_surrogate(out);
    return out;
  }

  // \uD83D\uDE00 escapes are the two halves of one character; a half alone cannot be UTF-8.
  void append_escaped_unit(std::string& out, uint32_t unit) {
    if (pending_high_ != 0 && unit >= 0xDC00 && unit <= 0xDFFF) {
      js::append_utf8(out, 0x10000 + ((pending_high_ - 0xD800) << 10) + (unit - 0xDC00));
      pending_high_ = 0;
      return;
    }
    flush_surrogate(out);
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      pending_high_ = unit;
      return;
    }
    js::append_utf8(out, unit);
  }
  void flush_surrogate(std::string& out) {
    if (pending_high_ != 0) js::append_utf8(out, 0xFFFD);
    pending_high_ = 0;
  }

  void strip_trailing_whitespace() {
    if (!tokens_.empty() && tokens_.back().type == TokenType::Text) {
      tokens_.back().value = std::string(js::trim_end(tokens_.back().value));
      if (tokens_.back().value.empty()) tokens_.pop_back();
    }
  }
  void skip_leading_whitespace() {
    while (pos_ < s_.size() && js::is_space(s_.cp[pos_])) ++pos_;
  }

  void step() {
    const TokenType last = last_type();
    if (last == TokenType::End || last == TokenType::CloseStatement || last == TokenType::CloseExpression ||
        last == TokenType::Comment) {
      const size_t start = pos_;
      std::string text;
      while (pos_ < s_.size() &&
             !(at(pos_) == '{' && (at(pos_ + 1) == '%' || at(pos_ + 1) == '{' || at(pos_ + 1) == '#'))) {
        js::append_utf8(text, s_.cp[pos_++]);
      }
      if (!text.empty()) {
        push(TokenType::Text, std::move(text), line_at(start));
        return;
      }
    }

    if (at(pos_) == '{' && at(pos_ + 1) == '#') {
      const int line = line_at(pos_);
      pos_ += 2;
      const bool strip_before = at(pos_) == '-';
      if (strip_before) ++pos_;
      std::string comment;
      while (at(pos_) != '#' || at(pos_ + 1) != '}') {
        if (pos_ + 2 >= s_.size()) template_error(ErrorKind::Format, name_, line, "comment {# is never closed with #}");
        js::append_utf8(comment, s_.cp[pos_++]);
      }
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_after) comment.pop_back();
      if (strip_before) strip_trailing_whitespace();
      push(TokenType::Comment, std::move(comment), line);
      pos_ += 2;
      if (strip_after) skip_leading_whitespace();
      return;
    }

    if (starts("{%-")) {
      strip_trailing_whitespace();
      push(TokenType::OpenStatement, "{%", line_at(pos_));
      pos_ += 3;
      return;
    }
    if (starts("{{-")) {
      strip_trailing_whitespace();
      push(TokenType::OpenExpression, "{{", line_at(pos_));
      curly_depth_ = 0;
      pos_ += 3;
      return;
    }

    consume_while([](uint32_t c) { return js::is_space(c); });

    if (starts("-%}")) {
      push(TokenType::CloseStatement, "%}", line_at(pos_));
      pos_ += 3;
      skip_leading_whitespace();
      return;
    }
    if (starts("-}}")) {
      push(TokenType::CloseExpression, "}}", line_at(pos_));
      pos_ += 3;
      skip_leading_whitespace();
      return;
    }

    const uint32_t c = at(pos_);
    const int line = line_at(pos_);
    if (c == '-' || c == '+') {
      const TokenType prev = last_type();
      if (prev == TokenType::Text || prev == TokenType::End)
        error(fmt::format("unexpected '{}'", static_cast<char>(c)));
      const bool binary = prev == TokenType::Identifier || prev == TokenType::NumericLiteral ||
                          prev == TokenType::StringLiteral || prev == TokenType::CloseParen ||
                          prev == TokenType::CloseSquareBracket;
      if (!binary) {
        ++pos_;
        std::string num = consume_while(is_digit_char);
        if (!num.empty() && at(pos_) == '.' && is_digit_char(at(pos_ + 1))) {
          ++pos_;
          num += '.';  // two appends: GCC 12's -Wrestrict misreads "." + string
          num += consume_while(is_digit_char);
        }
        const bool is_number = !num.empty();
        push(is_number ? TokenType::NumericLiteral : TokenType::UnaryOperator,
             std::string(1, static_cast<char>(c)) + num, line);
        return;
      }
    }

    for (const auto& [seq, type] : kOperators) {
      if (seq == "}}" && curly_depth_ > 0) continue;
      if (!starts(seq)) continue;
      push(type, std::string(seq), line);
      if (type == TokenType::OpenExpression) curly_depth_ = 0;
      if (type == TokenType::OpenCurlyBracket) ++curly_depth_;
      if (type == TokenType::CloseCurlyBracket) --curly_depth_;
      pos_ += seq.size();
      return;
    }

    if (c == '\'' || c == '"') {
      ++pos_;
      std::string text = consume_while([c](uint32_t x) { return x != c; });
      push(TokenType::StringLiteral, std::move(text), line);
      ++pos_;
      return;
    }
    if (is_digit_char(c)) {
      std::string num = consume_while(is_digit_char);
      if (last_type() != TokenType::Dot && at(pos_) == '.' && is_digit_char(at(pos_ + 1))) {
        ++pos_;
        num += "." + consume_while(is_digit_char);
      }
      push(TokenType::NumericLiteral, std::move(num), line);
      return;
    }
    if (is_word_char(c)) {
      push(TokenType::Identifier, consume_while(is_word_char), line);
      return;
    }
    if (pos_ >= s_.size()) error("unexpected end of template inside a tag");
    std::string shown;
    js::append_utf8(shown, c);
    error(fmt::format("unexpected character '{}'", shown));
  }

  Chars s_;
  const SourceName& name_;
  size_t pos_ = 0;
  int curly_depth_ = 0;
  uint32_t pending_high_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const SourceName& name) {
  return Lexer(preprocess(source), name).run();
}

}  // namespace ferry::chat
