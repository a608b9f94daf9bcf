#include "chat/interpreter.h"

#include <cmath>
#include <exception>

#include "chat/js_text.h"
#include "core/error.h"

namespace ferry::chat {

Env* Env::resolve(std::string_view name) {
  for (Env* e = this; e != nullptr; e = e->parent) {
    if (e->vars.find(name) != nullptr) return e;
  }
  return nullptr;
}

// Counts a step and a level of nesting, and remembers the line being evaluated. On the way out
// of an exception the line is left as it is, so the error names the innermost construct.
class Interpreter::StepGuard {
 public:
  StepGuard(Interpreter& in, int line)
      : in_(in), saved_line_(in.current_line_), exceptions_(std::uncaught_exceptions()) {
    if (line > 0) in_.current_line_ = line;
    if (++in_.steps_ > in_.limits_.max_steps) {
      fail(ErrorKind::Unsupported, "rendering takes more than {} steps (a runaway loop?)", in_.limits_.max_steps);
    }
    if (++in_.depth_ > in_.limits_.max_depth) {
      --in_.depth_;
      fail(ErrorKind::Unsupported, "evaluation nested more than {} levels deep (runaway macro recursion?)",
           in_.limits_.max_depth);
    }
  }
  ~StepGuard() {
    --in_.depth_;
    if (std::uncaught_exceptions() == exceptions_) in_.current_line_ = saved_line_;
  }
  StepGuard(const StepGuard&) = delete;
  StepGuard& operator=(const StepGuard&) = delete;

 private:
  Interpreter& in_;
  int saved_line_;
  int exceptions_;
};

Interpreter::Interpreter(const SourceName& source, const RenderLimits& limits)
    : source_(source), limits_(limits), budget_(limits.max_allocated_bytes) {
  ValueBudgetScope scope(budget_);
  global_ = new_env(nullptr);
  declare_globals();
}

Interpreter::~Interpreter() = default;

Env* Interpreter::new_env(Env* parent) {
  budget_.charge(sizeof(Env));
  envs_.emplace_back();
  envs_.back().parent = parent;
  return &envs_.back();
}

Namespace* Interpreter::new_namespace() {
  budget_.charge(sizeof(Namespace));
  namespaces_.emplace_back();
  return &namespaces_.back();
}

void Interpreter::declare(const std::string& name, Value value) {
  budget_.charge(name.size() + sizeof(Value));
  if (name == "namespace" || global_->vars.find(name) != nullptr) {
    fail(ErrorKind::Usage, "the chat template variable '{}' is already defined (a built-in name); choose another name",
         name);
  }
  global_->vars.set(name, std::move(value));
}

std::string Interpreter::run(const NodeList& program) {
  ValueBudgetScope scope(budget_);
  try {
    std::string out;
    render_block(program, global_, out);
    return out;
  } catch (const BreakSignal&) {
    template_error(ErrorKind::Format, source_, current_line_, "{% break %} outside a loop");
  } catch (const ContinueSignal&) {
    template_error(ErrorKind::Format, source_, current_line_, "{% continue %} outside a loop");
  } catch (const Error& e) {
    template_error(e.kind(), source_, current_line_, e.what());
  }
}

void Interpreter::check_string_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    fail(ErrorKind::Unsupported, "a string longer than the {} byte limit", limits_.max_output_bytes);
  }
}

void Interpreter::check_list_length(size_t length) const {
  if (length > limits_.max_list_length) {
    fail(ErrorKind::Unsupported, "a list longer than the {} item limit", limits_.max_list_length);
  }
}

void Interpreter::append(std::string& out, std::string_view piece) {
  check_string_size(out.size() + piece.size());
  budget_.charge(piece.size());
  out += piece;
}

// --- statements ----------------------------------------------------------------------------------

void Interpreter::render_block(const NodeList& statements, Env* env, std::string& out) {
  for (const NodePtr& s : statements) render_statement(*s, env, out);
}

void Interpreter::render_statement(const Node& node, Env* env, std::string& out) {
  StepGuard guard(*this, node.line);
  switch (node.kind) {
    case NodeKind::Text:
      append(out, node.name);
      return;
    case NodeKind::Comment:
      return;
    case NodeKind::If:
      render_if(node, env, out);
      return;
    case NodeKind::For:
      render_for(node, env, out);
      return;
    case NodeKind::Set:
      evaluate_set(node, env);
      return;
    case NodeKind::Macro:
      define_macro(node, env);
      return;
    case NodeKind::Break:
      throw BreakSignal{};
    case NodeKind::Continue:
      throw ContinueSignal{};
    case NodeKind::CallBlock:
    case NodeKind::FilterBlock:
    default: {
      Value v;
      if (node.kind == NodeKind::CallBlock) {
        v = evaluate_call_block(node, env);
      } else if (node.kind == NodeKind::FilterBlock) {
        std::string body;
        render_block(node.body, env, body);
        v = apply_filter(string_value(std::move(body)), *node.operands[0], env);
      } else {
        v = evaluate(node, env);
      }
      if (v.kind != ValueKind::Null && v.kind != ValueKind::Undefined) append(out, to_display_string(v));
      return;
    }
  }
}

void Interpreter::render_if(const Node& node, Env* env, std::string& out) {
  const Value test = evaluate(*node.operands[0], env);
  render_block(truthy(test) ? node.body : node.alternate, env, out);
}

namespace {

// Binds a loop or set target: a name, or names unpacked from a list of the same length.
void assign_target(const Node& target, const Value& value, Env* scope) {
  if (target.kind == NodeKind::Identifier) {
    scope->vars.set(target.name, value);
    return;
  }
  for (size_t j = 0; j < target.operands.size(); ++j) {
    const Node& name = *target.operands[j];
    if (name.kind != NodeKind::Identifier) {
      fail(ErrorKind::Format, "cannot unpack into a {} (only names)", node_kind_name(name.kind));
    }
    scope->vars.set(name.name, value.items()[j]);
  }
}

void check_unpack(const Node& target, const Value& value, bool loop) {
  if (target.kind != NodeKind::Tuple) return;
  if (value.kind == ValueKind::Hole) hole_error("unpacking");
  // The reference unpacks only real lists in loops (not tuples), but any list-like in a set.
  const bool ok = loop ? value.kind == ValueKind::Array : value.is_array_like();
  if (!ok) fail(ErrorKind::Usage, "cannot unpack {} into {} names", a_kind(value.kind), target.operands.size());
  if (value.items().size() != target.operands.size()) {
    fail(ErrorKind::Usage, "too {} items to unpack: {} names, {} items",
         target.operands.size() > value.items().size() ? "few" : "many", target.operands.size(), value.items().size());
  }
}

}  // namespace

void Interpreter::render_for(const Node& node, Env* env, std::string& out) {
  Env* scope = new_env(env);
  const Node& target = *node.operands[0];
  const Node& iterable_node = *node.operands[1];
  const Node* condition = nullptr;
  Value iterable;
  if (iterable_node.kind == NodeKind::Select) {
    iterable = evaluate(*iterable_node.operands[0], scope);
    condition = iterable_node.operands[1].get();
  } else {
    iterable = evaluate(iterable_node, scope);
  }
  if (iterable.kind == ValueKind::Hole) hole_error("a for loop");
  if (!iterable.is_array_like() && !iterable.is_object_like()) {
    fail(ErrorKind::Usage, "a for loop needs a list or a dict, got {}", a_kind(iterable.kind));
  }
  std::vector<Value> source;
  if (iterable.is_object_like()) {
    for (const auto& entry : iterable.entries().entries()) source.push_back(string_value(entry.first));
  } else {
    source = iterable.items();
  }

  std::vector<Value> items;
  for (const Value& current : source) {
    check_unpack(target, current, true);
    if (condition != nullptr) {
      Env* loop_scope = new_env(scope);
      assign_target(target, current, loop_scope);
      if (!truthy(evaluate(*condition, loop_scope))) continue;
    }
    items.push_back(current);
  }

  bool iterated = false;
  const size_t n = items.size();
  for (size_t i = 0; i < n; ++i) {
    OrderedMap loop;
    loop.set("index", int_value(static_cast<double>(i + 1)));
    loop.set("index0", int_value(static_cast<double>(i)));
    loop.set("revindex", int_value(static_cast<double>(n - i)));
    loop.set("revindex0", int_value(static_cast<double>(n - i - 1)));
    loop.set("first", bool_value(i == 0));
    loop.set("last", bool_value(i == n - 1));
    loop.set("length", int_value(static_cast<double>(n)));
    loop.set("previtem", i > 0 ? items[i - 1] : undefined_value());
    loop.set("nextitem", i + 1 < n ? items[i + 1] : undefined_value());
    scope->vars.set("loop", object_value(std::move(loop)));
    assign_target(target, items[i], scope);
    // As in the reference, break and continue drop what the interrupted iteration rendered.
    const size_t mark = out.size();
    try {
      render_block(node.body, scope, out);
    } catch (const ContinueSignal&) {
      out.resize(mark);
      continue;
    } catch (const BreakSignal&) {
      out.resize(mark);
      break;
    }
    iterated = true;
  }
  if (!iterated) render_block(node.alternate, scope, out);
}

void Interpreter::evaluate_set(const Node& node, Env* env) {
  Value value;
  if (node.operands[1] != nullptr) {
    value = evaluate(*node.operands[1], env);
  } else {
    std::string body;
    render_block(node.body, env, body);
    value = string_value(std::move(body));
  }
  const Node& target = *node.operands[0];
  switch (target.kind) {
    case NodeKind::Identifier:
    case NodeKind::Tuple:
      check_unpack(target, value, false);
      assign_target(target, value, env);
      return;
    case NodeKind::Member: {
      const Value object = evaluate(*target.operands[0], env);
      if (object.kind != ValueKind::Namespace) {
        fail(ErrorKind::Usage, "cannot set an attribute of {}: only namespace() objects can be changed",
             a_kind(object.kind));
      }
      const Node& property = *target.operands[1];
      if (property.kind != NodeKind::Identifier) {
        fail(ErrorKind::Usage, "a namespace attribute to set must be a name, not a {}", node_kind_name(property.kind));
      }
      object.ns->map.set(property.name, std::move(value));
      return;
    }
    default:
      fail(ErrorKind::Format, "cannot assign to a {}", node_kind_name(target.kind));
  }
}

void Interpreter::define_macro(const Node& node, Env* env) {
  env->vars.set(node.name, make_macro(node));
}

Value Interpreter::evaluate_call_block(const Node& node, Env* env) {
  const SpecialArguments special = find_special_arguments(node.params, node.body);
  const Node* block = &node;
  Value caller = function_value("caller", [block, env, special](Interpreter& in, std::vector<Value>& args, Env*) {
    Env* scope = in.new_env(env);
    in.bind_macro_arguments("None", block->params, special.kwargs, special.varargs, args, scope);
    std::string out;
    in.render_block(block->body, scope, out);
    return string_value(std::move(out));
  });
  const Node& call = *node.operands[0];
  std::vector<Value> positional;
  OrderedMap keywords;
  evaluate_arguments(call.params, env, positional, keywords);
  positional.push_back(object_value(std::move(keywords), true));
  const Value fn = evaluate(*call.operands[0], env);
  if (fn.kind != ValueKind::Function) {
    fail(ErrorKind::Usage, "{{% call {}() %}}: '{}' is {}, not a macro", call.operands[0]->name, call.operands[0]->name,
         a_kind(fn.kind));
  }
  Env* call_env = new_env(env);
  call_env->vars.set("caller", std::move(caller));
  return fn.function->call(*this, positional, call_env);
}

// --- expressions ---------------------------------------------------------------------------------

Value Interpreter::lookup(const std::string& name, Env* env) {
  for (Env* e = env; e != nullptr; e = e->parent) {
    if (const Value* v = e->vars.find(name)) return v->kind == ValueKind::Hole ? undefined_value() : *v;
    // Every scope of the reference starts with its own `namespace`.
    if (name == "namespace") return namespace_function_;
  }
  return undefined_value();
}

Value Interpreter::evaluate(const Node& node, Env* env) {
  StepGuard guard(*this, node.line);
  switch (node.kind) {
    case NodeKind::Integer:
      return int_value(node.number);
    case NodeKind::Float:
      return float_value(node.number);
    case NodeKind::String:
    case NodeKind::Text:
      return string_value(node.name);
    case NodeKind::Array:
    case NodeKind::Tuple: {
      std::vector<Value> items;
      items.reserve(node.operands.size());
      for (const NodePtr& item : node.operands) items.push_back(evaluate(*item, env));
      return node.kind == NodeKind::Array ? array_value(std::move(items)) : tuple_value(std::move(items));
    }
    case NodeKind::Object:
      return evaluate_object_literal(node, env);
    case NodeKind::Identifier:
      return lookup(node.name, env);
    case NodeKind::Call:
      return evaluate_call(node, env);
    case NodeKind::Member:
      return evaluate_member(node, env);
    case NodeKind::Unary:
      return evaluate_unary(node, env);
    case NodeKind::Binary:
      return evaluate_binary(node, env);
    case NodeKind::Filter: {
      const Value operand = evaluate(*node.operands[0], env);
      return apply_filter(operand, *node.operands[1], env);
    }
    case NodeKind::Test:
      return evaluate_test(node, env);
    case NodeKind::Select: {
      if (!truthy(evaluate(*node.operands[1], env))) return undefined_value();
      return evaluate(*node.operands[0], env);
    }
    case NodeKind::Ternary:
      return truthy(evaluate(*node.operands[0], env)) ? evaluate(*node.operands[1], env)
                                                      : evaluate(*node.operands[2], env);
    default:
      fail(ErrorKind::Format, "a {} cannot be used as a value here", node_kind_name(node.kind));
  }
}

Value Interpreter::evaluate_object_literal(const Node& node, Env* env) {
  OrderedMap map;
  for (size_t i = 0; i + 1 < node.operands.size(); i += 2) {
    const Value key = evaluate(*node.operands[i], env);
    if (key.kind != ValueKind::String) fail(ErrorKind::Usage, "dict keys must be strings, got {}", a_kind(key.kind));
    map.set(key.str(), evaluate(*node.operands[i + 1], env));
  }
  return object_value(std::move(map));
}

void Interpreter::evaluate_arguments(const NodeList& args, Env* env, std::vector<Value>& positional,
                                     OrderedMap& keywords) {
  for (const NodePtr& arg : args) {
    if (arg->kind == NodeKind::Spread) {
      const Value v = evaluate(*arg->operands[0], env);
      if (!v.is_array_like()) fail(ErrorKind::Usage, "cannot unpack {} with *", a_kind(v.kind));
      for (const Value& item : v.items()) positional.push_back(item);
    } else if (arg->kind != NodeKind::KeywordArg && arg->kind != NodeKind::KeywordSpread) {
      positional.push_back(evaluate(*arg, env));
    }
  }
  const auto add = [&](const std::string& key, Value value) {
    if (keywords.find(key) != nullptr) fail(ErrorKind::Usage, "the keyword argument '{}' is given twice", key);
    keywords.set(key, std::move(value));
  };
  for (const NodePtr& arg : args) {
    if (arg->kind == NodeKind::KeywordArg) {
      add(arg->name, evaluate(*arg->operands[0], env));
    } else if (arg->kind == NodeKind::KeywordSpread) {
      const Value v = evaluate(*arg->operands[0], env);
      if (!v.is_object_like()) fail(ErrorKind::Usage, "the argument after ** must be a dict, got {}", a_kind(v.kind));
      for (const auto& [key, value] : v.entries().entries()) add(key, value);
    }
  }
}

namespace {

// The name a callee is written with, for messages: foo, foo.bar, foo[...].
std::string describe_callee(const Node& node) {
  if (node.kind == NodeKind::Identifier) return node.name;
  if (node.kind == NodeKind::Member && node.operands[1]->kind == NodeKind::Identifier && !node.flag) {
    return describe_callee(*node.operands[0]) + "." + node.operands[1]->name;
  }
  if (node.kind == NodeKind::Member) return describe_callee(*node.operands[0]) + "[...]";
  return std::string("(") + node_kind_name(node.kind) + ")";
}

}  // namespace

Value Interpreter::evaluate_call(const Node& node, Env* env) {
  std::vector<Value> positional;
  OrderedMap keywords;
  evaluate_arguments(node.params, env, positional, keywords);
  if (!keywords.empty()) positional.push_back(object_value(std::move(keywords), true));
  const Node& callee = *node.operands[0];
  const Value fn = evaluate(callee, env);
  if (fn.kind != ValueKind::Function) {
    if (callee.kind == NodeKind::Member && !callee.flag && fn.kind == ValueKind::Undefined) {
      const Value object = evaluate(*callee.operands[0], env);
      if (object.kind == ValueKind::String || object.is_array_like() || object.is_object_like()) {
        fail(ErrorKind::Unsupported, "the {} method .{}() is not supported", kind_name(object.kind),
             callee.operands[1]->name);
      }
    }
    fail(ErrorKind::Usage, "cannot call {}: it is {}", describe_callee(callee), a_kind(fn.kind));
  }
  return fn.function->call(*this, positional, env);
}

namespace {

// Array.prototype.at's index resolution; nullopt when out of range.
std::optional<size_t> at_index(double index, size_t length) {
  double k = std::isnan(index) ? 0 : std::trunc(index);
  if (k < 0) k += static_cast<double>(length);
  if (k < 0 || k >= static_cast<double>(length)) return std::nullopt;
  return static_cast<size_t>(k);
}

}  // namespace

Value Interpreter::evaluate_member(const Node& node, Env* env) {
  const Value object = evaluate(*node.operands[0], env);
  const Node& property_node = *node.operands[1];
  Value property;
  if (node.flag) {
    if (property_node.kind == NodeKind::Slice) return evaluate_slice(object, property_node, env);
    property = evaluate(property_node, env);
  } else if (property_node.kind == NodeKind::Integer) {
    property = int_value(property_node.number);
  } else {
    property = string_value(property_node.name);
  }
  if (object.kind == ValueKind::Hole) hole_error("attribute access");
  if (property.kind == ValueKind::Hole) hole_error("an index");

  if (object.is_container()) {
    if (property.kind != ValueKind::String) {
      fail(ErrorKind::Usage, "{} is indexed by strings, got {}", a_kind(object.kind), a_kind(property.kind));
    }
    if (const Value* v = object.entries().find(property.str())) {
      return v->kind == ValueKind::Hole ? undefined_value() : *v;
    }
    return object.is_object_like() ? property_of(object, property.str()) : undefined_value();
  }
  if (object.is_array_like() || object.kind == ValueKind::String) {
    if (property.kind == ValueKind::Integer) {
      if (object.kind == ValueKind::String) {
        auto c = js::utf16_at(object.str(), property.number);
        return c ? string_value(std::move(*c)) : undefined_value();
      }
      const auto i = at_index(property.number, object.items().size());
      if (!i) return undefined_value();
      const Value& item = object.items()[*i];
      return item.kind == ValueKind::Hole ? undefined_value() : item;
    }
    if (property.kind == ValueKind::String) return property_of(object, property.str());
    fail(ErrorKind::Usage, "{} is indexed by integers, got {}", a_kind(object.kind), a_kind(property.kind));
  }
  if (property.kind != ValueKind::String) {
    fail(ErrorKind::Usage, "cannot index {} with {}", a_kind(object.kind), a_kind(property.kind));
  }
  return property_of(object, property.str());
}

Value Interpreter::evaluate_slice(const Value& object, const Node& slice, Env* env) {
  if (!object.is_array_like() && object.kind != ValueKind::String) {
    fail(ErrorKind::Usage, "only lists and strings can be sliced, got {}", a_kind(object.kind));
  }
  double bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  const char* names[3] = {"start", "stop", "step"};
  for (size_t i = 0; i < 3; ++i) {
    const Node* part = slice.operand(i);
    const Value v = part != nullptr ? evaluate(*part, env) : undefined_value();
    if (v.kind == ValueKind::Integer) {
      bounds[i] = v.number;
      given[i] = true;
    } else if (v.kind != ValueKind::Undefined) {
      fail(ErrorKind::Usage, "a slice {} must be an integer, got {}", names[i], a_kind(v.kind));
    }
  }
  std::vector<std::string> chars;
  if (object.kind == ValueKind::String) chars = js::code_points(object.str());
  const double length = static_cast<double>(object.kind == ValueKind::String ? chars.size() : object.items().size());
  const double step = bounds[2];
  const double direction = step > 0 ? 1 : step < 0 ? -1 : (std::isnan(step) ? 0 : 0);
  double start, stop;
  // utils.slice of the reference, with JavaScript's number semantics.
  if (direction >= 0) {
    start = given[0] ? bounds[0] : 0;
    start = start < 0 ? std::max(length + start, 0.0) : std::fmin(start, length);
    stop = given[1] ? bounds[1] : length;
    stop = stop < 0 ? std::max(length + stop, 0.0) : std::fmin(stop, length);
  } else {
    start = given[0] ? bounds[0] : length - 1;
    start = start < 0 ? std::max(length + start, -1.0) : std::fmin(start, length - 1);
    stop = given[1] ? bounds[1] : -1;
    stop = stop < -1 ? std::max(length + stop, -1.0) : std::fmin(stop, length - 1);
  }
  std::vector<size_t> picked;
  for (double i = start; direction * i < direction * stop; i += step) {
    if (std::isnan(i) || i < 0 || i >= length) break;
    picked.push_back(static_cast<size_t>(i));
  }
  if (object.kind == ValueKind::String) {
    std::string out;
    for (size_t i : picked) out += chars[i];
    return string_value(std::move(out));
  }
  std::vector<Value> items;
  for (size_t i : picked) items.push_back(object.items()[i]);
  return array_value(std::move(items));
}

Value Interpreter::evaluate_unary(const Node& node, Env* env) {
  const Value arg = evaluate(*node.operands[0], env);
  if (node.name == "not") return bool_value(!truthy(arg));
  const double sign = node.name == "-" ? -1 : 1;
  if (arg.is_number() || arg.kind == ValueKind::Boolean) {
    const double v = arg.kind == ValueKind::Boolean ? (arg.boolean ? 1 : 0) : arg.number;
    return arg.kind == ValueKind::Float ? float_value(sign * v) : int_value(sign * v);
  }
  if (arg.kind == ValueKind::Hole) hole_error("a sign");
  fail(ErrorKind::Usage, "unary {} of {}", node.name, a_kind(arg.kind));
}

namespace {

bool numeric_like(const Value& v) {
  return v.is_number() || v.kind == ValueKind::Boolean;
}
double numeric_of(const Value& v) {
  return v.kind == ValueKind::Boolean ? (v.boolean ? 1 : 0) : v.number;
}

// JavaScript's ** (it differs from pow() for a base of +-1 with an infinite or NaN exponent).
double js_power(double a, double b) {
  if (std::isnan(b)) return std::nan("");
  if (std::isinf(b) && std::fabs(a) == 1) return std::nan("");
  return std::pow(a, b);
}

}  // namespace

Value Interpreter::evaluate_binary(const Node& node, Env* env) {
  const std::string& op = node.name;
  const Value left = evaluate(*node.operands[0], env);
  if (op == "and") return truthy(left) ? evaluate(*node.operands[1], env) : left;
  if (op == "or") return truthy(left) ? left : evaluate(*node.operands[1], env);
  const Value right = evaluate(*node.operands[1], env);
  if (op == "==") return bool_value(loose_equals(left, right));
  if (op == "!=") return bool_value(!loose_equals(left, right));

  const bool membership = op == "in" || op == "not in";
  if (left.kind == ValueKind::Undefined || right.kind == ValueKind::Undefined) {
    if (right.kind == ValueKind::Undefined && membership) return bool_value(op == "not in");
    fail(ErrorKind::Usage, "'{}' with an undefined {} operand ({} {} {})", op,
         left.kind == ValueKind::Undefined ? "left" : "right", kind_name(left.kind), op, kind_name(right.kind));
  }
  if (left.kind == ValueKind::Null || right.kind == ValueKind::Null) {
    fail(ErrorKind::Usage, "'{}' with a none operand ({} {} {})", op, kind_name(left.kind), op, kind_name(right.kind));
  }
  if (left.kind == ValueKind::Hole || right.kind == ValueKind::Hole) hole_error("an operator");
  if (op == "~") {
    std::string s = raw_to_string(left);
    s += raw_to_string(right);
    check_string_size(s.size());
    return string_value(std::move(s));
  }
  if (op == "**" && numeric_like(left) && numeric_like(right)) {
    const double a = numeric_of(left), b = numeric_of(right);
    if (a == 0 && b < 0) fail(ErrorKind::Usage, "0 cannot be raised to a negative power");
    const double result = js_power(a, b);
    if (!std::isfinite(result)) fail(ErrorKind::Usage, "{} ** {} is not a finite real number", a, b);
    const bool is_float = left.kind == ValueKind::Float || right.kind == ValueKind::Float || b < 0;
    return is_float ? float_value(result) : int_value(result);
  }
  if (left.is_number() && right.is_number()) {
    const double a = left.number, b = right.number;
    const bool is_float = left.kind == ValueKind::Float || right.kind == ValueKind::Float;
    const auto number = [&](double r) { return is_float ? float_value(r) : int_value(r); };
    if (op == "+") return number(a + b);
    if (op == "-") return number(a - b);
    if (op == "*") return number(a * b);
    if (op == "/") return float_value(a / b);
    if (op == "//") return number(std::floor(a / b));
    if (op == "%") return number(std::fmod(a, b));
    if (op == "<") return bool_value(a < b);
    if (op == ">") return bool_value(a > b);
    if (op == ">=") return bool_value(a >= b);
    if (op == "<=") return bool_value(a <= b);
  } else if (left.is_array_like() && right.is_array_like()) {
    if (op == "+") {
      std::vector<Value> items = left.items();
      check_list_length(items.size() + right.items().size());
      items.insert(items.end(), right.items().begin(), right.items().end());
      return array_value(std::move(items));
    }
  } else if (right.is_array_like() && membership) {
    bool found = false;
    for (const Value& item : right.items()) {
      if (strict_equals(item, left)) {
        found = true;
        break;
      }
    }
    return bool_value(found == (op == "in"));
  }
  if ((left.kind == ValueKind::String || right.kind == ValueKind::String) && op == "+") {
    std::string s = raw_to_string(left);
    s += raw_to_string(right);
    check_string_size(s.size());
    return string_value(std::move(s));
  }
  if (left.kind == ValueKind::String && right.kind == ValueKind::String && membership) {
    const bool found = right.str().find(left.str()) != std::string::npos;
    return bool_value(found == (op == "in"));
  }
  if (left.kind == ValueKind::String && right.is_object_like() && membership) {
    const bool found = right.entries().find(left.str()) != nullptr;
    return bool_value(found == (op == "in"));
  }
  fail(ErrorKind::Unsupported, "the operator '{}' between {} and {} is not supported", op, a_kind(left.kind),
       a_kind(right.kind));
}

Value Interpreter::evaluate_test(const Node& node, Env* env) {
  const Value operand = evaluate(*node.operands[0], env);
  const bool result = run_test(node.name, operand, nullptr);
  return bool_value(node.flag ? !result : result);
}

// --- macros --------------------------------------------------------------------------------------

Value Interpreter::make_macro(const Node& macro) {
  const SpecialArguments special = find_special_arguments(macro.params, macro.body);
  const Node* node = &macro;
  return function_value(macro.name, [node, special](Interpreter& in, std::vector<Value>& args, Env* call_scope) {
    // Like the reference, a macro body sees the caller's variables (its scope's parent is the
    // scope of the call, not of the definition).
    Env* scope = in.new_env(call_scope);
    in.bind_macro_arguments("'" + node->name + "'", node->params, special.kwargs, special.varargs, args, scope);
    std::string out;
    in.render_block(node->body, scope, out);
    return string_value(std::move(out));
  });
}

void Interpreter::bind_macro_arguments(const std::string& display_name, const NodeList& params, bool wants_kwargs,
                                       bool wants_varargs, std::vector<Value> args, Env* scope) {
  OrderedMap keywords;
  if (!args.empty() && args.back().kind == ValueKind::KwArgs) {
    keywords = args.back().entries();
    args.pop_back();
  }
  std::vector<std::pair<std::string, const Node*>> pending_defaults;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& param = *params[i];
    const Node* default_value = param.kind == NodeKind::KeywordArg ? param.operands[0].get() : nullptr;
    std::optional<Value> value;
    if (i < args.size() && args[i].kind != ValueKind::Hole) value = args[i];
    if (!value) {
      if (const Value* kw = keywords.find(param.name)) {
        if (kw->kind != ValueKind::Hole) value = *kw;
        keywords.erase(param.name);
      }
    }
    if (!value && default_value != nullptr) pending_defaults.emplace_back(param.name, default_value);
    scope->vars.set(param.name, value ? *value : undefined_value());
  }
  if (wants_kwargs) {
    scope->vars.set("kwargs", object_value(keywords));
  } else if (!keywords.empty()) {
    fail(ErrorKind::Usage, "macro {} takes no keyword argument '{}'", display_name, keywords.entries().front().first);
  }
  if (wants_varargs) {
    std::vector<Value> rest;
    for (size_t i = params.size(); i < args.size(); ++i) rest.push_back(args[i]);
    scope->vars.set("varargs", array_value(std::move(rest)));
  } else if (args.size() > params.size()) {
    fail(ErrorKind::Usage, "macro {} takes not more than {} argument(s), got {}", display_name, params.size(),
         args.size());
  }
  for (const auto& [name, default_node] : pending_defaults) scope->vars.set(name, evaluate(*default_node, scope));
}

namespace {

// The reference's findAccessedSpecialMacroArguments: a walk in Jinja's visiting order.
class SpecialArgumentFinder {
 public:
  SpecialArguments run(const NodeList& params, const NodeList& body) {
    for (const NodePtr& p : params) declare(p->name);
    visit(body);
    return found_;
  }

 private:
  static bool is_special(const std::string& name) { return name == "kwargs" || name == "varargs"; }
  void declare(const std::string& name) {
    if (name == "kwargs") declared_.kwargs = true;
    if (name == "varargs") declared_.varargs = true;
  }
  void declare_target(const Node& target) {
    if (target.kind == NodeKind::Identifier) declare(target.name);
    if (target.kind == NodeKind::Tuple) {
      for (const NodePtr& item : target.operands) declare_target(*item);
    }
  }
  void visit_defaults(const NodeList& params) {
    for (const NodePtr& p : params) {
      if (p->kind == NodeKind::KeywordArg) visit(p->operands[0].get());
    }
  }
  void visit_filter(const Node& filter) {
    if (filter.kind == NodeKind::Call) visit(filter.params);
  }
  void visit(const NodeList& nodes) {
    for (const NodePtr& n : nodes) visit(n.get());
  }
  void visit(const Node* node) {
    if (node == nullptr) return;
    switch (node->kind) {
      case NodeKind::For: {
        declare_target(*node->operands[0]);
        const Node& iterable = *node->operands[1];
        if (iterable.kind == NodeKind::Select) {
          visit(iterable.operands[0].get());
          visit(node->body);
          visit(node->alternate);
          visit(iterable.operands[1].get());
          return;
        }
        visit(&iterable);
        visit(node->body);
        visit(node->alternate);
        return;
      }
      case NodeKind::Set:
        declare_target(*node->operands[0]);
        visit(node->operands[1].get());
        visit(node->body);
        return;
      case NodeKind::Macro:
        for (const NodePtr& p : node->params) declare(p->name);
        visit_defaults(node->params);
        visit(node->body);
        return;
      case NodeKind::CallBlock:
        visit(node->operands[0].get());
        for (const NodePtr& p : node->params) declare(p->name);
        visit_defaults(node->params);
        visit(node->body);
        return;
      case NodeKind::FilterBlock:
        visit(node->body);
        visit_filter(*node->operands[0]);
        return;
      case NodeKind::Identifier:
        if (is_special(node->name)) {
          if (node->name == "kwargs" && !declared_.kwargs) found_.kwargs = true;
          if (node->name == "varargs" && !declared_.varargs) found_.varargs = true;
        }
        return;
      case NodeKind::Member:
        visit(node->operands[0].get());
        if (node->flag) visit(node->operands[1].get());
        return;
      case NodeKind::Filter:
        visit(node->operands[0].get());
        visit_filter(*node->operands[1]);
        return;
      case NodeKind::Test:
        visit(node->operands[0].get());
        return;
      case NodeKind::Select:
        visit(node->operands[1].get());
        visit(node->operands[0].get());
        return;
      case NodeKind::KeywordArg:
        visit(node->operands[0].get());
        return;
      default:
        for (const NodePtr& n : node->operands) visit(n.get());
        visit(node->params);
        visit(node->body);
        visit(node->alternate);
        return;
    }
  }

  SpecialArguments declared_;
  SpecialArguments found_;
};

}  // namespace

SpecialArguments find_special_arguments(const NodeList& params, const NodeList& body) {
  return SpecialArgumentFinder().run(params, body);
}

}  // namespace ferry::chat
