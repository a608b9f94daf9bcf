// The names every template starts with: true/false/none (also title-cased), namespace(),
// range(), raise_exception() and strftime_now(), as the reference renderer defines them.
#include <fmt/format.h>
#include <time.h>

#include <cmath>
#include <ctime>

#include "chat/interpreter.h"
#include "chat/js_text.h"
#include "core/error.h"

namespace ferry::chat {

namespace {

// One [key, value] pair for namespace([...]): a two-item list, or a two-character string.
std::pair<std::string, Value> namespace_entry(const Value& pair) {
  std::vector<Value> values;
  if (pair.is_array_like()) {
    values = pair.items();
  } else if (pair.kind == ValueKind::String) {
    for (std::string& c : js::code_points(pair.str())) values.push_back(string_value(std::move(c)));
  }
  if (values.size() != 2) fail(ErrorKind::Usage, "namespace() expects a dict or a list of [key, value] pairs");
  if (values[0].kind != ValueKind::String) fail(ErrorKind::Usage, "namespace() keys must be strings");
  return {values[0].str(), values[1]};
}

Value make_namespace(Interpreter& in, std::vector<Value>& args) {
  std::vector<Value> positional = args;
  OrderedMap keywords;
  if (!positional.empty() && positional.back().kind == ValueKind::KwArgs) {
    keywords = positional.back().entries();
    positional.pop_back();
  }
  if (positional.size() > 1) fail(ErrorKind::Usage, "namespace() takes at most 1 argument, got {}", positional.size());
  Namespace* ns = in.new_namespace();
  if (positional.size() == 1) {
    const Value& source = positional[0];
    if (source.is_object_like()) {
      for (const auto& [key, value] : source.entries().entries()) ns->map.set(key, value);
    } else if (source.is_array_like()) {
      for (const Value& pair : source.items()) {
        auto [key, value] = namespace_entry(pair);
        ns->map.set(std::move(key), std::move(value));
      }
    } else {
      if (source.kind == ValueKind::Hole) hole_error("namespace()");
      fail(ErrorKind::Usage, "namespace() cannot start from {}", a_kind(source.kind));
    }
  }
  for (const auto& [key, value] : keywords.entries()) ns->map.set(key, value);
  return namespace_value(ns);
}

// range() as the reference's JavaScript runs it: numbers only, floats stepping as floats.
Value make_range(Interpreter& in, std::vector<Value>& args) {
  std::vector<double> n;
  for (const Value& a : args) {
    if (!a.is_number()) fail(ErrorKind::Unsupported, "range() of {} is not supported (numbers only)", a_kind(a.kind));
    n.push_back(a.number);
  }
  if (n.empty()) return array_value({});
  double start = 0, stop = 0, step = 1;
  if (n.size() == 1) {
    stop = n[0];
  } else {
    start = n[0];
    stop = n[1];
    if (n.size() > 2) step = n[2];
  }
  if (step == 0) fail(ErrorKind::Usage, "range() step must not be zero");
  if (std::isnan(step)) return array_value({});
  const double span = step > 0 ? stop - start : start - stop;
  const double count = span > 0 ? std::ceil(span / std::fabs(step)) : 0;
  if (!(count <= static_cast<double>(in.limits().max_list_length)))
    in.check_list_length(in.limits().max_list_length + 1);
  std::vector<Value> items;
  for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
    items.push_back(js::is_integral(i) ? int_value(i) : float_value(i));
    in.check_list_length(items.size());
  }
  return array_value(std::move(items));
}

// The reference's strftime: %Y %m %d %b %B %H %M %% in local time, English month names.
std::string strftime_now(const std::string& format) {
  static const char* const kShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  static const char* const kLong[] = {"January", "February", "March",     "April",   "May",      "June",
                                      "July",    "August",   "September", "October", "November", "December"};
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  localtime_r(&now, &t);
  const auto pad2 = [](int v) { return fmt::format("{:02d}", v); };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[i + 1];
      std::string piece;
      bool known = true;
      switch (c) {
        case 'Y':
          piece = std::to_string(t.tm_year + 1900);
          break;
        case 'm':
          piece = pad2(t.tm_mon + 1);
          break;
        case 'd':
          piece = pad2(t.tm_mday);
          break;
        case 'b':
          piece = kShort[t.tm_mon];
          break;
        case 'B':
          piece = kLong[t.tm_mon];
          break;
        case 'H':
          piece = pad2(t.tm_hour);
          break;
        case 'M':
          piece = pad2(t.tm_min);
          break;
        case '%':
          piece = "%";
          break;
        default:
          known = false;
      }
      if (known) {
        out += piece;
        ++i;
        continue;
      }
    }
    out += format[i];
  }
  return out;
}

}  // namespace

void Interpreter::declare_globals() {
  global_->vars.set("false", bool_value(false));
  global_->vars.set("true", bool_value(true));
  global_->vars.set("none", null_value());
  global_->vars.set("raise_exception",
                    function_value("raise_exception", [](Interpreter&, std::vector<Value>& args, Env*) -> Value {
                      std::string message;
                      if (!args.empty() && args[0].kind != ValueKind::Hole && args[0].kind != ValueKind::Undefined) {
                        message = args[0].kind == ValueKind::Null ? "null" : raw_to_string(args[0]);
                      }
                      fail(ErrorKind::Usage, "the template refused the conversation: {}", message);
                    }));
  global_->vars.set("range", function_value("range", [](Interpreter& in, std::vector<Value>& args, Env*) {
                      return make_range(in, args);
                    }));
  global_->vars.set("strftime_now", function_value("strftime_now", [](Interpreter&, std::vector<Value>& args, Env*) {
                      if (args.empty() || args[0].kind != ValueKind::String)
                        fail(ErrorKind::Usage, "strftime_now() needs a format string");
                      return string_value(strftime_now(args[0].str()));
                    }));
  global_->vars.set("True", bool_value(true));
  global_->vars.set("False", bool_value(false));
  global_->vars.set("None", null_value());
  namespace_function_ = function_value(
      "namespace", [](Interpreter& in, std::vector<Value>& args, Env*) { return make_namespace(in, args); });
}

}  // namespace ferry::chat
