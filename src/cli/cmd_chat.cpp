// `ferry chat`: an interactive conversation. Each line read from standard input is a user turn;
// the whole conversation is rendered with the model's chat template, and the reply is generated,
// streamed to standard output and kept in the history. End of input ends the chat.
//
// The KV cache is reused across turns when the new prompt's tokens extend what the session has
// already evaluated (the usual case); when the template rewrites earlier turns, the session
// starts over with the full prompt.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "chat/js_text.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"

namespace ferry::cli {

namespace {

struct ChatArgs {
  RunOptions run;
  GenerateOptions gen;
  ChatTemplateOptions chat;
};

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

int run_chat(const ChatArgs& a) {
  if (a.gen.max_tokens < 1) fail(ErrorKind::Usage, "--max-tokens must be at least 1, got {}", a.gen.max_tokens);
  Sampler check(a.gen.sampling);  // the sampler's own range checks, before loading
  // The template is read before the weights, so a model without one fails at once.
  const chat::LoadedChatTemplate loaded = load_template_for(a.run.model, a.chat, false);
  auto model = load_model(a.run);
  if (!model->tokenizer) {
    fail(ErrorKind::Usage, "{} has no tokenizer (no tokenizer.json, no GGUF vocabulary); ferry chat needs one",
         a.run.model);
  }
  const Tokenizer& tok = *model->tokenizer;
  auto session = model->new_session();
  const auto eog = end_of_generation_ids(model->ckpt, &tok);
  const bool interactive = isatty(fileno(stdin)) != 0;

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::vector<int32_t> evaluated;  // the ids the session's cache holds, in order
  std::string line;
  while (true) {
    if (interactive) {
      fmt::print(stderr, "> ");
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (chat::js::trim(line).empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    const std::string prompt = loaded.chat_template.apply(chat_inputs(loaded, a.chat, messages, true));
    const std::vector<int32_t> ids = tok.encode(prompt, /*add_special=*/false);
    std::vector<int32_t> fresh;
    if (!evaluated.empty() && starts_with(ids, evaluated) && ids.size() > evaluated.size()) {
      fresh.assign(ids.begin() + static_cast<std::ptrdiff_t>(evaluated.size()), ids.end());
    } else {
      session->reset();
      evaluated.clear();
      fresh = ids;
    }
    const GenerateResult r = generate(*session, &tok, fresh, eog, a.gen, [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    std::puts("");
    std::fflush(stdout);
    evaluated.insert(evaluated.end(), fresh.begin(), fresh.end());
    evaluated.insert(evaluated.end(), r.ids.begin(), r.ids.end());
    evaluated.resize(static_cast<size_t>(session->n_past()));  // the last sampled id is never evaluated
    messages.push_back({{"role", "assistant"}, {"content", r.text}});
    if (!a.run.quiet) {
      fmt::print(stderr, "[{} new prompt tokens, {} generated, {:.1f} tok/s]\n", fresh.size(), r.ids.size(),
                 r.generate_seconds > 0 ? static_cast<double>(r.ids.size()) / r.generate_seconds : 0.0);
    }
  }
  return 0;
}

}  // namespace

Runner add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat",
                                 "Chat with a model: each stdin line is a user turn, rendered with the model's chat "
                                 "template; end of input ends the chat");
  a->run.add_to(*cmd);
  a->chat.add_to(*cmd);
  cmd->add_option("--max-tokens,-n", a->gen.max_tokens, "Most tokens per reply")->capture_default_str();
  cmd->add_option("--temperature", a->gen.sampling.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", a->gen.sampling.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--top-p", a->gen.sampling.top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  cmd->add_option("--min-p", a->gen.sampling.min_p, "Drop tokens below min-p x the top probability (0: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", a->gen.sampling.repeat_penalty, "Penalty for repeated tokens (1: off)")
      ->capture_default_str();
  cmd->add_option("--seed", a->gen.sampling.seed, "Random seed (same seed, same output)")->capture_default_str();
  cmd->add_option("--stop", a->gen.stop_strings, "Stop a reply when this text appears (repeatable)");
  return [a] { return run_chat(*a); };
}

}  // namespace ferry::cli
