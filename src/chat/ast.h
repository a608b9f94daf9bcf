// The syntax tree of a chat template, with the node kinds of the reference renderer.
//
// One Node type for every kind keeps the tree easy to walk; which fields a kind uses is listed
// below. Every node knows its source line, for errors.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace ferry::chat {

enum class NodeKind {
  // statements
  Text,     // name: the text
  Comment,  // name: the comment
  If,       // operands[0]: test; body; alternate (an elif is a nested If alone in alternate)
  For,      // operands[0]: loop target (Identifier or Tuple); operands[1]: iterable (a Select
            // keeps its test); body; alternate: the else block
  Break,
  Continue,
  Set,          // operands[0]: target; operands[1]: value, or null with the value in body
  Macro,        // name; params; body
  CallBlock,    // operands[0]: the Call; params: the caller's parameters (has_caller_params); body
  FilterBlock,  // operands[0]: the filter (Identifier or Call); body
  // expressions
  Integer,        // number
  Float,          // number
  String,         // name: the value
  Array,          // operands: items
  Tuple,          // operands: items
  Object,         // operands: key, value, key, value, ...
  Identifier,     // name
  Member,         // operands[0]: object; operands[1]: property (Slice for [a:b]); flag: computed
  Call,           // operands[0]: callee; params: arguments
  Binary,         // name: operator; operands[0], operands[1]
  Unary,          // name: operator ("not", "-", "+"); operands[0]
  Filter,         // operands[0]: operand; operands[1]: filter (Identifier or Call)
  Test,           // operands[0]: operand; name: test; flag: negated
  Select,         // operands[0]: value; operands[1]: condition ("a if c" without else)
  Ternary,        // operands[0]: condition; operands[1]: if true; operands[2]: if false
  Slice,          // operands[0..2]: start, stop, step (null when omitted)
  KeywordArg,     // name; operands[0]: value (also a parameter with a default)
  Spread,         // operands[0]: *value
  KeywordSpread,  // operands[0]: **value
};

const char* node_kind_name(NodeKind kind);

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  NodeKind kind;
  int line = 0;
  std::string name;
  double number = 0;
  bool flag = false;
  bool has_caller_params = false;
  NodeList operands;  // may hold nulls (Slice, Set)
  NodeList params;
  NodeList body;
  NodeList alternate;

  Node(NodeKind k, int l) : kind(k), line(l) {}
  // Frees the subtree without recursion, so no tree can exhaust the stack on the way out.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  const Node* operand(size_t i) const { return i < operands.size() ? operands[i].get() : nullptr; }
};

inline NodePtr make_node(NodeKind kind, int line) {
  return std::make_unique<Node>(kind, line);
}

}  // namespace ferry::chat
