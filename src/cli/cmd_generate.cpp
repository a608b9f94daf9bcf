#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "cli/text_source.h"
#include "core/error.h"
#include "engine/image.h"
#include "engine/image_processor.h"

namespace ferry::cli {

namespace {

struct GenerateArgs {
  RunOptions run;
  std::string prompt;
  std::string prompt_file;  // --prompt-file: the prompt text from a file, or "-" for stdin
  std::string prompt_ids;
  GenerateOptions gen;
  bool json = false;
  bool add_bos = false;
  bool report = false;
  bool has_prompt = false;
  bool has_prompt_ids = false;
  bool has_seed = false;            // --seed given: else a fresh one, printed with --report and in --json
  std::vector<std::string> images;  // --image: pictures for the prompt's image placeholders, in order
  bool chat = false;                // --chat: the prompt is a user message rendered with the chat template
  ChatTemplateOptions chat_options;
};

// Checks what can be checked before any weight is read.
void check_args(const GenerateArgs& a) {
  if (a.has_prompt == a.has_prompt_ids)
    fail(ErrorKind::Usage, "give exactly one of --prompt TEXT, --prompt-file FILE or --prompt-ids 1,2,3");
  if (a.has_prompt && a.prompt.empty()) fail(ErrorKind::Usage, "--prompt is empty");
  if (a.chat && !a.has_prompt) fail(ErrorKind::Usage, "--chat wraps --prompt TEXT as a user message; give --prompt");
  if (a.gen.max_tokens < 1) fail(ErrorKind::Usage, "--max-tokens must be at least 1, got {}", a.gen.max_tokens);
  if (!(a.gen.sampling.temperature >= 0)) {
    fail(ErrorKind::Usage, "--temperature must be >= 0 (0 is greedy), got {}", a.gen.sampling.temperature);
  }
  if (a.gen.sampling.top_k < 0) fail(ErrorKind::Usage, "--top-k must be >= 0 (0 is off), got {}", a.gen.sampling.top_k);
  Sampler check(a.gen.sampling);  // the sampler's own range checks (top-p, min-p, penalty)
}

int run_generate(GenerateArgs a) {
  if (!a.prompt_file.empty()) {
    if (a.has_prompt) fail(ErrorKind::Usage, "give --prompt or --prompt-file, not both");
    a.prompt = read_text_source(a.prompt_file, "--prompt-file");
    if (a.prompt.empty()) fail(ErrorKind::Usage, "--prompt-file {}: the file is empty", a.prompt_file);
    a.has_prompt = true;
  }
  // Without --seed every run draws differently; the seed used is printed so a run can be repeated.
  if (!a.has_seed) a.gen.sampling.seed = std::random_device{}() | uint64_t{std::random_device{}()} << 32;
  check_args(a);
  std::vector<int32_t> prompt;
  if (a.has_prompt_ids) prompt = parse_id_list(a.prompt_ids);
  std::optional<chat::LoadedChatTemplate> chat_template;  // read before the weights: fail fast
  if (a.chat) chat_template = load_template_for(a.run.model, a.chat_options, false);
  // Decoded before the weights load: an unreadable image fails fast.
  std::vector<RgbImage> pictures;
  for (const std::string& path : a.images) pictures.push_back(load_image(path));
  auto model = load_model(a.run);
  if (!pictures.empty() && !model->ckpt.config().vision.present())
    fail(ErrorKind::Usage, "--image: {} has no vision tower, it takes no images", a.run.model);
  const Tokenizer* tok = model->tokenizer ? &*model->tokenizer : nullptr;
  std::unique_ptr<ImageProcessor> processor;
  ProcessedImages processed;
  if (!pictures.empty()) {
    processor = make_image_processor(model->ckpt, tok);
    processed = processor->process(pictures);
  }
  if (a.has_prompt) {
    if (!model->tokenizer) {
      fail(ErrorKind::Usage, "{} has no tokenizer (no tokenizer.json, no GGUF vocabulary): use --prompt-ids",
           a.run.model);
    }
    if (chat_template) {
      // As transformers' apply_chat_template: the template writes every special token itself.
      // With --image the user's message holds the images where the model's own chat() puts them.
      const std::string content =
          processor ? processor->chat_message(a.prompt, static_cast<int64_t>(pictures.size())) : a.prompt;
      const nlohmann::ordered_json user = nlohmann::ordered_json::array({{{"role", "user"}, {"content", content}}});
      std::string text = chat_template->chat_template.apply(chat_inputs(*chat_template, a.chat_options, user, true));
      if (processor) text = processor->expand_prompt(text, processed);
      prompt = model->tokenizer->encode(text, /*add_special=*/a.add_bos);
    } else {
      // The text is used verbatim; the images go where it writes the model's placeholder.
      const std::string text = processor ? processor->expand_prompt(a.prompt, processed) : a.prompt;
      prompt = model->tokenizer->encode(text, /*add_special=*/a.add_bos || model->tokenizer->vocab().add_bos);
    }
    if (a.add_bos) {
      // The tokenizer's post-processor may not add one by itself: then the declared BOS is
      // prepended, or the user hears that the model has none.
      const int32_t bos =
          model->tokenizer->vocab().bos >= 0 ? model->tokenizer->vocab().bos : model->ckpt.config().bos_id;
      if (bos < 0) {
        fail(ErrorKind::Usage, "--add-bos: {} declares no BOS token (neither its tokenizer nor its config names one)",
             a.run.model);
      }
      if (prompt.empty() || prompt.front() != bos) prompt.insert(prompt.begin(), bos);
    }
  }
  if (const VisionConfig& v = model->ckpt.config().vision; v.present() && !processor) {
    // Image spans with no picture would be read as text: refused, as the original processors do.
    if (const auto spans = std::count(prompt.begin(), prompt.end(), v.boi_id); spans > 0) {
      fail(ErrorKind::Usage, "the prompt holds {} image span(s) but no image was given; add --image FILE for each",
           spans);
    }
  }
  auto session = model->new_session();
  if (a.run.trace_devices) session->executor().set_trace(&std::cerr);
  if (processor) {
    // The prompt's image spans take the pictures' embeddings, left on the projector's device.
    session->attach_images(session->encode_images_on_device(processed.batch), processed.inputs());
  }
  const auto eog = end_of_generation_ids(model->ckpt, tok);
  TextSink sink;
  if (!a.json) {
    sink = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  a.gen.source = &model->ckpt;  // named when the logits are not finite
  const GenerateResult r = generate(*session, tok, prompt, eog, a.gen, sink);
  if (a.json) {
    nlohmann::json out;
    out["prompt_ids"] = prompt;
    out["ids"] = r.ids;
    out["text"] = r.text;
    out["stop"] = stop_name(r);
    out["seed"] = a.gen.sampling.seed;
    // Per device: what the plan reserved, the measured peak, and the last decode step's copies in.
    out["devices"] = nlohmann::json::array();
    for (const DeviceUsage& u : device_usage(*model, *session)) {
      out["devices"].push_back({{"name", u.name},
                                {"planned_bytes", u.planned_bytes},
                                {"peak_bytes", u.peak_bytes},
                                {"weight_bytes", u.weight_bytes},
                                {"kv_bytes", u.kv_bytes},
                                {"workspace_bytes", u.workspace_bytes},
                                {"planned_weight_bytes", u.planned_weight_bytes},
                                {"planned_kv_bytes", u.planned_kv_bytes},
                                {"planned_workspace_bytes", u.planned_workspace_bytes},
                                {"allocated_bytes", u.allocated_bytes},
                                {"copies", u.copies},
                                {"bytes_copied", u.bytes_copied}});
    }
    std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (tok == nullptr) {
    std::puts(fmt::format("{}", fmt::join(r.ids, ",")).c_str());  // no tokenizer: the ids are the output
  } else {
    std::puts("");
  }
  std::fflush(stdout);  // the text before the stats line when both streams go to one file
  if (!a.run.quiet) {
    const double gen_tps = r.generate_seconds > 0 ? static_cast<double>(r.ids.size()) / r.generate_seconds : 0;
    fmt::print(stderr, "prompt: {} tokens in {:.3f} s ({:.1f} tok/s); generated: {} tokens ({:.1f} tok/s); stop: {}\n",
               r.prompt_tokens, r.prompt_seconds, r.prompt_seconds > 0 ? r.prompt_tokens / r.prompt_seconds : 0.0,
               r.ids.size(), gen_tps, stop_name(r));
    if (a.report) {
      fmt::print(stderr, "seed: {} (--seed {} repeats this run)\n", a.gen.sampling.seed, a.gen.sampling.seed);
      fmt::print(stderr, "{}", device_report(*model, *session, 1));
    }
  }
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  a->run.add_to(*cmd);
  auto* prompt = cmd->add_option("--prompt,-p", a->prompt, "Prompt text");
  cmd->add_option("--prompt-file", a->prompt_file, "Prompt text from a file, or - for standard input (long prompts)");
  auto* prompt_ids =
      cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids, e.g. 1,2,3 (instead of --prompt)");
  cmd->add_option("--max-tokens,-n", a->gen.max_tokens, "Most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", a->gen.sampling.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", a->gen.sampling.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--top-p", a->gen.sampling.top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  cmd->add_option("--min-p", a->gen.sampling.min_p, "Drop tokens below min-p x the top probability (0: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", a->gen.sampling.repeat_penalty, "Penalty for repeated tokens (1: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", a->gen.sampling.repeat_last_n, "Tokens the repeat penalty looks back over")
      ->capture_default_str();
  auto* seed = cmd->add_option("--seed", a->gen.sampling.seed,
                               "Random seed (same seed, same output; default: a fresh one, printed by --report)");
  cmd->add_option("--stop", a->gen.stop_strings, "Stop when this text appears (repeatable)");
  cmd->add_flag("--ignore-eos", a->gen.ignore_eos, "Do not stop at end-of-generation tokens (fixed-length runs)");
  cmd->add_flag("--add-bos", a->add_bos,
                "Start the prompt text with the model's BOS token (its tokenizer's, else its config's), once");
  cmd->add_option("--image", a->images,
                  "PNG or JPEG for the prompt's next image placeholder (repeatable, in order): MiniCPM-V "
                  "(<image>./</image>), GLM-4V <|begin_of_image|><|endoftext|><|end_of_image|>, written in --prompt "
                  "or already in --prompt-ids; with --chat the user message gets them as the model's chat() places "
                  "them");
  cmd->add_flag("--chat", a->chat,
                "Send --prompt as a user message through the model's chat template (with a generation prompt)");
  a->chat_options.add_to(*cmd);
  cmd->add_flag("--json", a->json,
                "Print one JSON object {\"prompt_ids\": [...], \"ids\": [...], \"text\": \"...\", \"stop\": ...}");
  cmd->add_flag("--report", a->report, "After the run, print memory and copies per device");
  return [a, prompt, prompt_ids, seed] {
    a->has_prompt = prompt->count() > 0;
    a->has_prompt_ids = prompt_ids->count() > 0;
    a->has_seed = seed->count() > 0;
    return run_generate(*a);
  };
}

}  // namespace ferry::cli
