#include "formats/json_file.h"

#include <cmath>
#include <limits>

#include "formats/checkpoint.h"

namespace ferry {

using nlohmann::json;

namespace {

// Values quoted in messages are cut short: a config field can be a whole chat template.
std::string short_dump(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 60;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

void require_object(const json& j, std::string_view file) {
  if (!j.is_object()) fail(ErrorKind::Config, "{}: expected a JSON object, found {}", file, json_describe(j));
}

// The value of `key`, or nullptr when it is absent or null.
const json* lookup(const json& j, std::string_view key, std::string_view file) {
  require_object(j, file);
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& lookup_required(const json& j, std::string_view key, std::string_view file, std::string_view needed_for) {
  const json* value = lookup(j, key, file);
  if (value == nullptr) {
    if (needed_for.empty()) fail(ErrorKind::Config, "{}: missing field '{}'", file, key);
    fail(ErrorKind::Config, "{}: missing field '{}' (needed for {})", file, key, needed_for);
  }
  return *value;
}

[[noreturn]] void wrong_type(const json& value, std::string_view key, std::string_view file, std::string_view want) {
  fail(ErrorKind::Config, "{}: field '{}' is {}, expected {}", file, key, json_describe(value), want);
}

int64_t to_int(const json& value, std::string_view key, std::string_view file) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) wrong_type(value, key, file, "an int64");
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    // Some exporters write integers as 4096.0; accept those, refuse 0.5.
    const double d = value.get<double>();
    if (std::isfinite(d) && std::trunc(d) == d && d >= -9.2e18 && d <= 9.2e18) return static_cast<int64_t>(d);
  }
  wrong_type(value, key, file, "an integer");
}

double to_float(const json& value, std::string_view key, std::string_view file) {
  if (!value.is_number()) wrong_type(value, key, file, "a number");
  return value.get<double>();
}

bool to_bool(const json& value, std::string_view key, std::string_view file) {
  if (!value.is_boolean()) wrong_type(value, key, file, "true or false");
  return value.get<bool>();
}

std::string to_string(const json& value, std::string_view key, std::string_view file) {
  if (!value.is_string()) wrong_type(value, key, file, "a string");
  return value.get<std::string>();
}

}  // namespace

json parse_json_text(std::string_view text, const std::string& name, ErrorKind kind) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail(kind, "{}: not valid JSON (byte {}): {}", name, e.byte, e.what());
  } catch (const json::exception& e) {
    fail(kind, "{}: not valid JSON: {}", name, e.what());
  }
}

json read_json_file(const std::string& path, ErrorKind kind) {
  const auto file = MappedFile::open(path);
  const auto* bytes = reinterpret_cast<const char*>(file->data());
  return parse_json_text(std::string_view(bytes, file->size()), path, kind);
}

std::string json_describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean " + short_dump(value);
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer " + short_dump(value);
    case json::value_t::number_float:
      return "a number " + short_dump(value);
    case json::value_t::string:
      return "a string " + short_dump(value);
    case json::value_t::array:
      return "an array of " + std::to_string(value.size());
    case json::value_t::object:
      return "an object";
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "a discarded value";
  }
  return "a value";
}

int64_t json_int(const json& j, std::string_view key, std::string_view file, std::string_view needed_for) {
  return to_int(lookup_required(j, key, file, needed_for), key, file);
}

double json_float(const json& j, std::string_view key, std::string_view file, std::string_view needed_for) {
  return to_float(lookup_required(j, key, file, needed_for), key, file);
}

bool json_bool(const json& j, std::string_view key, std::string_view file, std::string_view needed_for) {
  return to_bool(lookup_required(j, key, file, needed_for), key, file);
}

std::string json_string(const json& j, std::string_view key, std::string_view file, std::string_view needed_for) {
  return to_string(lookup_required(j, key, file, needed_for), key, file);
}

std::optional<int64_t> json_opt_int(const json& j, std::string_view key, std::string_view file) {
  const json* value = lookup(j, key, file);
  if (value == nullptr) return std::nullopt;
  return to_int(*value, key, file);
}

std::optional<double> json_opt_float(const json& j, std::string_view key, std::string_view file) {
  const json* value = lookup(j, key, file);
  if (value == nullptr) return std::nullopt;
  return to_float(*value, key, file);
}

std::optional<bool> json_opt_bool(const json& j, std::string_view key, std::string_view file) {
  const json* value = lookup(j, key, file);
  if (value == nullptr) return std::nullopt;
  return to_bool(*value, key, file);
}

std::optional<std::string> json_opt_string(const json& j, std::string_view key, std::string_view file) {
  const json* value = lookup(j, key, file);
  if (value == nullptr) return std::nullopt;
  return to_string(*value, key, file);
}

std::vector<int64_t> json_opt_int_list(const json& j, std::string_view key, std::string_view file) {
  const json* value = lookup(j, key, file);
  if (value == nullptr) return {};
  if (!value->is_array()) return {to_int(*value, key, file)};
  std::vector<int64_t> out;
  out.reserve(value->size());
  for (const json& item : *value) out.push_back(to_int(item, key, file));
  return out;
}

}  // namespace ferry
