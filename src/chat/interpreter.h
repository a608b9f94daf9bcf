// Walks a parsed template and renders it, following the reference renderer's evaluation rules
// (scoping, loop variables, macro argument binding, operator semantics) so that output matches
// it byte for byte. Filters, tests and methods live in builtins.cpp; globals in globals.cpp.
//
// Rendering is bounded: evaluation steps, nesting depth, string and output sizes and list lengths
// all have limits, so no template (or fuzzer input) can make it run or grow without end.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"
#include "chat/value.h"

namespace ferry::chat {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;        // the rendered prompt, and any one string
  uint64_t max_steps = 50'000'000;                   // expressions and statements evaluated
  int max_depth = 400;                               // nested evaluation (expressions, blocks, calls)
  size_t max_list_length = size_t{1} << 22;          // items in one list (range(), +)
  uint64_t max_allocated_bytes = uint64_t{1} << 30;  // strings, lists, dicts and scopes made in all
};

// One scope. Scopes live as long as the render (the interpreter owns them), so a function value
// may keep a pointer to the scope it was made in.
struct Env {
  Env* parent = nullptr;
  OrderedMap vars;

  Env* resolve(std::string_view name);
};

class Interpreter {
 public:
  Interpreter(const SourceName& source, const RenderLimits& limits);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Declares a context variable in the global scope (the reference refuses to redeclare one,
  // including the globals: true, none, range, namespace, ...).
  void declare(const std::string& name, Value value);
  // Renders the program. Errors carry the template's name and the line being evaluated.
  std::string run(const NodeList& program);

  // --- used by builtins ---
  Env* new_env(Env* parent);
  Namespace* new_namespace();
  Value evaluate(const Node& node, Env* env);
  // Positional values (with * expanded) and keyword values (with ** expanded), in the
  // reference's order: every positional first.
  void evaluate_arguments(const NodeList& args, Env* env, std::vector<Value>& positional, OrderedMap& keywords);
  void check_string_size(size_t bytes) const;
  void check_list_length(size_t length) const;
  const RenderLimits& limits() const { return limits_; }

 private:
  // Signals for {% break %} / {% continue %}: unwind to the loop like the reference's exceptions.
  struct BreakSignal {};
  struct ContinueSignal {};

  void render_block(const NodeList& statements, Env* env, std::string& out);
  void render_statement(const Node& node, Env* env, std::string& out);
  void append(std::string& out, std::string_view piece);

  void render_if(const Node& node, Env* env, std::string& out);
  void render_for(const Node& node, Env* env, std::string& out);
  void evaluate_set(const Node& node, Env* env);
  void define_macro(const Node& node, Env* env);
  Value evaluate_call_block(const Node& node, Env* env);

  Value evaluate_binary(const Node& node, Env* env);
  Value evaluate_unary(const Node& node, Env* env);
  Value evaluate_member(const Node& node, Env* env);
  Value evaluate_slice(const Value& object, const Node& slice, Env* env);
  Value evaluate_call(const Node& node, Env* env);
  Value evaluate_test(const Node& node, Env* env);
  Value evaluate_object_literal(const Node& node, Env* env);
  Value lookup(const std::string& name, Env* env);

  // builtins.cpp
  Value apply_filter(const Value& operand, const Node& filter, Env* env);
  Value apply_named_filter(const Value& operand, const std::string& name, Env* env);
  Value apply_call_filter(const Value& operand, const Node& call, Env* env);
  Value property_of(const Value& object, const std::string& name);  // methods and .length
  // A test by name (`is defined`, selectattr's "equalto"); `argument` is its second operand.
  bool run_test(const std::string& name, const Value& operand, const Value* argument);

  // globals.cpp
  void declare_globals();
  Value make_macro(const Node& macro);
  void bind_macro_arguments(const std::string& display_name, const NodeList& params, bool wants_kwargs,
                            bool wants_varargs, std::vector<Value> args, Env* scope);

  friend class StepGuard;
  class StepGuard;

  SourceName source_;
  RenderLimits limits_;
  ValueBudget budget_;
  std::deque<Env> envs_;
  std::deque<Namespace> namespaces_;
  Env* global_ = nullptr;
  Value namespace_function_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int current_line_ = 0;
};

// Whether a macro or call block body reads `kwargs` / `varargs` before declaring them (the
// reference then collects surplus keyword / positional arguments into them).
struct SpecialArguments {
  bool kwargs = false;
  bool varargs = false;
};
SpecialArguments find_special_arguments(const NodeList& params, const NodeList& body);

// Shared by the builtins: "x.y.0" paths of the sort/map filters.
Value attribute_path(const Value& item, const std::string& path);
// compareRuntimeValues: numbers (and booleans) with numbers, strings with strings.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

}  // namespace ferry::chat
