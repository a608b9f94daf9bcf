#include "chat/parser.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <set>
#include <string_view>

namespace ferry::chat {

const char* node_kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::Text:
      return "text";
    case NodeKind::Comment:
      return "comment";
    case NodeKind::If:
      return "if";
    case NodeKind::For:
      return "for";
    case NodeKind::Break:
      return "break";
    case NodeKind::Continue:
      return "continue";
    case NodeKind::Set:
      return "set";
    case NodeKind::Macro:
      return "macro";
    case NodeKind::CallBlock:
      return "call block";
    case NodeKind::FilterBlock:
      return "filter block";
    case NodeKind::Integer:
      return "integer";
    case NodeKind::Float:
      return "float";
    case NodeKind::String:
      return "string";
    case NodeKind::Array:
      return "list";
    case NodeKind::Tuple:
      return "tuple";
    case NodeKind::Object:
      return "dict";
    case NodeKind::Identifier:
      return "name";
    case NodeKind::Member:
      return "member access";
    case NodeKind::Call:
      return "call";
    case NodeKind::Binary:
      return "binary operator";
    case NodeKind::Unary:
      return "unary operator";
    case NodeKind::Filter:
      return "filter";
    case NodeKind::Test:
      return "test";
    case NodeKind::Select:
      return "conditional expression";
    case NodeKind::Ternary:
      return "conditional expression";
    case NodeKind::Slice:
      return "slice";
    case NodeKind::KeywordArg:
      return "keyword argument";
    case NodeKind::Spread:
      return "*argument";
    case NodeKind::KeywordSpread:
      return "**argument";
  }
  return "node";
}

Node::~Node() {
  std::vector<NodePtr> pending;
  const auto take = [&pending](NodeList& list) {
    for (NodePtr& child : list) {
      if (child) pending.push_back(std::move(child));
    }
    list.clear();
  };
  take(operands);
  take(params);
  take(body);
  take(alternate);
  while (!pending.empty()) {
    NodePtr node = std::move(pending.back());
    pending.pop_back();
    take(node->operands);
    take(node->params);
    take(node->body);
    take(node->alternate);
  }  // each node is freed here with no children left
}

namespace {

// Fails when a tree is deeper than kMaxTreeDepth, walking with an explicit stack.
void check_tree_depth(const NodeList& program, const SourceName& name) {
  std::vector<std::pair<const Node*, int>> stack;
  for (const NodePtr& n : program) stack.emplace_back(n.get(), 1);
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > kMaxTreeDepth) {
      template_error(ErrorKind::Unsupported, name, node->line,
                     fmt::format("expressions nested more than {} levels deep", kMaxTreeDepth));
    }
    for (const NodeList* list : {&node->operands, &node->params, &node->body, &node->alternate}) {
      for (const NodePtr& child : *list) {
        if (child) stack.emplace_back(child.get(), depth + 1);
      }
    }
  }
}

// Jinja statements that exist in Python's Jinja but not in the reference renderer.
bool is_known_jinja_statement(std::string_view name) {
  static const std::set<std::string_view> known = {"raw",  "include", "extends",    "block", "import", "from",
                                                   "with", "do",      "autoescape", "trans", "print",  "pluralize"};
  return known.count(name) > 0;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceName& name) : tokens_(tokens), name_(name) {}

  NodeList program() {
    NodeList body;
    while (current_ < tokens_.size()) body.push_back(parse_any());
    return body;
  }

 private:
  // Counts nesting on the way down so a hostile template cannot exhaust the stack.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) {
        p_.error_here(ErrorKind::Unsupported, fmt::format("nesting deeper than {} levels", kMaxParseDepth));
      }
    }
    ~DepthGuard() { --p_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser& p_;
  };

  const Token& peek(size_t ahead = 0) const {
    static const Token end{TokenType::End, "", 0};
    return current_ + ahead < tokens_.size() ? tokens_[current_ + ahead] : end;
  }
  int line() const {
    if (current_ < tokens_.size()) return tokens_[current_].line;
    return tokens_.empty() ? 0 : tokens_.back().line;
  }
  [[noreturn]] void error_here(ErrorKind kind, const std::string& what) const {
    template_error(kind, name_, line(), what);
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    const Token& t = peek();
    std::string got = token_type_name(t.type);
    if (t.type == TokenType::Identifier || (t.type != TokenType::Text && t.type != TokenType::End &&
                                            t.type != TokenType::StringLiteral && t.type != TokenType::Comment)) {
      got = "'" + t.value + "'";
    }
    error_here(ErrorKind::Format, fmt::format("expected {}, found {}", wanted, got));
  }

  bool is(TokenType type, size_t ahead = 0) const { return peek(ahead).type == type; }
  bool is_identifier(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::Identifier && peek(ahead).value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(TokenType::OpenStatement) || !is(TokenType::Identifier, 1)) return false;
    return std::find(names.begin(), names.end(), peek(1).value) != names.end();
  }
  const Token& expect(TokenType type, const std::string& wanted) {
    if (!is(type)) unexpected(wanted);
    return tokens_[current_++];
  }
  void expect_identifier(std::string_view name) {
    if (!is_identifier(name)) unexpected(fmt::format("'{}'", name));
    ++current_;
  }
  void expect_end_tag(std::string_view name) {
    if (current_ >= tokens_.size()) {
      error_here(ErrorKind::Format, fmt::format("the template ends before {{% {} %}}", name));
    }
    expect(TokenType::OpenStatement, fmt::format("{{% {} %}}", name));
    expect_identifier(name);
    expect(TokenType::CloseStatement, "'%}'");
  }
  // Statements until one of `names` opens a tag; the end of the template first is an error.
  NodeList parse_until(std::initializer_list<std::string_view> names, std::string_view opener) {
    NodeList body;
    while (!is_statement(names)) {
      if (current_ >= tokens_.size()) {
        error_here(ErrorKind::Format,
                   fmt::format("the template ends inside {{% {} %}} (missing {{% {} %}})", opener, *names.begin()));
      }
      body.push_back(parse_any());
    }
    return body;
  }

  NodePtr parse_any() {
    DepthGuard guard(*this);
    const Token& t = peek();
    switch (t.type) {
      case TokenType::Comment: {
        auto n = make_node(NodeKind::Comment, t.line);
        n->name = t.value;
        ++current_;
        return n;
      }
      case TokenType::Text: {
        auto n = make_node(NodeKind::Text, t.line);
        n->name = t.value;
        ++current_;
        return n;
      }
      case TokenType::OpenStatement:
        return parse_statement();
      case TokenType::OpenExpression: {
        ++current_;
        NodePtr e = parse_expression();
        expect(TokenType::CloseExpression, "'}}'");
        return e;
      }
      default:
        unexpected("text, '{{' or '{%'");
    }
  }

  NodePtr parse_statement() {
    ++current_;  // {%
    if (!is(TokenType::Identifier)) unexpected("a statement name");
    const Token& name_token = peek();
    const std::string name = name_token.value;
    const int line = name_token.line;
    ++current_;
    if (name == "set") return parse_set(line);
    if (name == "if") {
      NodePtr n = parse_if(line);
      expect_end_tag("endif");
      return n;
    }
    if (name == "macro") {
      NodePtr n = parse_macro(line);
      expect_end_tag("endmacro");
      return n;
    }
    if (name == "for") {
      NodePtr n = parse_for(line);
      expect_end_tag("endfor");
      return n;
    }
    if (name == "call") return parse_call_block(line);
    if (name == "break" || name == "continue") {
      expect(TokenType::CloseStatement, "'%}'");
      return make_node(name == "break" ? NodeKind::Break : NodeKind::Continue, line);
    }
    if (name == "filter") return parse_filter_block(line);
    --current_;
    if (is_known_jinja_statement(name)) {
      error_here(ErrorKind::Unsupported, fmt::format("the {{% {} %}} statement is not supported", name));
    }
    error_here(ErrorKind::Format, fmt::format("unknown or misplaced statement {{% {} %}}", name));
  }

  NodePtr parse_set(int line) {
    auto n = make_node(NodeKind::Set, line);
    n->operands.push_back(parse_expression_sequence(false));
    if (is(TokenType::Equals)) {
      ++current_;
      n->operands.push_back(parse_expression_sequence(false));
    } else {
      n->operands.push_back(nullptr);
      expect(TokenType::CloseStatement, "'=' or '%}'");
      n->body = parse_until({"endset"}, "set");
      expect(TokenType::OpenStatement, "{% endset %}");
      expect_identifier("endset");
    }
    expect(TokenType::CloseStatement, "'%}'");
    return n;
  }

  NodePtr parse_if(int line) {
    DepthGuard guard(*this);
    auto n = make_node(NodeKind::If, line);
    n->operands.push_back(parse_expression());
    expect(TokenType::CloseStatement, "'%}'");
    n->body = parse_until({"elif", "else", "endif"}, "if");
    if (is_statement({"elif"})) {
      const int elif_line = peek(1).line;
      current_ += 2;
      n->alternate.push_back(parse_if(elif_line));
    } else if (is_statement({"else"})) {
      current_ += 2;
      expect(TokenType::CloseStatement, "'%}'");
      n->alternate = parse_until({"endif"}, "if");
    }
    return n;
  }

  NodePtr parse_macro(int line) {
    auto n = make_node(NodeKind::Macro, line);
    NodePtr name = parse_primary();
    if (name->kind != NodeKind::Identifier) error_here(ErrorKind::Format, "expected a macro name after {% macro");
    n->name = name->name;
    n->params = parse_args(true);
    expect(TokenType::CloseStatement, "'%}'");
    n->body = parse_until({"endmacro"}, "macro");
    return n;
  }

  NodePtr parse_for(int line) {
    auto n = make_node(NodeKind::For, line);
    NodePtr target = parse_expression_sequence(true);
    if (target->kind != NodeKind::Identifier && target->kind != NodeKind::Tuple) {
      error_here(ErrorKind::Format,
                 fmt::format("expected a name or names to loop with, found a {}", node_kind_name(target->kind)));
    }
    n->operands.push_back(std::move(target));
    if (!is_identifier("in")) unexpected("'in'");
    ++current_;
    n->operands.push_back(parse_expression());
    expect(TokenType::CloseStatement, "'%}'");
    n->body = parse_until({"endfor", "else"}, "for");
    if (is_statement({"else"})) {
      current_ += 2;
      expect(TokenType::CloseStatement, "'%}'");
      n->alternate = parse_until({"endfor"}, "for");
    }
    return n;
  }

  NodePtr parse_call_block(int line) {
    auto n = make_node(NodeKind::CallBlock, line);
    if (is(TokenType::OpenParen)) {
      n->params = parse_args(true);
      n->has_caller_params = true;
    }
    NodePtr callee = parse_primary();
    if (callee->kind != NodeKind::Identifier) error_here(ErrorKind::Format, "expected a macro name after {% call");
    auto call = make_node(NodeKind::Call, callee->line);
    call->operands.push_back(std::move(callee));
    call->params = parse_args(false);
    n->operands.push_back(std::move(call));
    expect(TokenType::CloseStatement, "'%}'");
    n->body = parse_until({"endcall"}, "call");
    expect_end_tag("endcall");
    return n;
  }

  NodePtr parse_filter_block(int line) {
    auto n = make_node(NodeKind::FilterBlock, line);
    NodePtr filter = parse_primary();
    if (filter->kind == NodeKind::Identifier && is(TokenType::OpenParen)) filter = parse_call(std::move(filter));
    n->operands.push_back(std::move(filter));
    expect(TokenType::CloseStatement, "'%}'");
    n->body = parse_until({"endfilter"}, "filter");
    expect_end_tag("endfilter");
    return n;
  }

  // a, b, c -> Tuple; a alone -> a. `primary` restricts items to primary expressions (for loop
  // targets).
  NodePtr parse_expression_sequence(bool primary) {
    const int line = this->line();
    NodePtr first = primary ? parse_primary() : parse_expression();
    if (!is(TokenType::Comma)) return first;
    auto tuple = make_node(NodeKind::Tuple, line);
    tuple->operands.push_back(std::move(first));
    while (true) {
      ++current_;  // ,
      tuple->operands.push_back(primary ? parse_primary() : parse_expression());
      if (!is(TokenType::Comma)) break;
    }
    return tuple;
  }

  NodePtr parse_expression() { return parse_if_expression(); }

  NodePtr parse_if_expression() {
    DepthGuard guard(*this);
    NodePtr value = parse_or();
    if (!is_identifier("if")) return value;
    const int line = peek().line;
    ++current_;
    NodePtr test = parse_or();
    if (is_identifier("else")) {
      ++current_;
      auto n = make_node(NodeKind::Ternary, line);
      n->operands.push_back(std::move(test));
      n->operands.push_back(std::move(value));
      n->operands.push_back(parse_if_expression());
      return n;
    }
    auto n = make_node(NodeKind::Select, line);
    n->operands.push_back(std::move(value));
    n->operands.push_back(std::move(test));
    return n;
  }

  NodePtr binary(std::string op, int line, NodePtr left, NodePtr right) {
    auto n = make_node(NodeKind::Binary, line);
    n->name = std::move(op);
    n->operands.push_back(std::move(left));
    n->operands.push_back(std::move(right));
    return n;
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (is_identifier("or")) {
      const int line = peek().line;
      ++current_;
      left = binary("or", line, std::move(left), parse_and());
    }
    return left;
  }

  NodePtr parse_and() {
    NodePtr left = parse_not();
    while (is_identifier("and")) {
      const int line = peek().line;
      ++current_;
      left = binary("and", line, std::move(left), parse_not());
    }
    return left;
  }

  NodePtr parse_not() {
    DepthGuard guard(*this);
    // As in the reference: a `not` after a complete negation starts over (`not a not b` is `not b`).
    NodePtr negation;
    while (is_identifier("not")) {
      const int line = peek().line;
      ++current_;
      auto n = make_node(NodeKind::Unary, line);
      n->name = "not";
      n->operands.push_back(parse_not());
      negation = std::move(n);
    }
    return negation ? std::move(negation) : parse_comparison();
  }

  NodePtr parse_comparison() {
    NodePtr left = parse_additive();
    while (true) {
      std::string op;
      const int line = peek().line;
      if (is_identifier("not") && is_identifier("in", 1)) {
        op = "not in";
        current_ += 2;
      } else if (is_identifier("in")) {
        op = "in";
        ++current_;
      } else if (is(TokenType::ComparisonOperator)) {
        op = tokens_[current_++].value;
      } else {
        break;
      }
      left = binary(op, line, std::move(left), parse_additive());
    }
    return left;
  }

  NodePtr parse_additive() {
    NodePtr left = parse_multiplicative();
    while (is(TokenType::AdditiveOperator)) {
      const Token& op = tokens_[current_++];
      left = binary(op.value, op.line, std::move(left), parse_multiplicative());
    }
    return left;
  }

  NodePtr parse_multiplicative() {
    NodePtr left = parse_power();
    while (is(TokenType::MultiplicativeOperator)) {
      const Token& op = tokens_[current_++];
      left = binary(op.value, op.line, std::move(left), parse_power());
    }
    return left;
  }

  NodePtr parse_power() {
    NodePtr left = parse_test();
    while (is(TokenType::PowerOperator)) {
      const Token& op = tokens_[current_++];
      left = binary(op.value, op.line, std::move(left), parse_test());
    }
    return left;
  }

  NodePtr parse_test() {
    NodePtr operand = parse_filter();
    while (is_identifier("is")) {
      const int line = peek().line;
      ++current_;
      const bool negate = is_identifier("not");
      if (negate) ++current_;
      NodePtr test = parse_primary();
      if (test->kind != NodeKind::Identifier) error_here(ErrorKind::Format, "expected a test name after 'is'");
      auto n = make_node(NodeKind::Test, line);
      n->name = test->name;
      n->flag = negate;
      n->operands.push_back(std::move(operand));
      operand = std::move(n);
    }
    return operand;
  }

  NodePtr parse_filter() {
    NodePtr operand = parse_unary_sign();
    while (is(TokenType::Pipe)) {
      const int line = peek().line;
      ++current_;
      NodePtr filter = parse_primary();
      if (filter->kind != NodeKind::Identifier) error_here(ErrorKind::Format, "expected a filter name after '|'");
      if (is(TokenType::OpenParen)) filter = parse_call(std::move(filter));
      auto n = make_node(NodeKind::Filter, line);
      n->operands.push_back(std::move(operand));
      n->operands.push_back(std::move(filter));
      operand = std::move(n);
    }
    return operand;
  }

  NodePtr parse_unary_sign() {
    DepthGuard guard(*this);
    const Token& t = peek();
    if ((t.type == TokenType::UnaryOperator || t.type == TokenType::AdditiveOperator) &&
        (t.value == "-" || t.value == "+")) {
      ++current_;
      auto n = make_node(NodeKind::Unary, t.line);
      n->name = t.value;
      n->operands.push_back(parse_unary_sign());
      return n;
    }
    NodePtr member = parse_member(parse_primary());
    if (is(TokenType::OpenParen)) return parse_call(std::move(member));
    return member;
  }

  NodePtr parse_call(NodePtr callee) {
    DepthGuard guard(*this);
    auto call = make_node(NodeKind::Call, callee->line);
    call->operands.push_back(std::move(callee));
    call->params = parse_args(false);
    NodePtr expr = parse_member(std::move(call));
    if (is(TokenType::OpenParen)) expr = parse_call(std::move(expr));
    return expr;
  }

  // ( args ) of a call (parameters == false) or a macro's parameter list.
  NodeList parse_args(bool parameters) {
    expect(TokenType::OpenParen, "'('");
    NodeList args;
    std::set<std::string> names;
    bool saw_keyword = false;
    bool saw_spread = false;
    while (!is(TokenType::CloseParen)) {
      if (current_ >= tokens_.size()) unexpected("')'");
      const bool keyword_spread = is(TokenType::PowerOperator);
      const bool spread = is(TokenType::MultiplicativeOperator) && peek().value == "*";
      const int line = peek().line;
      if (parameters && (keyword_spread || spread)) {
        error_here(ErrorKind::Format, "argument unpacking (* or **) is not allowed in a parameter list");
      }
      if (keyword_spread) {
        ++current_;
        auto n = make_node(NodeKind::KeywordSpread, line);
        n->operands.push_back(parse_expression());
        args.push_back(std::move(n));
        if (is(TokenType::Comma)) ++current_;
        if (!is(TokenType::CloseParen)) error_here(ErrorKind::Format, "'**' must be applied to the last argument");
        break;
      }
      NodePtr arg;
      if (spread) {
        if (saw_spread) error_here(ErrorKind::Format, "only one '*' argument unpacking is allowed");
        saw_spread = true;
        ++current_;
        arg = make_node(NodeKind::Spread, line);
        arg->operands.push_back(parse_expression());
      } else {
        arg = parse_expression();
        if (is(TokenType::Equals)) {
          ++current_;
          if (arg->kind != NodeKind::Identifier) {
            error_here(ErrorKind::Format,
                       parameters ? "expected a parameter name before '='" : "expected a keyword name before '='");
          }
          auto kw = make_node(NodeKind::KeywordArg, arg->line);
          kw->name = arg->name;
          kw->operands.push_back(parse_expression());
          arg = std::move(kw);
        }
        if (parameters) {
          if (arg->kind != NodeKind::Identifier && arg->kind != NodeKind::KeywordArg) {
            error_here(ErrorKind::Format, "expected a parameter name");
          }
          if (!names.insert(arg->name).second) {
            error_here(ErrorKind::Format, fmt::format("duplicate parameter name '{}'", arg->name));
          }
        }
        if (arg->kind == NodeKind::KeywordArg) {
          saw_keyword = true;
        } else if (saw_keyword) {
          error_here(ErrorKind::Format, parameters ? "a parameter without a default follows one with a default"
                                                   : "a positional argument follows a keyword argument");
        } else if (saw_spread) {
          error_here(ErrorKind::Format, "a positional argument follows '*' argument unpacking");
        }
      }
      args.push_back(std::move(arg));
      if (is(TokenType::Comma)) ++current_;
    }
    expect(TokenType::CloseParen, "')'");
    return args;
  }

  // Inside [ ]: an index, or a slice a:b:c with any part omitted.
  NodePtr parse_subscript(int line) {
    NodeList parts;
    bool is_slice = false;
    while (!is(TokenType::CloseSquareBracket)) {
      if (current_ >= tokens_.size()) unexpected("']'");
      if (is(TokenType::Colon)) {
        parts.push_back(nullptr);
        ++current_;
        is_slice = true;
      } else {
        parts.push_back(parse_expression());
        if (is(TokenType::Colon)) {
          ++current_;
          is_slice = true;
        }
      }
    }
    if (parts.empty()) error_here(ErrorKind::Format, "expected an index or slice inside []");
    if (!is_slice) return std::move(parts[0]);
    if (parts.size() > 3) error_here(ErrorKind::Format, "a slice has at most three parts (start:stop:step)");
    auto n = make_node(NodeKind::Slice, line);
    for (auto& p : parts) n->operands.push_back(std::move(p));
    return n;
  }

  NodePtr parse_member(NodePtr object) {
    while (is(TokenType::Dot) || is(TokenType::OpenSquareBracket)) {
      DepthGuard guard(*this);
      const Token& op = tokens_[current_++];
      const bool computed = op.type == TokenType::OpenSquareBracket;
      NodePtr property;
      if (computed) {
        property = parse_subscript(op.line);
        expect(TokenType::CloseSquareBracket, "']'");
      } else {
        property = parse_primary();
        if (property->kind != NodeKind::Identifier && property->kind != NodeKind::Integer) {
          error_here(ErrorKind::Format, "expected a name or an integer after '.'");
        }
      }
      auto n = make_node(NodeKind::Member, op.line);
      n->flag = computed;
      n->operands.push_back(std::move(object));
      n->operands.push_back(std::move(property));
      object = std::move(n);
    }
    return object;
  }

  NodePtr parse_primary() {
    DepthGuard guard(*this);
    if (current_ >= tokens_.size()) error_here(ErrorKind::Format, "the template ends inside an expression");
    const Token& t = tokens_[current_++];
    switch (t.type) {
      case TokenType::NumericLiteral: {
        const bool is_float = t.value.find('.') != std::string::npos;
        auto n = make_node(is_float ? NodeKind::Float : NodeKind::Integer, t.line);
        const char* first = t.value.data();
        if (*first == '+') ++first;  // Number("+5") is 5; from_chars takes no plus sign
        double v = 0;
        const auto res = std::from_chars(first, t.value.data() + t.value.size(), v);
        if (res.ec == std::errc::result_out_of_range) v = (t.value[0] == '-' ? -1 : 1) * HUGE_VAL;
        n->number = v;
        return n;
      }
      case TokenType::StringLiteral: {
        auto n = make_node(NodeKind::String, t.line);
        n->name = t.value;
        while (is(TokenType::StringLiteral)) n->name += tokens_[current_++].value;
        return n;
      }
      case TokenType::Identifier: {
        auto n = make_node(NodeKind::Identifier, t.line);
        n->name = t.value;
        return n;
      }
      case TokenType::OpenParen: {
        NodePtr e = parse_expression_sequence(false);
        expect(TokenType::CloseParen, "')'");
        return e;
      }
      case TokenType::OpenSquareBracket: {
        auto n = make_node(NodeKind::Array, t.line);
        while (!is(TokenType::CloseSquareBracket)) {
          if (current_ >= tokens_.size()) unexpected("']'");
          n->operands.push_back(parse_expression());
          if (is(TokenType::Comma)) ++current_;
        }
        ++current_;
        return n;
      }
      case TokenType::OpenCurlyBracket: {
        auto n = make_node(NodeKind::Object, t.line);
        while (!is(TokenType::CloseCurlyBracket)) {
          if (current_ >= tokens_.size()) unexpected("'}'");
          n->operands.push_back(parse_expression());
          expect(TokenType::Colon, "':' between a key and its value");
          n->operands.push_back(parse_expression());
          if (is(TokenType::Comma)) ++current_;
        }
        ++current_;
        return n;
      }
      default:
        --current_;
        unexpected("an expression");
    }
  }

  const std::vector<Token>& tokens_;
  const SourceName& name_;
  size_t current_ = 0;
  int depth_ = 0;
};

}  // namespace

NodeList parse(const std::vector<Token>& tokens, const SourceName& name) {
  NodeList program = Parser(tokens, name).program();
  check_tree_depth(program, name);
  return program;
}

}  // namespace ferry::chat
