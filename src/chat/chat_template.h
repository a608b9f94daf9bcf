// Chat templates: the Jinja programs that Hugging Face checkpoints ship to turn a conversation
// into the model's prompt text. ferry has its own interpreter for the Jinja subset these
// templates use, and renders byte for byte what Hugging Face's @huggingface/jinja renders.
//
//   auto t = chat::load_chat_template("models/qwen3");          // dir, tokenizer_config.json, .gguf, .jinja
//   chat::ChatInputs in;
//   in.messages = {{{"role", "user"}, {"content", "Hi"}}};
//   in.add_generation_prompt = true;
//   std::string prompt = t.apply(in);
//
// A template that uses something the reference renderer does not have fails with
// Error(Unsupported) naming the construct and the line; a template that rejects the conversation
// (raise_exception) fails with Error(Usage). Never a wrong prompt.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/interpreter.h"

namespace ferry::chat {

// What transformers' apply_chat_template passes to a template.
struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role": ..., "content": ...}, ...]
  nlohmann::ordered_json tools;      // a list of tool schemas; null: no tools (passed as none)
  nlohmann::ordered_json documents;  // for RAG templates; null: none (passed as none)
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // Any other variables the template reads (enable_thinking, reasoning_effort, date_string, ...).
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses `source`. `origin` names the template in errors ("tokenizer_config.json", a file).
  // Error(Format) for syntax errors, Error(Unsupported) for statements the reference lacks.
  static ChatTemplate parse(std::string_view source, std::string origin);

  // Renders with `variables` (a JSON object; each key becomes a template variable).
  std::string render(const nlohmann::ordered_json& variables, const RenderLimits& limits = {}) const;
  // Renders a conversation: messages, tools, documents, add_generation_prompt, bos_token,
  // eos_token and the extra variables.
  std::string apply(const ChatInputs& inputs, const RenderLimits& limits = {}) const;

  const std::string& origin() const;
  const std::string& source() const;  // as given (sanitised to UTF-8)

 private:
  struct Program;
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// A template together with the special tokens it is rendered with.
struct LoadedChatTemplate {
  ChatTemplate chat_template;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::vector<std::string> names;  // the named templates the source offered (empty: just one)
};

// Loads the chat template of `path`: a model directory (chat_template.jinja, else
// tokenizer_config.json, else chat_template.json), a tokenizer_config.json, a GGUF
// (tokenizer.chat_template) or a .jinja file. When the source offers several named templates,
// `name` picks one; by default "tool_use" when `with_tools` and it exists, else "default", as
// transformers does. Error(Config) when there is no template, naming what was looked at.
LoadedChatTemplate load_chat_template(const std::string& path, bool with_tools = false, const std::string& name = "");

// The template text alone (same lookup as load_chat_template), for `ferry inspect` and tests.
std::string read_chat_template_source(const std::string& path, bool with_tools = false, const std::string& name = "");

}  // namespace ferry::chat
