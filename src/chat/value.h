// Runtime values of the template interpreter, modelled on the reference renderer's value classes
// (IntegerValue, FloatValue, StringValue, ArrayValue, TupleValue, ObjectValue,
// KeywordArgumentsValue, NamespaceValue, FunctionValue, NullValue, UndefinedValue), because
// their quirks decide the output: an integer and a float are both JavaScript numbers, a tuple is
// not "iterable", `==` is JavaScript's loose equality, a namespace is always true.
//
// Lists and dicts never change after they are made, so they are shared by pointer and identity
// (`x in list` compares lists by identity, as the reference does). Namespaces are the only
// mutable values; the interpreter owns them for the whole render, so cycles through them
// (`{% set ns.self = ns %}`) cannot leak.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::chat {

enum class ValueKind : uint8_t {
  Undefined,  // a name that is not set, a missing key
  Hole,       // JavaScript's bare `undefined` (what `[] | first` gives): unusable but storable
  Null,
  Boolean,
  Integer,  // a double with an integer's printing rules
  Float,
  String,
  Array,
  Tuple,  // an Array that prints and tests differently
  Object,
  KwArgs,  // the keyword arguments of a call, passed as a trailing Object
  Namespace,
  Function,
};

struct Value;
struct ArrayData;
struct ObjectData;
struct Namespace;
struct Callable;

class OrderedMap;

struct Value {
  ValueKind kind = ValueKind::Undefined;
  bool boolean = false;
  double number = 0;
  std::shared_ptr<const std::string> string;
  std::shared_ptr<const ArrayData> array;    // Array, Tuple
  std::shared_ptr<const ObjectData> object;  // Object, KwArgs
  Namespace* ns = nullptr;                   // owned by the interpreter
  std::shared_ptr<const Callable> function;

  bool is(ValueKind k) const { return kind == k; }
  bool is_array_like() const { return kind == ValueKind::Array || kind == ValueKind::Tuple; }  // instanceof ArrayValue
  bool is_object_like() const {
    return kind == ValueKind::Object || kind == ValueKind::KwArgs;
  }  // instanceof ObjectValue
  bool is_number() const { return kind == ValueKind::Integer || kind == ValueKind::Float; }
  bool is_container() const { return is_object_like() || kind == ValueKind::Namespace; }  // has attributes
  const std::string& str() const { return *string; }
  const std::vector<Value>& items() const;  // Array, Tuple
  const OrderedMap& entries() const;        // Object, KwArgs, Namespace
  int depth() const;                        // nesting of lists and dicts, for the limits
};

// Insertion-ordered string -> value map (JavaScript's Map).
class OrderedMap {
 public:
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // Replaces the value of an existing key in place (keeping its position) or appends.
  void set(std::string key, Value value);
  bool erase(std::string_view key);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

struct ArrayData {
  std::vector<Value> items;
  int depth = 1;
};

struct ObjectData {
  OrderedMap map;
  int depth = 1;
};

struct Namespace {
  OrderedMap map;
};

class Interpreter;
struct Env;

// A function value: a global (range, namespace, ...), a bound method ("text".upper), a macro or
// a call block's `caller`. `args` ends with a KwArgs value when keyword arguments were given.
struct Callable {
  std::string name;
  std::function<Value(Interpreter&, std::vector<Value>& args, Env* call_scope)> call;
};

// Bytes of strings, lists and dicts made during one render, counted against a limit so that no
// template can make the renderer allocate without bound (every value is counted when it is made,
// freed or not). The interpreter opens a ValueBudgetScope per render; values made on a thread
// with no open scope are not counted.
class ValueBudget {
 public:
  explicit ValueBudget(uint64_t limit) : limit_(limit) {}
  void charge(uint64_t bytes);  // Error(Unsupported) past the limit
  uint64_t used() const { return used_; }

 private:
  uint64_t limit_;
  uint64_t used_ = 0;
};

class ValueBudgetScope {
 public:
  explicit ValueBudgetScope(ValueBudget& budget);
  ~ValueBudgetScope();
  ValueBudgetScope(const ValueBudgetScope&) = delete;
  ValueBudgetScope& operator=(const ValueBudgetScope&) = delete;

 private:
  ValueBudget* previous_;
};

// Lists and dicts deeper than this are refused (they would make printing and freeing them
// recursive without bound).
inline constexpr int kMaxValueDepth = 256;

Value undefined_value();
Value hole_value();
Value null_value();
Value bool_value(bool b);
Value int_value(double n);
Value float_value(double n);
Value string_value(std::string s);
Value array_value(std::vector<Value> items);
Value tuple_value(std::vector<Value> items);
Value object_value(OrderedMap map, bool kwargs = false);
Value namespace_value(Namespace* ns);
Value function_value(std::string name, std::function<Value(Interpreter&, std::vector<Value>&, Env*)> call);

// The reference's type names ("StringValue", ...) are internal; messages use these.
const char* kind_name(ValueKind kind);
// With its article, for messages: "an integer", "a list", "undefined", "none".
std::string a_kind(ValueKind kind);

// Error(Usage) for using a bare JavaScript undefined (a Hole) where the reference would crash.
[[noreturn]] void hole_error(std::string_view where);

// RuntimeValue.__bool__(): Python-like truthiness (empty list/dict false), but a namespace and a
// function are always true.
bool truthy(const Value& v);
// JavaScript truthiness of the wrapped raw value (`first.value ? ...`): a list is always true.
bool raw_truthy(const Value& v);

// RuntimeValue.toString(): what {{ value }} prints. Lists and dicts print as JSON with
// `undefined` kept.
std::string to_display_string(const Value& v);
// `value.value.toString()` on the raw JavaScript value, as `~` and string `+` use it: floats lose
// their ".0", a list joins its items with ",", a dict is "[object Map]".
std::string raw_to_string(const Value& v);
// Array.prototype.join's view of a raw value: null and undefined become "".
std::string raw_join_piece(const Value& v);

struct JsonOptions {
  std::optional<int> indent;  // none or 0: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
};
// The reference's toJSON (the `tojson` filter; also printing of lists and dicts).
std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null);

// `a == b`: JavaScript's loose equality on the raw values (1 == "1", null == undefined, lists by
// identity).
bool loose_equals(const Value& a, const Value& b);
// `===` on the raw values (membership in a list).
bool strict_equals(const Value& a, const Value& b);
// SameValueZero (a JavaScript Set, for `unique`): like === but NaN equals NaN.
bool same_value_zero(const Value& a, const Value& b);

// Context values from JSON, as JSON.parse + the reference's conversion would make them: numbers
// with an integral value are integers, object keys that are array indices come first in numeric
// order (JavaScript object property order), strings are sanitised to well-formed UTF-8.
Value from_json(const nlohmann::ordered_json& json);

}  // namespace ferry::chat
