// ferry's command line. Errors from anywhere below are caught here, once, printed with their kind
// and turned into a non-zero exit.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cli/commands.h"
#include "core/edit_distance.h"
#include "core/error.h"

namespace {

// The command's output reached its destination: a full disk or a closed pipe is an error, not a
// success with nothing written.
int finish_output(int exit_code) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    fmt::print(stderr,
               "ferry: io: could not write the output to standard output (is the disk full, or the pipe "
               "closed?)\n");
    return exit_code == 0 ? 1 : exit_code;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry: run GLM-4, ChatGLM, Llama and Qwen2 models across several devices"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  app.set_version_flag("--version", fmt::format("ferry {} (backends: cpu{})", FERRY_VERSION,
                                                ferry::can_create(ferry::DeviceType::Vulkan) ? ", vulkan" : ""));
  std::map<std::string, ferry::cli::Runner> runners;
  runners["generate"] = ferry::cli::add_generate(app);
  runners["logits"] = ferry::cli::add_logits(app);
  runners["inspect"] = ferry::cli::add_inspect(app);
  runners["bench"] = ferry::cli::add_bench(app);
  runners["plan"] = ferry::cli::add_plan(app);
  runners["tokenize"] = ferry::cli::add_tokenize(app);
  runners["template"] = ferry::cli::add_template(app);
  runners["chat"] = ferry::cli::add_chat(app);
  runners["devices"] = ferry::cli::add_devices(app);
  runners["convert"] = ferry::cli::add_convert(app);
  // A mistyped command: name the nearest one (CLI11 would only say the word was not expected).
  if (argc > 1 && argv[1][0] != '-' && runners.count(argv[1]) == 0) {
    std::vector<std::string> names;
    for (const auto& [name, runner] : runners) names.push_back(name);
    const std::string nearest = ferry::nearest_word(argv[1], names);
    fmt::print(stderr, "ferry: usage: unknown command '{}'{}; `ferry --help` lists the commands\n", argv[1],
               nearest.empty() ? "" : fmt::format(" (did you mean '{}'?)", nearest));
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto* sub : app.get_subcommands()) return finish_output(runners.at(sub->get_name())());
    return 2;
  } catch (const ferry::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ferry: {}: {}\n", ferry::error_kind_name(e.kind()), ferry::printable_message(e.what()));
    return e.kind() == ferry::ErrorKind::Internal ? 70 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ferry: internal error: {}\n", ferry::printable_message(e.what()));
    return 70;
  }
}
