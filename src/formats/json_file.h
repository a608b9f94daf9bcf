// JSON files next to a checkpoint (config.json, generation_config.json, index files) and the
// typed getters config readers use, so every missing or mistyped field gives the same kind of
// message: "config.json: missing field 'hidden_size' (needed for the embedding width)".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ferry {

// Reads and parses a JSON file. Error(Io) when the file cannot be read; Error(`kind`) (Config by
// default) naming the file, line, column and byte when it is not valid JSON.
nlohmann::json read_json_file(const std::string& path, ErrorKind kind = ErrorKind::Config);

// Parses JSON text; `name` is used in error messages, `kind` is the error kind for bad JSON.
nlohmann::json parse_json_text(std::string_view text, const std::string& name, ErrorKind kind = ErrorKind::Config);

// "an integer 5", "a string \"x\"", "an array", ... for messages about a value of the wrong type.
std::string json_describe(const nlohmann::json& value);

// Required fields of the object `j` read from `file`. A missing field is
// Error(Config) "<file>: missing field '<key>'" plus " (needed for <needed_for>)" when given;
// a field of the wrong type (or an integer out of range) is Error(Config) saying what it holds.
int64_t json_int(const nlohmann::json& j, std::string_view key, std::string_view file,
                 std::string_view needed_for = {});
double json_float(const nlohmann::json& j, std::string_view key, std::string_view file,
                  std::string_view needed_for = {});  // integers are accepted too
bool json_bool(const nlohmann::json& j, std::string_view key, std::string_view file, std::string_view needed_for = {});
std::string json_string(const nlohmann::json& j, std::string_view key, std::string_view file,
                        std::string_view needed_for = {});

// Optional fields: nullopt when the key is absent or null; Error(Config) when present with the
// wrong type.
std::optional<int64_t> json_opt_int(const nlohmann::json& j, std::string_view key, std::string_view file);
std::optional<double> json_opt_float(const nlohmann::json& j, std::string_view key, std::string_view file);
std::optional<bool> json_opt_bool(const nlohmann::json& j, std::string_view key, std::string_view file);
std::optional<std::string> json_opt_string(const nlohmann::json& j, std::string_view key, std::string_view file);

// A field that may be one integer or a list of integers (e.g. eos_token_id). Absent or null gives
// an empty list.
std::vector<int64_t> json_opt_int_list(const nlohmann::json& j, std::string_view key, std::string_view file);

}  // namespace ferry
