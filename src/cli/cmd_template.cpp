// `ferry template`: renders a conversation with a model's chat template (or a .jinja file) and
// prints the prompt text exactly, with no newline added.
#include <cstdio>

#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "core/error.h"

namespace ferry::cli {

namespace {

struct TemplateArgs {
  std::string model;
  std::string messages;
  std::string tools;
  bool add_generation_prompt = false;
  ChatTemplateOptions chat;
};

int run_template(const TemplateArgs& a) {
  Conversation conversation = read_conversation(a.messages);
  if (!a.tools.empty()) conversation.tools = read_tools(a.tools);
  const bool with_tools = conversation.tools.is_array() && !conversation.tools.empty();
  const chat::LoadedChatTemplate loaded = load_template_for(a.model, a.chat, with_tools);
  chat::ChatInputs in = chat_inputs(loaded, a.chat, conversation.messages, a.add_generation_prompt);
  in.tools = conversation.tools;
  for (auto it = conversation.extra.begin(); it != conversation.extra.end(); ++it) {
    if (!in.extra.contains(it.key())) in.extra[it.key()] = it.value();  // --var wins over the file
  }
  const std::string prompt = loaded.chat_template.apply(in);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

Runner add_template(CLI::App& app) {
  auto a = std::make_shared<TemplateArgs>();
  auto* cmd = app.add_subcommand("template", "Render a conversation with a model's chat template");
  cmd->add_option("--model,-m", a->model,
                  "Where the template comes from: a model directory, a tokenizer_config.json or a GGUF file");
  cmd->add_option("--messages", a->messages,
                  "Conversation JSON: a list of {role, content} messages, or an object with \"messages\", "
                  "\"tools\" and other template variables (- reads stdin)")
      ->required();
  cmd->add_option("--tools", a->tools, "Tool schemas JSON (a list), passed to the template as `tools`");
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt,
                "End with the start of an assistant turn (what generation continues from)");
  a->chat.add_to(*cmd);
  return [a] { return run_template(*a); };
}

}  // namespace ferry::cli
