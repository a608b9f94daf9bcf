// The `ferry` subcommands. Each registers its options on the app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace ferry::cli {

// Registers a subcommand; the returned function runs it (after parsing) and returns the exit code.
using Runner = std::function<int()>;

Runner add_generate(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_template(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_devices(CLI::App& app);
Runner add_convert(CLI::App& app);

}  // namespace ferry::cli
