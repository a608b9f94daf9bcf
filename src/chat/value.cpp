#include "chat/value.h"

#include <algorithm>
#include <cmath>

#include "chat/js_text.h"
#include "core/error.h"

namespace ferry::chat {

// --- OrderedMap ----------------------------------------------------------------------------------

const Value* OrderedMap::find(std::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* OrderedMap::find(std::string_view key) {
  for (auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void OrderedMap::set(std::string key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
    return;
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

bool OrderedMap::erase(std::string_view key) {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == key; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

// --- budget --------------------------------------------------------------------------------------

namespace {

thread_local ValueBudget* t_budget = nullptr;

void charge(uint64_t bytes) {
  if (t_budget != nullptr) t_budget->charge(bytes);
}

}  // namespace

void ValueBudget::charge(uint64_t bytes) {
  used_ += bytes;
  if (used_ > limit_) {
    fail(ErrorKind::Unsupported, "rendering allocates more than the {} byte limit for values (runaway growth?)",
         limit_);
  }
}

ValueBudgetScope::ValueBudgetScope(ValueBudget& budget) : previous_(t_budget) {
  t_budget = &budget;
}
ValueBudgetScope::~ValueBudgetScope() {
  t_budget = previous_;
}

// --- construction --------------------------------------------------------------------------------

const std::vector<Value>& Value::items() const {
  return array->items;
}

const OrderedMap& Value::entries() const {
  return kind == ValueKind::Namespace ? ns->map : object->map;
}

int Value::depth() const {
  if (is_array_like()) return array->depth;
  if (is_object_like()) return object->depth;
  return 0;
}

Value undefined_value() {
  return Value{};
}

Value hole_value() {
  Value v;
  v.kind = ValueKind::Hole;
  return v;
}

Value null_value() {
  Value v;
  v.kind = ValueKind::Null;
  return v;
}

Value bool_value(bool b) {
  Value v;
  v.kind = ValueKind::Boolean;
  v.boolean = b;
  return v;
}

Value int_value(double n) {
  Value v;
  v.kind = ValueKind::Integer;
  v.number = n;
  return v;
}

Value float_value(double n) {
  Value v;
  v.kind = ValueKind::Float;
  v.number = n;
  return v;
}

Value string_value(std::string s) {
  charge(s.size() + sizeof(std::string));
  Value v;
  v.kind = ValueKind::String;
  v.string = std::make_shared<const std::string>(std::move(s));
  return v;
}

namespace {

Value make_array(std::vector<Value> items, ValueKind kind) {
  charge((items.size() + 1) * sizeof(Value));
  auto data = std::make_shared<ArrayData>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  data->depth = depth + 1;
  if (data->depth > kMaxValueDepth) {
    fail(ErrorKind::Unsupported, "lists and dicts nested more than {} deep are not supported", kMaxValueDepth);
  }
  data->items = std::move(items);
  Value v;
  v.kind = kind;
  v.array = std::move(data);
  return v;
}

}  // namespace

Value array_value(std::vector<Value> items) {
  return make_array(std::move(items), ValueKind::Array);
}
Value tuple_value(std::vector<Value> items) {
  return make_array(std::move(items), ValueKind::Tuple);
}

Value object_value(OrderedMap map, bool kwargs) {
  charge((map.size() + 1) * sizeof(std::pair<std::string, Value>));
  auto data = std::make_shared<ObjectData>();
  int depth = 0;
  for (const auto& entry : map.entries()) depth = std::max(depth, entry.second.depth());
  data->depth = depth + 1;
  if (data->depth > kMaxValueDepth) {
    fail(ErrorKind::Unsupported, "lists and dicts nested more than {} deep are not supported", kMaxValueDepth);
  }
  data->map = std::move(map);
  Value v;
  v.kind = kwargs ? ValueKind::KwArgs : ValueKind::Object;
  v.object = std::move(data);
  return v;
}

Value namespace_value(Namespace* ns) {
  Value v;
  v.kind = ValueKind::Namespace;
  v.ns = ns;
  return v;
}

Value function_value(std::string name, std::function<Value(Interpreter&, std::vector<Value>&, Env*)> call) {
  Value v;
  v.kind = ValueKind::Function;
  v.function = std::make_shared<const Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

const char* kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::Undefined:
      return "undefined";
    case ValueKind::Hole:
      return "undefined (missing item)";
    case ValueKind::Null:
      return "none";
    case ValueKind::Boolean:
      return "boolean";
    case ValueKind::Integer:
      return "integer";
    case ValueKind::Float:
      return "float";
    case ValueKind::String:
      return "string";
    case ValueKind::Array:
      return "list";
    case ValueKind::Tuple:
      return "tuple";
    case ValueKind::Object:
      return "dict";
    case ValueKind::KwArgs:
      return "keyword arguments";
    case ValueKind::Namespace:
      return "namespace";
    case ValueKind::Function:
      return "function";
  }
  return "value";
}

std::string a_kind(ValueKind kind) {
  switch (kind) {
    case ValueKind::Undefined:
    case ValueKind::Null:
    case ValueKind::KwArgs:
      return kind_name(kind);
    case ValueKind::Integer:
      return "an integer";
    default:
      return std::string("a ") + kind_name(kind);
  }
}

void hole_error(std::string_view where) {
  fail(ErrorKind::Usage, "{} got the missing item of an empty list (from `first` or `last`)", where);
}

// --- truthiness and strings ----------------------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind) {
    case ValueKind::Undefined:
    case ValueKind::Null:
      return false;
    case ValueKind::Hole:
      hole_error("a condition");
    case ValueKind::Boolean:
      return v.boolean;
    case ValueKind::Integer:
    case ValueKind::Float:
      return v.number != 0 && !std::isnan(v.number);
    case ValueKind::String:
      return !v.str().empty();
    case ValueKind::Array:
    case ValueKind::Tuple:
      return !v.items().empty();
    case ValueKind::Object:
    case ValueKind::KwArgs:
      return !v.entries().empty();
    case ValueKind::Namespace:
    case ValueKind::Function:
      return true;
  }
  return false;
}

bool raw_truthy(const Value& v) {
  switch (v.kind) {
    case ValueKind::Array:
    case ValueKind::Tuple:
    case ValueKind::Object:
    case ValueKind::KwArgs:
      return true;  // a JavaScript object
    case ValueKind::Hole:
      hole_error("an argument");
    default:
      return truthy(v);
  }
}

namespace {

[[noreturn]] void function_text_error() {
  fail(ErrorKind::Unsupported, "turning a function into text (the reference prints its JavaScript source)");
}

// Array.prototype.join(",") over the items as objects: each item's toString().
std::string array_to_string(const Value& v) {
  std::string out;
  bool first = true;
  for (const Value& item : v.items()) {
    if (!first) out += ',';
    first = false;
    if (item.kind != ValueKind::Hole) out += to_display_string(item);
  }
  return out;
}

}  // namespace

std::string to_display_string(const Value& v) {
  switch (v.kind) {
    case ValueKind::Undefined:
      return "undefined";
    case ValueKind::Hole:
      hole_error("printing");
    case ValueKind::Null:
      return "null";
    case ValueKind::Boolean:
      return v.boolean ? "true" : "false";
    case ValueKind::Integer:
      return js::number_to_string(v.number);
    case ValueKind::Float:
      return js::float_to_string(v.number);
    case ValueKind::String:
      return v.str();
    case ValueKind::Array:
    case ValueKind::Tuple:
    case ValueKind::Object:
    case ValueKind::KwArgs:
    case ValueKind::Namespace:
      return to_json(v, JsonOptions{}, false);
    case ValueKind::Function:
      function_text_error();
  }
  return {};
}

std::string raw_to_string(const Value& v) {
  switch (v.kind) {
    case ValueKind::Undefined:
    case ValueKind::Null:
      fail(ErrorKind::Usage, "cannot turn {} into text", kind_name(v.kind));
    case ValueKind::Hole:
      hole_error("text conversion");
    case ValueKind::Boolean:
      return v.boolean ? "true" : "false";
    case ValueKind::Integer:
    case ValueKind::Float:
      return js::number_to_string(v.number);
    case ValueKind::String:
      return v.str();
    case ValueKind::Array:
    case ValueKind::Tuple:
      return array_to_string(v);
    case ValueKind::Object:
    case ValueKind::KwArgs:
    case ValueKind::Namespace:
      return "[object Map]";
    case ValueKind::Function:
      function_text_error();
  }
  return {};
}

std::string raw_join_piece(const Value& v) {
  if (v.kind == ValueKind::Null || v.kind == ValueKind::Undefined) return {};
  return raw_to_string(v);
}

// --- JSON ----------------------------------------------------------------------------------------

namespace {

constexpr int kMaxJsonIndent = 1000;

void json_into(std::string& out, const Value& v, const JsonOptions& o, int depth, bool undefined_as_null) {
  if (depth > kMaxValueDepth) {
    fail(ErrorKind::Unsupported, "tojson of a value nested more than {} deep (a namespace that contains itself?)",
         kMaxValueDepth);
  }
  switch (v.kind) {
    case ValueKind::Null:
      out += "null";
      return;
    case ValueKind::Undefined:
      out += undefined_as_null ? "null" : "undefined";
      return;
    case ValueKind::Integer:
    case ValueKind::Float:
      out += js::number_to_json(v.number);
      return;
    case ValueKind::Boolean:
      out += v.boolean ? "true" : "false";
      return;
    case ValueKind::String:
      out += o.ensure_ascii ? js::ascii_escape(js::json_quote(v.str())) : js::json_quote(v.str());
      return;
    case ValueKind::Array:
    case ValueKind::Object:
    case ValueKind::Namespace:
      break;
    case ValueKind::Hole:
      hole_error("tojson");
    case ValueKind::Tuple:
    case ValueKind::KwArgs:
    case ValueKind::Function:
      fail(ErrorKind::Usage, "cannot convert {} to JSON", a_kind(v.kind));
  }

  const int indent = o.indent.value_or(0);
  if (indent < 0) fail(ErrorKind::Usage, "tojson indent must not be negative, got {}", indent);
  if (indent > kMaxJsonIndent) fail(ErrorKind::Unsupported, "tojson indent above {} is not supported", kMaxJsonIndent);
  std::string item_sep, key_sep;
  if (o.separators) {
    item_sep = o.separators->first;
    key_sep = o.separators->second;
  } else if (indent != 0) {
    item_sep = ",";
    key_sep = ": ";
  } else {
    item_sep = ", ";
    key_sep = ": ";
  }
  const std::string indent_unit(static_cast<size_t>(indent), ' ');
  std::string base_padding = "\n";
  for (int i = 0; i < depth; ++i) base_padding += indent_unit;
  const std::string child_padding = base_padding + indent_unit;

  if (v.kind == ValueKind::Array) {
    const auto& items = v.items();
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep;
      if (indent != 0) out += child_padding;
      json_into(out, items[i], o, depth + 1, undefined_as_null);
    }
    if (indent != 0 && !items.empty()) out += base_padding;
    out += ']';
    return;
  }

  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& e : v.entries().entries()) entries.push_back(&e);
  if (o.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
      const std::optional<int> c = js::locale_compare_ascii(a->first, b->first);
      if (!c) {
        fail(ErrorKind::Unsupported, "tojson(sort_keys=true) with keys other than printable ASCII ('{}', '{}')",
             a->first, b->first);
      }
      return *c < 0;
    });
  }
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += item_sep;
    if (indent != 0) out += child_padding;
    const std::string key = js::json_quote(entries[i]->first);
    out += o.ensure_ascii ? js::ascii_escape(key) : key;
    out += key_sep;
    json_into(out, entries[i]->second, o, depth + 1, undefined_as_null);
  }
  if (indent != 0 && !entries.empty()) out += base_padding;
  out += '}';
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null) {
  std::string out;
  json_into(out, v, options, 0, undefined_as_null);
  return out;
}

// --- equality ------------------------------------------------------------------------------------

namespace {

enum class JsType { Undefined, Null, Boolean, Number, String, Object };

JsType js_type(const Value& v) {
  switch (v.kind) {
    case ValueKind::Undefined:
      return JsType::Undefined;
    case ValueKind::Hole:
      hole_error("a comparison");
    case ValueKind::Null:
      return JsType::Null;
    case ValueKind::Boolean:
      return JsType::Boolean;
    case ValueKind::Integer:
    case ValueKind::Float:
      return JsType::Number;
    case ValueKind::String:
      return JsType::String;
    default:
      return JsType::Object;
  }
}

const void* identity(const Value& v) {
  if (v.is_array_like()) return v.array.get();
  if (v.is_object_like()) return v.object.get();
  if (v.kind == ValueKind::Namespace) return v.ns;
  return v.function.get();
}

// A JavaScript primitive: what ToPrimitive leaves.
struct Primitive {
  JsType type = JsType::Undefined;
  bool boolean = false;
  double number = 0;
  std::string string;
};

Primitive primitive(JsType type) {
  Primitive p;
  p.type = type;
  return p;
}
Primitive boolean_primitive(bool b) {
  Primitive p = primitive(JsType::Boolean);
  p.boolean = b;
  return p;
}
Primitive number_primitive(double n) {
  Primitive p = primitive(JsType::Number);
  p.number = n;
  return p;
}
Primitive string_primitive(std::string s) {
  Primitive p = primitive(JsType::String);
  p.string = std::move(s);
  return p;
}

Primitive to_primitive(const Value& v) {
  switch (js_type(v)) {
    case JsType::Undefined:
    case JsType::Null:
      return primitive(js_type(v));
    case JsType::Boolean:
      return boolean_primitive(v.boolean);
    case JsType::Number:
      return number_primitive(v.number);
    case JsType::String:
      return string_primitive(v.str());
    case JsType::Object:
      if (v.kind == ValueKind::Function) function_text_error();
      return string_primitive(raw_to_string(v));
  }
  return primitive(JsType::Undefined);
}

bool loose_primitive(Primitive a, Primitive b) {
  const auto to_number = [](Primitive& p) {
    if (p.type == JsType::Boolean) p = number_primitive(p.boolean ? 1.0 : 0.0);
    if (p.type == JsType::String) p = number_primitive(js::string_to_number(p.string));
  };
  const bool a_nullish = a.type == JsType::Undefined || a.type == JsType::Null;
  const bool b_nullish = b.type == JsType::Undefined || b.type == JsType::Null;
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (a.type == b.type) {
    switch (a.type) {
      case JsType::Boolean:
        return a.boolean == b.boolean;
      case JsType::Number:
        return a.number == b.number;
      case JsType::String:
        return a.string == b.string;
      default:
        return false;
    }
  }
  to_number(a);
  to_number(b);
  return a.number == b.number;
}

}  // namespace

bool loose_equals(const Value& a, const Value& b) {
  const JsType ta = js_type(a), tb = js_type(b);
  if (ta == JsType::Object && tb == JsType::Object) return identity(a) == identity(b);
  const bool a_nullish = ta == JsType::Undefined || ta == JsType::Null;
  const bool b_nullish = tb == JsType::Undefined || tb == JsType::Null;
  // An object never equals null or undefined (no conversion happens).
  if ((ta == JsType::Object && b_nullish) || (tb == JsType::Object && a_nullish)) return false;
  return loose_primitive(to_primitive(a), to_primitive(b));
}

bool strict_equals(const Value& a, const Value& b) {
  const JsType ta = js_type(a), tb = js_type(b);
  if (ta != tb) return false;
  switch (ta) {
    case JsType::Undefined:
    case JsType::Null:
      return true;
    case JsType::Boolean:
      return a.boolean == b.boolean;
    case JsType::Number:
      return a.number == b.number;
    case JsType::String:
      return a.str() == b.str();
    case JsType::Object:
      return identity(a) == identity(b);
  }
  return false;
}

bool same_value_zero(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number() && std::isnan(a.number) && std::isnan(b.number)) return true;
  return strict_equals(a, b);
}

// --- from JSON -----------------------------------------------------------------------------------

namespace {

// A JavaScript array index: "0" or a decimal without leading zeros, below 2^32 - 1.
std::optional<uint64_t> array_index(const std::string& key) {
  if (key.empty() || key.size() > 10) return std::nullopt;
  if (key.size() > 1 && key[0] == '0') return std::nullopt;
  uint64_t n = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n >= 4294967295ull) return std::nullopt;
  return n;
}

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail(ErrorKind::Unsupported, "JSON nested more than {} deep", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded:
      return null_value();
    case nlohmann::ordered_json::value_t::boolean:
      return bool_value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return int_value(static_cast<double>(j.get<int64_t>()));
    case nlohmann::ordered_json::value_t::number_unsigned:
      return int_value(static_cast<double>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = j.get<double>();
      return js::is_integral(d) ? int_value(d) : float_value(d);
    }
    case nlohmann::ordered_json::value_t::string:
      return string_value(js::sanitize_utf8(j.get_ref<const std::string&>()));
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return array_value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<uint64_t, const std::string*>> indices;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (auto n = array_index(it.key())) indices.emplace_back(*n, &it.key());
      }
      std::sort(indices.begin(), indices.end());
      OrderedMap map;
      for (const auto& [n, key] : indices) map.set(*key, from_json_at(j.at(*key), depth + 1));
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!array_index(it.key())) map.set(js::sanitize_utf8(it.key()), from_json_at(it.value(), depth + 1));
      }
      return object_value(std::move(map));
    }
    case nlohmann::ordered_json::value_t::binary:
      break;
  }
  fail(ErrorKind::Usage, "binary JSON values cannot be passed to a chat template");
}

}  // namespace

Value from_json(const nlohmann::ordered_json& json) {
  return from_json_at(json, 0);
}

}  // namespace ferry::chat
