// Filters (`x | trim`), tests (`x is defined`) and methods (`x.strip()`, `d.items()`): exactly the
// set the reference renderer has, with its per-type dispatch. A filter or method it does not have
// is an Error(Unsupported) naming it, raised when the template reaches it, as in the reference.
#include <algorithm>
#include <cmath>

#include "chat/interpreter.h"
#include "chat/js_text.h"
#include "core/error.h"

namespace ferry::chat {

namespace {

// args[i] as JavaScript's `args[i] ?? ...` sees it: a missing item and a bare undefined are absent.
const Value* arg_at(const std::vector<Value>& args, size_t i) {
  return i < args.size() && args[i].kind != ValueKind::Hole ? &args[i] : nullptr;
}
const Value* kwarg(const OrderedMap& keywords, std::string_view name) {
  const Value* v = keywords.find(name);
  return v != nullptr && v->kind != ValueKind::Hole ? v : nullptr;
}
Value pick(const Value* a, const Value* b, Value fallback) {
  if (a != nullptr) return *a;
  if (b != nullptr) return *b;
  return fallback;
}

[[noreturn]] void unknown_filter(const std::string& name, const Value& operand) {
  fail(ErrorKind::Unsupported, "the filter '{}' is not supported for {}", name, a_kind(operand.kind));
}
[[noreturn]] void filter_type_error(const std::string& name, const Value& operand) {
  if (operand.kind == ValueKind::Hole) hole_error("the filter '" + name + "'");
  fail(ErrorKind::Usage, "the filter '{}' cannot be applied to {}", name,
       operand.kind == ValueKind::Undefined ? "an undefined value" : a_kind(operand.kind));
}

Value pairs_of(const Value& object) {
  std::vector<Value> pairs;
  for (const auto& [key, value] : object.entries().entries()) pairs.push_back(array_value({string_value(key), value}));
  return array_value(std::move(pairs));
}

std::vector<std::string> split_all(const std::string& text, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(sep, start);
    if (at == std::string::npos) break;
    parts.push_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(text.substr(start));
  return parts;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

// The reference's replace(): at most `count` replacements (null or negative: all); an empty
// `old` matches before every character and at the end.
std::string js_replace(const std::string& text, const std::string& old_value, const std::string& new_value,
                       std::optional<double> count) {
  if (count && *count == 0) return text;
  double remaining = !count || *count < 0 ? HUGE_VAL : *count;
  std::string out;
  if (old_value.empty()) {
    size_t pos = 0;
    while (true) {
      if (remaining > 0) {
        out += new_value;
        --remaining;
      }
      if (pos >= text.size()) break;
      const size_t start = pos;
      js::next_code_point(text, pos);
      out.append(text, start, pos - start);
    }
    return out;
  }
  size_t start = 0;
  while (remaining > 0) {
    const size_t at = text.find(old_value, start);
    if (at == std::string::npos) break;
    out.append(text, start, at - start);
    out += new_value;
    start = at + old_value.size();
    --remaining;
  }
  out.append(text, start, std::string::npos);
  return out;
}

std::string repeat_spaces(double width) {
  if (!std::isfinite(width) || width < 0) fail(ErrorKind::Usage, "indent width must be a non-negative number");
  if (width > 1000) fail(ErrorKind::Unsupported, "indent width above 1000 is not supported");
  return std::string(static_cast<size_t>(width), ' ');
}

std::string indent_lines(const std::string& text, const std::string& indent, bool first, bool blank) {
  std::vector<std::string> lines = split_all(text, "\n");
  for (size_t i = 0; i < lines.size(); ++i) {
    if ((!first && i == 0) || (!blank && lines[i].empty())) continue;
    lines[i] = indent + lines[i];
  }
  return join(lines, "\n");
}

Value sorted(const std::vector<Value>& items, const std::function<int(const Value&, const Value&)>& compare) {
  std::vector<Value> out = items;
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) { return compare(a, b) < 0; });
  return array_value(std::move(out));
}

Value dictsort(const Value& object, const std::vector<Value>& args) {
  OrderedMap keywords;
  std::vector<Value> positional;
  for (const Value& a : args) {
    if (a.kind == ValueKind::KwArgs) {
      keywords = a.entries();
    } else {
      positional.push_back(a);
    }
  }
  const Value case_sensitive = pick(arg_at(positional, 0), kwarg(keywords, "case_sensitive"), bool_value(false));
  if (case_sensitive.kind != ValueKind::Boolean) fail(ErrorKind::Usage, "dictsort: case_sensitive must be a boolean");
  const Value by = pick(arg_at(positional, 1), kwarg(keywords, "by"), string_value("key"));
  if (by.kind != ValueKind::String) fail(ErrorKind::Usage, "dictsort: by must be a string");
  if (by.str() != "key" && by.str() != "value") fail(ErrorKind::Usage, "dictsort: by must be 'key' or 'value'");
  const Value reverse = pick(arg_at(positional, 2), kwarg(keywords, "reverse"), bool_value(false));
  if (reverse.kind != ValueKind::Boolean) fail(ErrorKind::Usage, "dictsort: reverse must be a boolean");
  const size_t index = by.str() == "key" ? 0 : 1;
  return sorted(pairs_of(object).items(), [&](const Value& a, const Value& b) {
    const int c = compare_values(a.items()[index], b.items()[index], case_sensitive.boolean);
    return reverse.boolean ? -c : c;
  });
}

}  // namespace

Value attribute_path(const Value& item, const std::string& path) {
  Value value = item;
  for (const std::string& part : split_all(path, ".")) {
    if (value.is_container()) {
      const Value* v = value.entries().find(part);
      value = v != nullptr && v->kind != ValueKind::Hole ? *v : undefined_value();
    } else if (value.is_array_like()) {
      const double index = js::parse_int(part);
      if (std::isnan(index) || index < 0 || index >= static_cast<double>(value.items().size())) {
        return undefined_value();
      }
      value = Value(value.items()[static_cast<size_t>(index)]);
    } else {
      return undefined_value();
    }
  }
  return value;
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.kind == ValueKind::Hole || b.kind == ValueKind::Hole) hole_error("sorting");
  if (a.kind == ValueKind::Null && b.kind == ValueKind::Null) return 0;
  if (a.kind == ValueKind::Null || b.kind == ValueKind::Null) {
    fail(ErrorKind::Usage, "cannot compare {} with {}", a_kind(a.kind), a_kind(b.kind));
  }
  if (a.kind == ValueKind::Undefined && b.kind == ValueKind::Undefined) return 0;
  if (a.kind == ValueKind::Undefined || b.kind == ValueKind::Undefined) {
    fail(ErrorKind::Usage, "cannot compare {} with {}", a_kind(a.kind), a_kind(b.kind));
  }
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind == ValueKind::Boolean; };
  if (numeric(a) && numeric(b)) {
    const double x = a.kind == ValueKind::Boolean ? (a.boolean ? 1 : 0) : a.number;
    const double y = b.kind == ValueKind::Boolean ? (b.boolean ? 1 : 0) : b.number;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind != b.kind) fail(ErrorKind::Usage, "cannot compare {} with {}", a_kind(a.kind), a_kind(b.kind));
  if (a.kind != ValueKind::String) fail(ErrorKind::Usage, "cannot order {} values", kind_name(a.kind));
  if (case_sensitive) return js::compare_utf16(a.str(), b.str());
  return js::compare_utf16(js::to_lower(a.str()), js::to_lower(b.str()));
}

// --- tests ---------------------------------------------------------------------------------------

namespace {

bool is_known_test(const std::string& name) {
  static const char* const kTests[] = {"boolean", "callable", "odd",       "even",     "false",   "true",     "none",
                                       "string",  "number",   "integer",   "iterable", "mapping", "sequence", "lower",
                                       "upper",   "defined",  "undefined", "equalto",  "eq"};
  return std::find_if(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; }) !=
         std::end(kTests);
}

[[noreturn]] void unknown_test(const std::string& name) {
  fail(ErrorKind::Unsupported, "the test 'is {}' is not supported", name);
}

}  // namespace

bool Interpreter::run_test(const std::string& name, const Value& v, const Value* argument) {
  if (!is_known_test(name)) unknown_test(name);
  if (v.kind == ValueKind::Hole) {
    if (name == "callable" || name == "number" || name == "integer" || name == "mapping" || name == "sequence") {
      return false;
    }
    hole_error("the test 'is " + name + "'");
  }
  if (name == "boolean") return v.kind == ValueKind::Boolean;
  if (name == "callable") return v.kind == ValueKind::Function;
  if (name == "odd" || name == "even") {
    if (v.kind != ValueKind::Integer) fail(ErrorKind::Usage, "'is {}' needs an integer, got {}", name, a_kind(v.kind));
    const double r = std::fmod(v.number, 2);
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "false") return v.kind == ValueKind::Boolean && !v.boolean;
  if (name == "true") return v.kind == ValueKind::Boolean && v.boolean;
  if (name == "none") return v.kind == ValueKind::Null;
  if (name == "string") return v.kind == ValueKind::String;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == ValueKind::Integer;
  if (name == "iterable") return v.kind == ValueKind::Array || v.kind == ValueKind::String;
  if (name == "mapping") return v.is_object_like();
  if (name == "sequence") return v.is_array_like() || v.is_object_like() || v.kind == ValueKind::String;
  if (name == "lower") return v.kind == ValueKind::String && v.str() == js::to_lower(v.str());
  if (name == "upper") return v.kind == ValueKind::String && v.str() == js::to_upper(v.str());
  if (name == "defined") return v.kind != ValueKind::Undefined;
  if (name == "undefined") return v.kind == ValueKind::Undefined;
  // equalto / eq: the reference passes no second operand to an `is` test, so they only work in
  // selectattr/rejectattr.
  if (argument == nullptr || argument->kind == ValueKind::Hole) {
    fail(ErrorKind::Usage, "'is {}' needs a value to compare with (use ==)", name);
  }
  return strict_equals(v, *argument);
}

// --- methods -------------------------------------------------------------------------------------

namespace {

Value string_method(Interpreter& in, const std::string& self, const std::string& name, std::vector<Value>& args) {
  if (name == "upper") return string_value(js::to_upper(self));
  if (name == "lower") return string_value(js::to_lower(self));
  if (name == "strip") return string_value(std::string(js::trim(self)));
  if (name == "lstrip") return string_value(std::string(js::trim_start(self)));
  if (name == "rstrip") return string_value(std::string(js::trim_end(self)));
  if (name == "title") return string_value(js::title_case(self));
  if (name == "capitalize") return string_value(js::capitalize(self));
  if (name == "startswith" || name == "endswith") {
    if (args.empty()) fail(ErrorKind::Usage, "{}() needs an argument", name);
    const Value& pattern = args[0];
    const auto matches = [&](const std::string& p) {
      if (p.size() > self.size()) return false;
      return name == "startswith" ? self.compare(0, p.size(), p) == 0
                                  : self.compare(self.size() - p.size(), p.size(), p) == 0;
    };
    if (pattern.kind == ValueKind::String) return bool_value(matches(pattern.str()));
    if (pattern.is_array_like()) {
      for (const Value& item : pattern.items()) {
        if (item.kind != ValueKind::String) fail(ErrorKind::Usage, "{}() tuple items must be strings", name);
        if (matches(item.str())) return bool_value(true);
      }
      return bool_value(false);
    }
    fail(ErrorKind::Usage, "{}() takes a string or a tuple of strings, got {}", name, a_kind(pattern.kind));
  }
  if (name == "split") {
    const Value sep = pick(arg_at(args, 0), nullptr, null_value());
    if (sep.kind != ValueKind::String && sep.kind != ValueKind::Null) {
      fail(ErrorKind::Usage, "split(): the separator must be a string or none, got {}", a_kind(sep.kind));
    }
    const Value maxsplit_value = pick(arg_at(args, 1), nullptr, int_value(-1));
    if (maxsplit_value.kind != ValueKind::Integer) fail(ErrorKind::Usage, "split(): maxsplit must be an integer");
    const double maxsplit = maxsplit_value.number;
    std::vector<Value> result;
    if (sep.kind == ValueKind::Null) {
      const std::string_view text = js::trim_start(self);
      size_t pos = 0;
      while (pos < text.size()) {
        // the next run of non-space characters
        size_t start = pos;
        while (start < text.size()) {
          size_t next = start;
          if (!js::is_space(js::next_code_point(text, next))) break;
          start = next;
        }
        if (start >= text.size()) break;
        size_t end = start;
        while (end < text.size()) {
          size_t next = end;
          if (js::is_space(js::next_code_point(text, next))) break;
          end = next;
        }
        if (maxsplit != -1 && static_cast<double>(result.size()) >= maxsplit) {
          result.push_back(string_value(std::string(text.substr(start))));
          break;
        }
        result.push_back(string_value(std::string(text.substr(start, end - start))));
        pos = end;
      }
    } else {
      if (sep.str().empty()) fail(ErrorKind::Usage, "split(): empty separator");
      std::vector<std::string> parts = split_all(self, sep.str());
      const double length = static_cast<double>(parts.size());
      if (maxsplit != -1 && length > maxsplit) {
        // result.push(result.splice(maxsplit).join(sep))
        double start = std::isnan(maxsplit) ? 0 : std::trunc(maxsplit);
        start = start < 0 ? std::max(length + start, 0.0) : std::min(start, length);
        const auto cut = static_cast<size_t>(start);
        std::vector<std::string> rest(parts.begin() + static_cast<std::ptrdiff_t>(cut), parts.end());
        parts.resize(cut);
        parts.push_back(join(rest, sep.str()));
      }
      for (std::string& p : parts) result.push_back(string_value(std::move(p)));
    }
    in.check_list_length(result.size());
    return array_value(std::move(result));
  }
  if (name == "replace") {
    if (args.size() < 2) fail(ErrorKind::Usage, "replace() needs two arguments");
    if (args[0].kind != ValueKind::String || args[1].kind != ValueKind::String) {
      fail(ErrorKind::Usage, "replace() arguments must be strings");
    }
    Value count = null_value();
    if (args.size() > 2) {
      if (args[2].kind == ValueKind::KwArgs) {
        count = pick(kwarg(args[2].entries(), "count"), nullptr, null_value());
      } else {
        count = args[2].kind == ValueKind::Hole ? undefined_value() : args[2];
      }
    }
    if (count.kind != ValueKind::Integer && count.kind != ValueKind::Null) {
      fail(ErrorKind::Usage, "replace(): count must be an integer or none");
    }
    std::string out = js_replace(self, args[0].str(), args[1].str(),
                                 count.kind == ValueKind::Integer ? std::optional<double>(count.number) : std::nullopt);
    in.check_string_size(out.size());
    return string_value(std::move(out));
  }
  fail(ErrorKind::Internal, "string method {} has no implementation", name);
}

Value object_method(const Value& self, const std::string& name, std::vector<Value>& args) {
  if (name == "get") {
    if (args.empty() || args[0].kind != ValueKind::String) {
      fail(ErrorKind::Usage, "get() needs a string key, got {}", args.empty() ? "nothing" : a_kind(args[0].kind));
    }
    return pick(kwarg(self.entries(), args[0].str()), arg_at(args, 1), null_value());
  }
  if (name == "items") return pairs_of(self);
  if (name == "keys") {
    std::vector<Value> keys;
    for (const auto& entry : self.entries().entries()) keys.push_back(string_value(entry.first));
    return array_value(std::move(keys));
  }
  if (name == "values") {
    std::vector<Value> values;
    for (const auto& entry : self.entries().entries()) values.push_back(entry.second);
    return array_value(std::move(values));
  }
  if (name == "dictsort") return dictsort(self, args);
  fail(ErrorKind::Internal, "dict method {} has no implementation", name);
}

bool is_string_method(const std::string& name) {
  static const char* const kNames[] = {"upper",  "lower",      "strip",    "title", "capitalize", "rstrip",
                                       "lstrip", "startswith", "endswith", "split", "replace"};
  return std::find_if(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; }) !=
         std::end(kNames);
}

bool is_object_method(const std::string& name) {
  return name == "get" || name == "items" || name == "keys" || name == "values" || name == "dictsort";
}

}  // namespace

Value Interpreter::property_of(const Value& object, const std::string& name) {
  if (object.kind == ValueKind::String) {
    if (name == "length") return int_value(static_cast<double>(js::utf16_length(object.str())));
    if (!is_string_method(name)) return undefined_value();
    const auto self = object.string;
    return function_value(name, [self, name](Interpreter& in, std::vector<Value>& args, Env*) {
      return string_method(in, *self, name, args);
    });
  }
  if (object.is_array_like()) {
    if (name == "length") return int_value(static_cast<double>(object.items().size()));
    return undefined_value();
  }
  if (object.is_object_like()) {
    if (!is_object_method(name)) return undefined_value();
    return function_value(name, [object, name](Interpreter&, std::vector<Value>& args, Env*) {
      return object_method(object, name, args);
    });
  }
  return undefined_value();
}

// --- filters -------------------------------------------------------------------------------------

Value Interpreter::apply_filter(const Value& operand, const Node& filter, Env* env) {
  if (filter.kind == NodeKind::Identifier) return apply_named_filter(operand, filter.name, env);
  if (filter.kind == NodeKind::Call) {
    if (filter.operands[0]->kind != NodeKind::Identifier) {
      fail(ErrorKind::Unsupported, "a filter must be a name or a call of a name, not a {}",
           node_kind_name(filter.operands[0]->kind));
    }
    return apply_call_filter(operand, filter, env);
  }
  fail(ErrorKind::Unsupported, "a filter must be a name or a call of a name, not a {}", node_kind_name(filter.kind));
}

Value Interpreter::apply_named_filter(const Value& v, const std::string& name, Env* env) {
  if (name == "safe") return v;
  if (name == "tojson") return string_value(to_json(v, JsonOptions{}, true));
  if (v.is_array_like()) {
    const auto& items = v.items();
    if (name == "list") return v;
    if (name == "first") return items.empty() ? hole_value() : items.front();
    if (name == "last") return items.empty() ? hole_value() : items.back();
    if (name == "length") return int_value(static_cast<double>(items.size()));
    if (name == "reverse") return array_value(std::vector<Value>(items.rbegin(), items.rend()));
    if (name == "sort")
      return sorted(items, [](const Value& a, const Value& b) { return compare_values(a, b, false); });
    if (name == "join") {
      std::string out;
      for (const Value& item : items) out += raw_join_piece(item);
      check_string_size(out.size());
      return string_value(std::move(out));
    }
    if (name == "string") return string_value(to_json(v, JsonOptions{}, false));
    if (name == "unique") {
      std::vector<Value> out;
      for (const Value& item : items) {
        if (item.kind == ValueKind::Hole) hole_error("the filter 'unique'");
        if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return same_value_zero(o, item); })) {
          out.push_back(item);
        }
      }
      return array_value(std::move(out));
    }
    unknown_filter(name, v);
  }
  if (v.kind == ValueKind::String) {
    const std::string& s = v.str();
    if (name == "length") return int_value(static_cast<double>(js::utf16_length(s)));
    if (name == "upper") return string_value(js::to_upper(s));
    if (name == "lower") return string_value(js::to_lower(s));
    if (name == "title") return string_value(js::title_case(s));
    if (name == "capitalize") return string_value(js::capitalize(s));
    if (name == "trim") return string_value(std::string(js::trim(s)));
    if (name == "indent") return string_value(indent_lines(s, "    ", false, false));
    if (name == "join" || name == "string") return v;
    if (name == "int") {
      const double n = js::parse_int(s);
      return int_value(std::isnan(n) ? 0 : n);
    }
    if (name == "float") {
      const double n = js::parse_float(s);
      return float_value(std::isnan(n) ? 0 : n);
    }
    unknown_filter(name, v);
  }
  if (v.is_number()) {
    if (name == "abs")
      return v.kind == ValueKind::Integer ? int_value(std::fabs(v.number)) : float_value(std::fabs(v.number));
    if (name == "int") return int_value(std::floor(v.number));
    if (name == "float") return float_value(v.number);
    if (name == "string") return string_value(to_display_string(v));
    unknown_filter(name, v);
  }
  if (v.is_object_like()) {
    if (name == "items") return pairs_of(v);
    if (name == "length") return int_value(static_cast<double>(v.entries().size()));
    if (is_object_method(name)) {
      std::vector<Value> no_args;
      return object_method(v, name, no_args);
    }
    unknown_filter(name, v);
  }
  if (v.kind == ValueKind::Boolean) {
    if (name == "bool") return v;
    if (name == "int") return int_value(v.boolean ? 1 : 0);
    if (name == "float") return float_value(v.boolean ? 1 : 0);
    if (name == "string") return string_value(v.boolean ? "true" : "false");
    unknown_filter(name, v);
  }
  (void)env;
  filter_type_error(name, v);
}

Value Interpreter::apply_call_filter(const Value& v, const Node& call, Env* env) {
  const std::string& name = call.operands[0]->name;
  const NodeList& arg_nodes = call.params;
  std::vector<Value> args;
  OrderedMap kw;

  if (name == "tojson") {
    evaluate_arguments(arg_nodes, env, args, kw);
    JsonOptions options;
    const Value indent = pick(kwarg(kw, "indent"), nullptr, null_value());
    if (indent.kind == ValueKind::Integer) {
      if (!std::isfinite(indent.number) || std::fabs(indent.number) > 1e6) {
        fail(ErrorKind::Unsupported, "tojson indent {} is not supported", js::number_to_string(indent.number));
      }
      options.indent = static_cast<int>(indent.number);
    } else if (indent.kind != ValueKind::Null) {
      fail(ErrorKind::Usage, "tojson: indent must be an integer");
    }
    const Value ensure_ascii = pick(kwarg(kw, "ensure_ascii"), nullptr, bool_value(false));
    if (ensure_ascii.kind != ValueKind::Boolean) fail(ErrorKind::Usage, "tojson: ensure_ascii must be a boolean");
    options.ensure_ascii = ensure_ascii.boolean;
    const Value sort_keys = pick(kwarg(kw, "sort_keys"), nullptr, bool_value(false));
    if (sort_keys.kind != ValueKind::Boolean) fail(ErrorKind::Usage, "tojson: sort_keys must be a boolean");
    options.sort_keys = sort_keys.boolean;
    const Value separators = pick(kwarg(kw, "separators"), nullptr, null_value());
    if (separators.is_array_like()) {
      const auto& pair = separators.items();
      if (pair.size() != 2 || pair[0].kind != ValueKind::String || pair[1].kind != ValueKind::String) {
        fail(ErrorKind::Usage, "tojson: separators must be a tuple of two strings");
      }
      options.separators = std::make_pair(pair[0].str(), pair[1].str());
    } else if (separators.kind != ValueKind::Null) {
      fail(ErrorKind::Usage, "tojson: separators must be a tuple of two strings");
    }
    std::string out = to_json(v, options, true);
    check_string_size(out.size());
    return string_value(std::move(out));
  }
  if (name == "join") {
    std::vector<std::string> pieces;
    if (v.kind == ValueKind::String) {
      pieces = js::code_points(v.str());
    } else if (v.is_array_like()) {
      for (const Value& item : v.items()) pieces.push_back(raw_join_piece(item));
    } else {
      filter_type_error(name, v);
    }
    evaluate_arguments(arg_nodes, env, args, kw);
    const Value sep = pick(arg_at(args, 0), kwarg(kw, "separator"), string_value(""));
    if (sep.kind != ValueKind::String) fail(ErrorKind::Usage, "join: the separator must be a string");
    std::string out = join(pieces, sep.str());
    check_string_size(out.size());
    return string_value(std::move(out));
  }
  if (name == "int" || name == "float") {
    evaluate_arguments(arg_nodes, env, args, kw);
    const bool is_int = name == "int";
    const Value fallback = pick(arg_at(args, 0), kwarg(kw, "default"), is_int ? int_value(0) : float_value(0));
    if (v.kind == ValueKind::String) {
      const double n = is_int ? js::parse_int(v.str()) : js::parse_float(v.str());
      if (std::isnan(n)) return fallback;
      return is_int ? int_value(n) : float_value(n);
    }
    if (v.is_number()) return v;
    if (v.kind == ValueKind::Boolean) return is_int ? int_value(v.boolean ? 1 : 0) : float_value(v.boolean ? 1 : 0);
    filter_type_error(name, v);
  }
  if (name == "default") {
    evaluate_arguments(arg_nodes, env, args, kw);
    const Value fallback = pick(arg_at(args, 0), nullptr, string_value(""));
    const Value boolean = pick(arg_at(args, 1), kwarg(kw, "boolean"), bool_value(false));
    if (boolean.kind != ValueKind::Boolean) fail(ErrorKind::Usage, "default: the boolean flag must be a boolean");
    if (v.kind == ValueKind::Undefined || (boolean.boolean && !truthy(v))) return fallback;
    return v;
  }

  if (v.is_array_like()) {
    const auto& items = v.items();
    if (name == "sort") {
      evaluate_arguments(arg_nodes, env, args, kw);
      const Value reverse = pick(arg_at(args, 0), kwarg(kw, "reverse"), bool_value(false));
      if (reverse.kind != ValueKind::Boolean) fail(ErrorKind::Usage, "sort: reverse must be a boolean");
      const Value case_sensitive = pick(arg_at(args, 1), kwarg(kw, "case_sensitive"), bool_value(false));
      if (case_sensitive.kind != ValueKind::Boolean) fail(ErrorKind::Usage, "sort: case_sensitive must be a boolean");
      const Value attribute = pick(arg_at(args, 2), kwarg(kw, "attribute"), null_value());
      if (attribute.kind != ValueKind::String && attribute.kind != ValueKind::Integer &&
          attribute.kind != ValueKind::Null) {
        fail(ErrorKind::Usage, "sort: attribute must be a string, an integer or none");
      }
      const auto key = [&](const Value& item) {
        if (attribute.kind == ValueKind::Null) return item;
        const std::string path =
            attribute.kind == ValueKind::Integer ? js::number_to_string(attribute.number) : attribute.str();
        return attribute_path(item, path);
      };
      return sorted(items, [&](const Value& a, const Value& b) {
        const int c = compare_values(key(a), key(b), case_sensitive.boolean);
        return reverse.boolean ? -c : c;
      });
    }
    if (name == "selectattr" || name == "rejectattr") {
      const bool select = name == "selectattr";
      for (const Value& item : items) {
        if (!item.is_container()) fail(ErrorKind::Usage, "{} needs a list of dicts, found {}", name, a_kind(item.kind));
      }
      for (const NodePtr& a : arg_nodes) {
        if (a->kind != NodeKind::String) fail(ErrorKind::Unsupported, "{} arguments must be string literals", name);
      }
      std::vector<Value> evaluated;
      for (const NodePtr& a : arg_nodes) evaluated.push_back(evaluate(*a, env));
      const Value* test_name = evaluated.size() > 1 ? &evaluated[1] : nullptr;
      const Value* test_value = evaluated.size() > 2 ? &evaluated[2] : nullptr;
      if (test_name != nullptr && !is_known_test(test_name->str())) unknown_test(test_name->str());
      std::vector<Value> out;
      for (const Value& item : items) {
        if (evaluated.empty()) fail(ErrorKind::Usage, "{} needs an attribute name", name);
        const Value* a = item.entries().find(evaluated[0].str());
        bool result = false;
        if (a != nullptr && a->kind != ValueKind::Hole) {
          result = test_name != nullptr ? run_test(test_name->str(), *a, test_value) : truthy(*a);
        }
        if (result == select) out.push_back(item);
      }
      return array_value(std::move(out));
    }
    if (name == "map") {
      evaluate_arguments(arg_nodes, env, args, kw);
      const Value* attribute = kw.find("attribute");
      if (attribute == nullptr) {
        fail(ErrorKind::Unsupported, "map() without attribute= (mapping a filter over a list) is not supported");
      }
      if (attribute->kind != ValueKind::String) fail(ErrorKind::Usage, "map: attribute must be a string");
      const Value* fallback = kwarg(kw, "default");
      std::vector<Value> out;
      for (const Value& item : items) {
        if (!item.is_container()) fail(ErrorKind::Usage, "map(attribute=...) needs dicts, found {}", a_kind(item.kind));
        Value value = attribute_path(item, attribute->str());
        if (value.kind == ValueKind::Undefined && fallback != nullptr) value = *fallback;
        out.push_back(std::move(value));
      }
      return array_value(std::move(out));
    }
    unknown_filter(name, v);
  }
  if (v.kind == ValueKind::String) {
    if (name == "indent") {
      evaluate_arguments(arg_nodes, env, args, kw);
      const Value width = pick(arg_at(args, 0), kwarg(kw, "width"), int_value(4));
      if (width.kind != ValueKind::Integer) fail(ErrorKind::Usage, "indent: width must be an integer");
      const Value first = pick(arg_at(args, 1), kwarg(kw, "first"), bool_value(false));
      const Value blank = pick(arg_at(args, 2), kwarg(kw, "blank"), bool_value(false));
      std::string out = indent_lines(v.str(), repeat_spaces(width.number), raw_truthy(first), raw_truthy(blank));
      check_string_size(out.size());
      return string_value(std::move(out));
    }
    if (name == "replace") {
      evaluate_arguments(arg_nodes, env, args, kw);
      args.push_back(object_value(std::move(kw), true));
      return string_method(*this, v.str(), "replace", args);
    }
    unknown_filter(name, v);
  }
  if (v.is_object_like()) {
    if (!is_object_method(name)) unknown_filter(name, v);
    evaluate_arguments(arg_nodes, env, args, kw);
    if (!kw.empty()) args.push_back(object_value(std::move(kw), true));
    return object_method(v, name, args);
  }
  filter_type_error(name, v);
}

}  // namespace ferry::chat
