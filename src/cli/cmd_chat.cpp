// `ferry chat`: an interactive conversation. Each line read from standard input is a user turn
// (edited with libedit when standard input is a terminal, cli/line_reader.h); the whole
// conversation is rendered with the model's chat template, and the reply is generated, streamed to
// standard output and kept in the history. End of input, Ctrl-D or /exit ends the chat.
//
// The KV cache is reused up to the longest common prefix of the new prompt's ids and what the
// session has evaluated (the whole history in the usual case, less when the template rewrites
// earlier turns or the oldest turns were dropped); only the rest is evaluated.
//
// A conversation that outgrows the context is shifted: the oldest turns (user message and reply)
// are dropped until the prompt leaves room for a reply, with a one-line notice; a message too long
// even alone is refused, and the chat goes on. A reply that fills the context stops there
// (stop: context). Ctrl-C stops a reply; a second Ctrl-C in a row ends the chat with status 130.
//
// Images (GLM-4V, MiniCPM-V): `--image FILE` for the first turn, or a line `/image FILE` for the
// next one. The picture is processed at once (engine/image_processor.h); the user message it
// belongs to holds it where the model's own chat() puts it, and the tower runs when that turn is
// evaluated (again when the cache is reused only up to before its span).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <optional>
#include <span>
#include <string>

#include "chat/js_text.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/line_reader.h"
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

constexpr int kInterruptedExit = 130;  // 128 + SIGINT, as shells report it
constexpr const char* kPrompt = "> ";
constexpr std::string_view kHelp =
    "commands:\n"
    "  /image FILE   attach a PNG or JPEG to your next message (GLM-4V, MiniCPM-V)\n"
    "  /reset        forget the conversation and start over (--system stays)\n"
    "  /help         this list\n"
    "  /exit, /quit  end the chat (so do Ctrl-D and the end of input)\n"
    "Ctrl-C stops a reply; Ctrl-C twice in a row ends the chat. Up and down walk through your lines.\n";

// Ctrl-C. The handler only raises flags: the generation loop ends the reply at its next token
// (GenerateOptions::interrupt), a waiting read returns (LineReader polls the flag), and the chat
// decides. Only a second Ctrl-C that comes before the first could stop the reply (a long prompt
// step) ends the process from here.
std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_replying{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used in a signal handler");

void on_sigint(int) {
  if (g_replying.load() && g_interrupted.load()) {
    const char newline = '\n';
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, &newline, 1);
    _exit(kInterruptedExit);
  }
  g_interrupted.store(true);
}

// on_sigint while the chat runs; the previous handler again afterwards.
class SigintHandler {
 public:
  SigintHandler() {
    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // writes of the reply go on; reads poll the flag
    sigaction(SIGINT, &action, &previous_);
    g_interrupted.store(false);
  }
  ~SigintHandler() { sigaction(SIGINT, &previous_, nullptr); }
  SigintHandler(const SigintHandler&) = delete;
  SigintHandler& operator=(const SigintHandler&) = delete;

 private:
  struct sigaction previous_ {};
};

// Marks the time a reply is generated, for on_sigint.
struct Replying {
  Replying() { g_replying.store(true); }
  ~Replying() { g_replying.store(false); }
  Replying(const Replying&) = delete;
  Replying& operator=(const Replying&) = delete;
};

// One exchange: the user's message and the model's reply (empty until answered).
struct Turn {
  std::string user;
  std::string reply;
  std::optional<ProcessedImages> image;  // the picture attached to this message
  uint64_t image_id = 0;                 // which picture: cache reuse compares pictures by it
};

// A rendering of the conversation, ready to evaluate.
struct Rendered {
  std::vector<int32_t> ids;         // image spans unexpanded
  std::vector<uint64_t> image_ids;  // the pictures of its image spans, in order
  int64_t rows = 0;                 // cache rows it takes (GLM-4V's spans expand)
};

// Images whose span starts in `ids` (one begin-of-image id each, in both families).
int64_t count_image_spans(std::span<const int32_t> ids, const VisionConfig& v) {
  if (!v.present()) return 0;
  return std::count(ids.begin(), ids.end(), v.boi_id);
}

// "/word ...": a command (a path such as "/usr/bin" is not one).
bool is_command(std::string_view text) {
  if (text.size() < 2 || text[0] != '/') return false;
  const size_t end = std::min(text.find_first_of(" \t"), text.size());
  return std::all_of(text.begin() + 1, text.begin() + static_cast<std::ptrdiff_t>(end),
                     [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
}

class Chat {
 public:
  Chat(const ChatArgs& a, const chat::LoadedChatTemplate& loaded, LoadedModel& model,
       std::optional<RgbImage> first_image)
      : a_(a),
        loaded_(loaded),
        model_(model),
        tok_(*model.tokenizer),
        vision_(model.ckpt.config().vision),
        session_(model.new_session()),
        eog_(end_of_generation_ids(model.ckpt, &tok_)) {
    if (vision_.present()) processor_ = make_image_processor(model.ckpt, &tok_);
    if (first_image) {
      if (!processor_) fail(ErrorKind::Usage, "--image: {} has no vision tower, it takes no images", a.run.model);
      pending_ = processor_->process(std::span(&*first_image, 1));
    }
  }

  int run() {
    const SigintHandler sigint;
    LineReader reader(g_interrupted);
    std::string line;
    while (true) {
      const LineReader::Read got = g_interrupted.load() ? LineReader::Read::Interrupted : reader.read(kPrompt, line);
      if (got == LineReader::Read::Interrupted) {
        g_interrupted.store(false);
        if (++ctrl_c_ >= 2) {
          fmt::print(stderr, "\n");
          return kInterruptedExit;
        }
        fmt::print(stderr, "\n[Ctrl-C again, /exit or Ctrl-D ends the chat]\n");
        continue;
      }
      if (got == LineReader::Read::End) {
        if (reader.interactive()) fmt::print(stderr, "\n");
        break;
      }
      ctrl_c_ = 0;
      const std::string_view text = chat::js::trim(line);
      if (text.empty()) continue;
      reader.remember(std::string(text));
      if (is_command(text)) {
        if (command(text)) break;
        continue;
      }
      turn(line);
    }
    return 0;
  }

 private:
  // Runs a command line; true when the chat ends.
  bool command(std::string_view text) {
    const size_t space = std::min(text.find_first_of(" \t"), text.size());
    const std::string_view word = text.substr(0, space);
    const std::string_view rest = chat::js::trim(text.substr(space));
    if (word == "/exit" || word == "/quit") return true;
    if (word == "/help") {
      fmt::print(stderr, "{}", kHelp);
    } else if (word == "/reset") {
      turns_.clear();
      pending_.reset();
      forget_cache();
      fmt::print(stderr, "[conversation cleared{}]\n", a_.chat.system.empty() ? "" : "; the --system message stays");
    } else if (word == "/image") {
      attach_image(std::string(rest));
    } else {
      fmt::print(stderr, "error: unknown command {}; /help lists the commands\n", word);
    }
    return false;
  }

  // A bad image is reported and the chat goes on.
  void attach_image(const std::string& path) {
    try {
      if (path.empty()) fail(ErrorKind::Usage, "/image needs a file: /image photo.jpg");
      if (!processor_) fail(ErrorKind::Usage, "/image: this model has no vision tower");
      const auto given = std::count_if(turns_.begin(), turns_.end(), [](const Turn& t) { return t.image.has_value(); });
      if (given >= vision_.max_images) {
        fail(ErrorKind::Usage, "/image: this model takes {} image(s) per conversation, and it has them",
             vision_.max_images);
      }
      const RgbImage picture = load_image(path);
      pending_ = processor_->process(std::span(&picture, 1));
      if (!a_.run.quiet) fmt::print(stderr, "[image {} attached to your next message]\n", path);
    } catch (const Error& e) {
      fmt::print(stderr, "error: {}\n", printable_message(e.what()));
    }
  }

  void turn(const std::string& message) {
    Turn t;
    t.user = message;
    if (pending_) {
      t.image = std::move(*pending_);
      t.image_id = ++last_image_id_;
      pending_.reset();
    }
    turns_.push_back(std::move(t));
    const std::optional<Rendered> prompt = fit();
    if (!prompt) {
      // Refused: the history stays as it was, the picture stays attached for the next message.
      if (turns_.back().image) pending_ = std::move(turns_.back().image);
      turns_.pop_back();
      return;
    }
    answer(*prompt);
  }

  // The whole conversation (the last turn unanswered) from turns_[first] on, with a generation
  // prompt. Error when the template or the image spans refuse it.
  Rendered render(size_t first) const {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    std::vector<ProcessedImages> pictures;
    Rendered out;
    for (size_t i = first; i < turns_.size(); ++i) {
      const Turn& t = turns_[i];
      messages.push_back({{"role", "user"}, {"content", t.image ? processor_->chat_message(t.user, 1) : t.user}});
      if (t.image) {
        pictures.push_back(*t.image);
        out.image_ids.push_back(t.image_id);
      }
      if (i + 1 < turns_.size()) messages.push_back({{"role", "assistant"}, {"content", t.reply}});
    }
    std::string prompt = loaded_.chat_template.apply(chat_inputs(loaded_, a_.chat, messages, true));
    // Every picture so far at its placeholder (MiniCPM-V numbers them through the conversation).
    if (processor_) {
      try {
        prompt = processor_->expand_prompt(prompt, ImageProcessor::join(pictures));
      } catch (const Error& e) {
        fail(e.kind(), "{}; use /image FILE", printable_message(e.what()));
      }
    }
    out.ids = tok_.encode(prompt, /*add_special=*/false);
    const int64_t spans = count_image_spans(out.ids, vision_);
    if (spans > static_cast<int64_t>(pictures.size())) {
      // Typed-in image markers with no picture for them.
      fail(ErrorKind::Usage, "the message holds {} image span(s) but {} image(s) were given; use /image FILE", spans,
           pictures.size());
    }
    out.rows = static_cast<int64_t>(out.ids.size()) + (processor_ ? spans * processor_->cache_rows_beyond_ids() : 0);
    return out;
  }

  // The conversation as it will be evaluated: the oldest turns dropped until the prompt leaves
  // room for a reply (--max-tokens, at most a quarter of the context: a long reply still stops
  // when the context is full). nullopt when the new message is refused (said why).
  std::optional<Rendered> fit() {
    const int64_t context = session_->context();
    const int64_t room = std::min<int64_t>(a_.gen.max_tokens, std::max<int64_t>(1, context / 4));
    size_t first = 0;
    std::optional<Rendered> r;
    try {
      r = render(first);
      while (r->rows + room > context && first + 1 < turns_.size()) r = render(++first);
    } catch (const Error& e) {
      fmt::print(stderr, "error: {}\n", printable_message(e.what()));
      return std::nullopt;
    }
    if (r->rows >= context) {
      fmt::print(stderr,
                 "error: this message takes {} tokens with the chat template{}, and the context holds {}: nothing "
                 "is left for a reply; send a shorter one, or start the chat with a larger --ctx\n",
                 r->rows, a_.chat.system.empty() ? "" : " and --system", context);
      return std::nullopt;
    }
    if (first > 0) {
      turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(first));
      if (first == 1) {
        fmt::print(stderr, "[context full: dropped the oldest turn]\n");
      } else {
        fmt::print(stderr, "[context full: dropped the {} oldest turns]\n", first);
      }
    }
    return r;
  }

  // How many of `r`'s ids the cache holds already: the longest common prefix with what was
  // evaluated, cut before the first picture that differs (a span's ids are the same whatever the
  // picture), and leaving at least one id to evaluate (its logits start the reply).
  size_t reusable(const Rendered& r) const {
    if (r.ids.empty()) return 0;
    const size_t most = std::min(evaluated_.size(), r.ids.size() - 1);
    size_t n = 0;
    while (n < most && evaluated_[n] == r.ids[n]) ++n;
    if (!vision_.present()) return n;
    size_t image = 0;
    for (size_t i = 0; i < n; ++i) {
      if (r.ids[i] != vision_.boi_id) continue;
      if (image >= evaluated_images_.size() || image >= r.image_ids.size() ||
          evaluated_images_[image] != r.image_ids[image]) {
        return i;
      }
      ++image;
    }
    return n;
  }

  void forget_cache() {
    session_->reset();
    evaluated_.clear();
    evaluated_images_.clear();
  }

  void answer(const Rendered& prompt) {
    const int64_t beyond = processor_ ? processor_->cache_rows_beyond_ids() : 0;
    const size_t kept = reusable(prompt);
    const std::span<const int32_t> ids(prompt.ids);
    if (kept == 0) {
      forget_cache();
    } else {
      const auto kept_ids = static_cast<int64_t>(kept);
      session_->truncate(kept_ids + count_image_spans(ids.first(kept), vision_) * beyond, kept_ids);
    }
    const std::span<const int32_t> fresh = ids.subspan(kept);
    if (const int64_t spans = count_image_spans(fresh, vision_); spans > 0) {
      // The pictures whose spans are evaluated now: the last ones of the conversation.
      std::vector<ProcessedImages> pictures;
      for (const Turn& t : turns_) {
        if (t.image) pictures.push_back(*t.image);
      }
      const ProcessedImages last =
          ImageProcessor::join(std::span<const ProcessedImages>(pictures).last(static_cast<size_t>(spans)));
      session_->attach_images(session_->encode_images_on_device(last.batch), last.inputs());
    }
    GenerateOptions gen = a_.gen;
    gen.source = &model_.ckpt;  // named when the logits are not finite
    gen.interrupt = &g_interrupted;
    GenerateResult r;
    {
      const Replying replying;
      r = generate(*session_, &tok_, fresh, eog_, gen, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
    }
    std::puts("");
    std::fflush(stdout);
    // What the cache holds now: the prompt, then every generated id but the last (never fed back).
    evaluated_ = prompt.ids;
    evaluated_.insert(evaluated_.end(), r.ids.begin(), r.ids.end());
    const int64_t evaluated_ids = session_->n_past() - count_image_spans(ids, vision_) * beyond;
    evaluated_.resize(std::min(evaluated_.size(), static_cast<size_t>(evaluated_ids)));
    evaluated_images_ = prompt.image_ids;
    turns_.back().reply = r.text;
    if (r.interrupted) {
      g_interrupted.store(false);
      ctrl_c_ = 1;
      fmt::print(stderr, "[interrupted] (Ctrl-C again ends the chat)\n");
    }
    if (r.context_full) {
      fmt::print(stderr,
                 "[context full: the reply stopped at the context's {} tokens (stop: context); the next message "
                 "drops the oldest turns]\n",
                 session_->context());
    }
    if (!a_.run.quiet) {
      fmt::print(stderr, "[{} new prompt tokens, reused {} of {}, {} generated, {:.1f} tok/s]\n", fresh.size(), kept,
                 prompt.ids.size(), r.ids.size(),
                 r.generate_seconds > 0 ? static_cast<double>(r.ids.size()) / r.generate_seconds : 0.0);
    }
  }

  const ChatArgs& a_;
  const chat::LoadedChatTemplate& loaded_;
  LoadedModel& model_;
  const Tokenizer& tok_;
  const VisionConfig& vision_;
  std::unique_ptr<Session> session_;
  std::vector<int32_t> eog_;
  std::unique_ptr<ImageProcessor> processor_;

  std::vector<Turn> turns_;                 // the conversation, oldest first
  std::optional<ProcessedImages> pending_;  // for the next user message
  uint64_t last_image_id_ = 0;
  std::vector<int32_t> evaluated_;          // the ids the session's cache holds, in order (spans unexpanded)
  std::vector<uint64_t> evaluated_images_;  // the pictures of their image spans
  int ctrl_c_ = 0;                          // Ctrl-Cs since the last line read
};

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
  Chat chat(a, loaded, *model, std::move(first_image));
  return chat.run();
}

}  // namespace

Runner add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat",
                                 "Chat with a model: each line is a user turn, rendered with the model's chat "
                                 "template; /help lists the commands; end of input, Ctrl-D or /exit ends the chat");
  a->run.add_to(*cmd);
  a->chat.add_to(*cmd);
  cmd->add_option("--max-tokens,-n", a->gen.max_tokens,
                  "Most tokens per reply (a reply also stops when the context is full)")
      ->capture_default_str();
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
