#include <gtest/gtest.h>

#include "format_test_util.h"
#include "formats/json_file.h"

using namespace ferry;
using namespace ferry::testing;
using nlohmann::json;

TEST(JsonFile, ReadsAFile) {
  TempDir dir("json_file");
  const std::string path = dir.write_text("config.json", R"({"hidden_size": 64, "name": "x"})");
  const json j = read_json_file(path);
  EXPECT_EQ(j["hidden_size"].get<int>(), 64);
}

TEST(JsonFile, MissingFileIsIo) {
  TempDir dir("json_file");
  expect_error([&] { read_json_file(dir.file("config.json")); }, ErrorKind::Io, {"config.json", "No such file"});
}

TEST(JsonFile, BadJsonIsConfigErrorWithPosition) {
  TempDir dir("json_file");
  const std::string path = dir.write_text("config.json", "{\n  \"hidden_size\": 64,\n  \"x\": tru, \"y\": 1\n}");
  expect_error([&] { read_json_file(path); }, ErrorKind::Config, {path, "line 3", "column", "byte"});
  const std::string empty = dir.write_text("empty.json", "");
  expect_error([&] { read_json_file(empty); }, ErrorKind::Config, {empty, "not valid JSON"});
  expect_error([&] { read_json_file(path, ErrorKind::Format); }, ErrorKind::Format, {path});
}

TEST(JsonFile, RequiredGetters) {
  const json j = json::parse(R"({"hidden_size": 64, "eps": 1e-5, "theta": 10000, "tie": true, "act": "silu",
                                 "whole": 4096.0, "half": 0.5, "big": 18446744073709551615, "nothing": null})");
  EXPECT_EQ(json_int(j, "hidden_size", "config.json"), 64);
  EXPECT_EQ(json_int(j, "whole", "config.json"), 4096);
  EXPECT_DOUBLE_EQ(json_float(j, "eps", "config.json"), 1e-5);
  EXPECT_DOUBLE_EQ(json_float(j, "theta", "config.json"), 10000.0);
  EXPECT_TRUE(json_bool(j, "tie", "config.json"));
  EXPECT_EQ(json_string(j, "act", "config.json"), "silu");

  expect_error([&] { json_int(j, "num_layers", "config.json", "the number of decoder layers"); }, ErrorKind::Config,
               {"config.json: missing field 'num_layers' (needed for the number of decoder layers)"});
  expect_error([&] { json_int(j, "nothing", "config.json"); }, ErrorKind::Config, {"missing field 'nothing'"});
  expect_error([&] { json_int(j, "act", "config.json"); }, ErrorKind::Config,
               {"config.json", "'act'", "a string \"silu\"", "expected an integer"});
  expect_error([&] { json_int(j, "half", "config.json"); }, ErrorKind::Config, {"'half'", "0.5"});
  expect_error([&] { json_int(j, "big", "config.json"); }, ErrorKind::Config, {"'big'", "18446744073709551615"});
  expect_error([&] { json_float(j, "act", "config.json"); }, ErrorKind::Config, {"'act'", "a number"});
  expect_error([&] { json_bool(j, "hidden_size", "config.json"); }, ErrorKind::Config, {"'hidden_size'", "64"});
  expect_error([&] { json_string(j, "tie", "config.json"); }, ErrorKind::Config, {"'tie'", "a boolean true"});
  expect_error([&] { json_int(json::array(), "x", "config.json"); }, ErrorKind::Config,
               {"config.json", "expected a JSON object"});
}

TEST(JsonFile, OptionalGetters) {
  const json j = json::parse(R"({"a": 3, "b": null, "f": 2.5, "t": false, "s": "x", "eos": [2, 7], "one": 5})");
  EXPECT_EQ(json_opt_int(j, "a", "c.json"), 3);
  EXPECT_EQ(json_opt_int(j, "b", "c.json"), std::nullopt);
  EXPECT_EQ(json_opt_int(j, "zz", "c.json"), std::nullopt);
  EXPECT_EQ(json_opt_float(j, "f", "c.json"), 2.5);
  EXPECT_EQ(json_opt_bool(j, "t", "c.json"), false);
  EXPECT_EQ(json_opt_string(j, "s", "c.json"), "x");
  EXPECT_EQ(json_opt_int_list(j, "eos", "c.json"), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(json_opt_int_list(j, "one", "c.json"), (std::vector<int64_t>{5}));
  EXPECT_TRUE(json_opt_int_list(j, "zz", "c.json").empty());
  expect_error([&] { json_opt_int(j, "s", "c.json"); }, ErrorKind::Config, {"c.json", "'s'"});
  expect_error([&] { json_opt_bool(j, "a", "c.json"); }, ErrorKind::Config, {"'a'", "true or false"});
  const json bad = json::parse(R"({"eos": [2, "x"]})");
  expect_error([&] { json_opt_int_list(bad, "eos", "c.json"); }, ErrorKind::Config, {"'eos'", "\"x\""});
}
