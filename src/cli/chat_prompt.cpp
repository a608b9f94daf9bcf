#include "cli/chat_prompt.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"

namespace ferry::cli {

void ChatTemplateOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--template", template_file, "Chat template file (.jinja) to use instead of the model's");
  cmd.add_option("--template-name", template_name,
                 "Which of several named templates to use (tokenizer_config.json lists, GGUF "
                 "tokenizer.chat_template.NAME); default: tool_use with tools, else default");
  cmd.add_option("--var", vars,
                 "Extra template variable KEY=VALUE, VALUE as JSON (else a string), e.g. "
                 "--var enable_thinking=false (repeatable)");
  cmd.add_option("--system", system, "A system message to start the conversation with");
}

nlohmann::ordered_json ChatTemplateOptions::extra() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const std::string& v : vars) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) fail(ErrorKind::Usage, "--var '{}': write KEY=VALUE", v);
    const std::string key = v.substr(0, eq);
    const std::string value = v.substr(eq + 1);
    auto parsed = nlohmann::ordered_json::parse(value, nullptr, false);
    out[key] = parsed.is_discarded() ? nlohmann::ordered_json(value) : parsed;
  }
  return out;
}

chat::LoadedChatTemplate load_template_for(const std::string& model, const ChatTemplateOptions& options,
                                           bool with_tools) {
  if (options.template_file.empty()) {
    if (model.empty()) fail(ErrorKind::Usage, "give --model PATH or --template FILE.jinja");
    return chat::load_chat_template(model, with_tools, options.template_name);
  }
  chat::LoadedChatTemplate loaded = chat::load_chat_template(options.template_file, with_tools, options.template_name);
  if (!model.empty()) {
    // The template comes from the file, the special tokens from the model (when it has a template
    // source to read them from; a model without one just has none).
    try {
      const chat::LoadedChatTemplate from_model = chat::load_chat_template(model, with_tools);
      loaded.bos_token = from_model.bos_token;
      loaded.eos_token = from_model.eos_token;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Config) throw;
    }
  }
  return loaded;
}

namespace {

std::string read_all(const std::string& path) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot read {}", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Conversation read_conversation(const std::string& path) {
  const std::string text = read_all(path);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::Usage, "{}: not valid JSON: {}", path, e.what());
  }
  Conversation c;
  if (j.is_array()) {
    c.messages = std::move(j);
  } else if (j.is_object() && j.contains("messages")) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "messages") {
        c.messages = it.value();
      } else if (it.key() == "tools") {
        c.tools = it.value();
      } else {
        c.extra[it.key()] = it.value();
      }
    }
  } else {
    fail(ErrorKind::Usage, "{}: expected a list of messages or an object with \"messages\"", path);
  }
  if (!c.messages.is_array()) fail(ErrorKind::Usage, "{}: \"messages\" must be a list", path);
  for (const auto& m : c.messages) {
    if (!m.is_object() || !m.contains("role")) {
      fail(ErrorKind::Usage, "{}: every message must be an object with a \"role\" (and usually \"content\")", path);
    }
  }
  return c;
}

nlohmann::ordered_json read_tools(const std::string& path) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(read_all(path));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::Usage, "{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_array()) fail(ErrorKind::Usage, "{}: tools must be a JSON list of tool schemas", path);
  return j;
}

chat::ChatInputs chat_inputs(const chat::LoadedChatTemplate& loaded, const ChatTemplateOptions& options,
                             nlohmann::ordered_json messages, bool add_generation_prompt) {
  chat::ChatInputs in;
  in.messages = nlohmann::ordered_json::array();
  if (!options.system.empty()) in.messages.push_back({{"role", "system"}, {"content", options.system}});
  for (auto& m : messages) in.messages.push_back(std::move(m));
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = loaded.bos_token;
  in.eos_token = loaded.eos_token;
  in.extra = options.extra();
  return in;
}

}  // namespace ferry::cli
