// `ferry chat`: an interactive conversation. Each line read from standard input is a user turn;
// the whole conversation is rendered with the model's chat template, and the reply is generated,
// streamed to standard output and kept in the history. End of input ends the chat.
//
// The KV cache is reused across turns when the new prompt's tokens extend what the session has
// already evaluated (the usual case); when the template rewrites earlier turns, the session
// starts over with the full prompt.
//
// Images (GLM-4V, MiniCPM-V): `--image FILE` for the first turn, or a line `/image FILE` for the
// next one. The picture is processed at once (engine/image_processor.h); the user message it
// belongs to holds it where the model's own chat() puts it, and the tower runs when that turn is
// evaluated.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <span>
#include <string>

#include "chat/js_text.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"
#include "engine/image_processor.h"

namespace ferry::cli {

namespace {

struct ChatArgs {
  RunOptions run;
  GenerateOptions gen;
  ChatTemplateOptions chat;
  std::string image;  // for the first turn
};

constexpr std::string_view kImageCommand = "/image";

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

// The pictures of the conversation, processed, in the order their spans appear in the prompt.
// They are run through the vision tower when a message holding them is evaluated (again if the
// whole conversation is re-evaluated), so no image embedding outlives the step that reads it.
struct ConversationImages {
  std::vector<ProcessedImages> given;
  std::optional<ProcessedImages> pending;  // for the next user message
};

// Images whose span starts in `ids` (one begin-of-image id each, in both families).
int64_t count_image_spans(const std::vector<int32_t>& ids, const VisionConfig& v) {
  if (!v.present()) return 0;
  return std::count(ids.begin(), ids.end(), v.boi_id);
}

int run_chat(const ChatArgs& a) {
  if (a.gen.max_tokens < 1) fail(ErrorKind::Usage, "--max-tokens must be at least 1, got {}", a.gen.max_tokens);
  Sampler check(a.gen.sampling);  // the sampler's own range checks, before loading
  // The template and the first image are read before the weights, so either fails at once.
  const chat::LoadedChatTemplate loaded = load_template_for(a.run.model, a.chat, false);
  std::optional<RgbImage> first_image;
  if (!a.image.empty()) first_image = load_image(a.image);
  auto model = load_model(a.run);
  if (!model->tokenizer) {
    fail(ErrorKind::Usage, "{} has no tokenizer (no tokenizer.json, no GGUF vocabulary); ferry chat needs one",
         a.run.model);
  }
  const Tokenizer& tok = *model->tokenizer;
  const ModelConfig& config = model->ckpt.config();
  auto session = model->new_session();
  const auto eog = end_of_generation_ids(model->ckpt, &tok);
  const bool interactive = isatty(fileno(stdin)) != 0;
  ConversationImages images;
  std::unique_ptr<ImageProcessor> processor;
  if (config.vision.present()) processor = make_image_processor(model->ckpt, &tok);
  if (first_image) {
    if (!processor) fail(ErrorKind::Usage, "--image: {} has no vision tower, it takes no images", a.run.model);
    images.pending = processor->process(std::span(&*first_image, 1));
  }

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::vector<int32_t> evaluated;  // the ids the session's cache holds, in order (image spans unexpanded)
  int64_t expanded_rows = 0;       // cache rows the image spans added beyond their three ids
  std::string line;
  while (true) {
    if (interactive) {
      fmt::print(stderr, "> ");
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    const std::string_view text = chat::js::trim(line);
    if (text.empty()) continue;
    if (text.substr(0, kImageCommand.size()) == kImageCommand &&
        (text.size() == kImageCommand.size() || text[kImageCommand.size()] == ' ')) {
      // A bad image is reported and the chat goes on.
      const std::string path(chat::js::trim(text.substr(kImageCommand.size())));
      try {
        if (path.empty()) fail(ErrorKind::Usage, "/image needs a file: /image photo.jpg");
        if (!processor) fail(ErrorKind::Usage, "/image: this model has no vision tower");
        if (static_cast<int>(images.given.size()) >= config.vision.max_images) {
          fail(ErrorKind::Usage, "/image: this model takes {} image(s) per conversation, and it has them",
               config.vision.max_images);
        }
        const RgbImage picture = load_image(path);
        images.pending = processor->process(std::span(&picture, 1));
        if (!a.run.quiet) fmt::print(stderr, "[image {} attached to your next message]\n", path);
      } catch (const Error& e) {
        fmt::print(stderr, "error: {}\n", printable_message(e.what()));
      }
      continue;
    }
    const bool with_image = images.pending.has_value();
    const std::string content = with_image ? processor->chat_message(line, 1) : line;
    messages.push_back({{"role", "user"}, {"content", content}});
    if (with_image) images.given.push_back(std::move(*images.pending));
    images.pending.reset();
    std::string prompt = loaded.chat_template.apply(chat_inputs(loaded, a.chat, messages, true));
    std::vector<int32_t> ids;
    try {
      // Every picture so far at its placeholder (MiniCPM-V numbers them through the conversation).
      if (processor) prompt = processor->expand_prompt(prompt, ImageProcessor::join(images.given));
      ids = tok.encode(prompt, /*add_special=*/false);
    } catch (const Error& e) {
      // Typed-in image markers with no picture for them: the message is dropped, the chat goes on.
      fmt::print(stderr, "error: {}; use /image FILE\n", printable_message(e.what()));
      messages.erase(messages.size() - 1);
      if (with_image) {  // the picture stays attached for the next message
        images.pending = std::move(images.given.back());
        images.given.pop_back();
      }
      continue;
    }
    std::vector<int32_t> fresh;
    if (!evaluated.empty() && starts_with(ids, evaluated) && ids.size() > evaluated.size()) {
      fresh.assign(ids.begin() + static_cast<std::ptrdiff_t>(evaluated.size()), ids.end());
    } else {
      session->reset();
      evaluated.clear();
      expanded_rows = 0;
      fresh = ids;
    }
    const int64_t spans = count_image_spans(fresh, config.vision);
    if (spans > static_cast<int64_t>(images.given.size())) {
      // Typed-in image markers with no picture for them: the message is dropped, the chat goes on.
      fmt::print(stderr, "error: the message holds {} image span(s) but {} image(s) were given; use /image FILE\n",
                 spans, images.given.size());
      messages.erase(messages.size() - 1);
      if (with_image) {  // the picture stays attached for the next message
        images.pending = std::move(images.given.back());
        images.given.pop_back();
      }
      continue;
    }
    if (spans > 0) {
      const ProcessedImages last =
          ImageProcessor::join(std::span<const ProcessedImages>(images.given).last(static_cast<size_t>(spans)));
      session->attach_images(session->encode_images_on_device(last.batch), last.inputs());
      expanded_rows += spans * processor->cache_rows_beyond_ids();
    }
    GenerateOptions gen = a.gen;
    gen.source = &model->ckpt;  // named when the logits are not finite
    const GenerateResult r = generate(*session, &tok, fresh, eog, gen, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    std::puts("");
    std::fflush(stdout);
    evaluated.insert(evaluated.end(), fresh.begin(), fresh.end());
    evaluated.insert(evaluated.end(), r.ids.begin(), r.ids.end());
    // The last sampled id is never evaluated.
    evaluated.resize(static_cast<size_t>(session->n_past() - expanded_rows));
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
  cmd->add_option(
      "--image", a->image,
      "PNG or JPEG for the first message (GLM-4V, MiniCPM-V); a line '/image FILE' attaches one to the next "
      "message");
  return [a] { return run_chat(*a); };
}

}  // namespace ferry::cli
