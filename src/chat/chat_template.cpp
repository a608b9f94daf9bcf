#include "chat/chat_template.h"

#include "chat/js_text.h"
#include "chat/lexer.h"
#include "chat/parser.h"
#include "core/error.h"

namespace ferry::chat {

struct ChatTemplate::Program {
  SourceName name;
  std::string source;
  NodeList statements;
};

ChatTemplate ChatTemplate::parse(std::string_view source, std::string origin) {
  auto program = std::make_shared<Program>();
  program->name.origin = std::move(origin);
  program->source = js::sanitize_utf8(source);
  program->statements = chat::parse(tokenize(program->source, program->name), program->name);
  return ChatTemplate(std::move(program));
}

const std::string& ChatTemplate::origin() const {
  return program_->name.origin;
}
const std::string& ChatTemplate::source() const {
  return program_->source;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables, const RenderLimits& limits) const {
  if (!variables.is_object()) {
    fail(ErrorKind::Usage, "chat template {}: the variables must be a JSON object, got {}", origin(),
         variables.type_name());
  }
  Interpreter interpreter(program_->name, limits);
  for (auto it = variables.begin(); it != variables.end(); ++it) interpreter.declare(it.key(), from_json(it.value()));
  return interpreter.run(program_->statements);
}

std::string ChatTemplate::apply(const ChatInputs& inputs, const RenderLimits& limits) const {
  if (!inputs.messages.is_array())
    fail(ErrorKind::Usage, "the messages must be a JSON list of {{role, content}} objects");
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  variables["messages"] = inputs.messages;
  variables["tools"] = inputs.tools;
  variables["documents"] = inputs.documents;
  variables["add_generation_prompt"] = inputs.add_generation_prompt;
  if (inputs.bos_token) variables["bos_token"] = *inputs.bos_token;
  if (inputs.eos_token) variables["eos_token"] = *inputs.eos_token;
  if (!inputs.extra.is_null()) {
    if (!inputs.extra.is_object()) fail(ErrorKind::Usage, "extra chat template variables must be a JSON object");
    for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it) {
      if (variables.contains(it.key())) {
        fail(ErrorKind::Usage, "the chat template variable '{}' is set twice (it is one of the standard inputs)",
             it.key());
      }
      variables[it.key()] = it.value();
    }
  }
  return render(variables, limits);
}

}  // namespace ferry::chat
