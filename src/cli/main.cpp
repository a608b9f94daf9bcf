// ferry's command line. Errors from anywhere below are caught here, once, printed with their kind
// and turned into a non-zero exit.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: run GLM-4, ChatGLM, Llama and Qwen2 models across several devices"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto* sub : app.get_subcommands()) return runners.at(sub->get_name())();
    return 2;
  } catch (const ferry::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ferry: {}: {}\n", ferry::error_kind_name(e.kind()), e.what());
    return e.kind() == ferry::ErrorKind::Internal ? 70 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ferry: internal error: {}\n", e.what());
    return 70;
  }
}
