// What `ferry template`, `ferry chat` and `ferry generate --chat` share: the options that pick a
// chat template and set its variables, and reading a conversation from a JSON file.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace ferry::cli {

struct ChatTemplateOptions {
  std::string template_file;      // --template FILE.jinja: use this instead of the model's
  std::string template_name;      // --template-name NAME: one of several named templates
  std::vector<std::string> vars;  // --var KEY=JSON (repeatable): extra template variables
  std::string system;             // --system TEXT: a system message first

  void add_to(CLI::App& cmd);
  // The --var assignments as a JSON object; a value that is not JSON is taken as a string.
  nlohmann::ordered_json extra() const;
};

// The template to render with: --template FILE if given, else the model's (directory,
// tokenizer_config.json or GGUF). Special tokens come from the model when there is one.
chat::LoadedChatTemplate load_template_for(const std::string& model, const ChatTemplateOptions& options,
                                           bool with_tools);

// A conversation file: a JSON list of messages, or an object with "messages" and optionally
// "tools" and other template variables. "-" reads standard input.
struct Conversation {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;                                     // null when absent
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // the other keys
};
Conversation read_conversation(const std::string& path);
// A tool schema file: a JSON list.
nlohmann::ordered_json read_tools(const std::string& path);

// The inputs of one render: the --system message first, then `messages`; the template's special
// tokens; the --var variables.
chat::ChatInputs chat_inputs(const chat::LoadedChatTemplate& loaded, const ChatTemplateOptions& options,
                             nlohmann::ordered_json messages, bool add_generation_prompt);

}  // namespace ferry::cli
