#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"

namespace ferry::cli {

namespace {

struct LogitsArgs {
  RunOptions run;
  std::string prompt_ids;
  std::string out;
  bool all = false;
};

int run_logits(const LogitsArgs& a) {
  const std::vector<int32_t> prompt = parse_id_list(a.prompt_ids);
  auto model = load_model(a.run);
  auto session = model->new_session();
  if (a.run.trace_devices) session->executor().set_trace(&std::cerr);
  const std::vector<float> logits = session->eval(prompt, a.all);
  refuse_non_finite_logits(logits, &model->ckpt);  // never written silently
  // Little-endian float32, as the machine stores it (x86-64 and AArch64 are little-endian).
  static_assert(std::endian::native == std::endian::little, "logits files are little-endian");
  if (a.out == "-") {  // standard output (main checks that it was written)
    std::fwrite(logits.data(), sizeof(float), logits.size(), stdout);
  } else {
    std::ofstream out(a.out, std::ios::binary);
    if (!out) fail(ErrorKind::Io, "{}: cannot open for writing", a.out);
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    out.flush();
    if (!out) fail(ErrorKind::Io, "{}: write failed (is the disk full?)", a.out);
  }
  if (!a.run.quiet) {
    fmt::print(stderr, "wrote {} logits ({} x {}) to {}\n", logits.size(), logits.size() / model->ckpt.config().vocab,
               model->ckpt.config().vocab, a.out);
  }
  return 0;
}

}  // namespace

Runner add_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  auto* cmd = app.add_subcommand("logits", "Write the logits of the last prompt position as little-endian float32");
  a->run.add_to(*cmd);
  cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids, e.g. 1,2,3")->required();
  cmd->add_option("--out,-o", a->out, "Output file (- for standard output)")->required();
  cmd->add_flag("--all", a->all, "Write every prompt position's logits ([tokens, vocab]) instead of the last");
  return [a] { return run_logits(*a); };
}

}  // namespace ferry::cli
