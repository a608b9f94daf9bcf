// Placeholder until issue 3's `ferry chat` lands: the command exists and says it is not there yet.
#include "cli/commands.h"
#include "core/error.h"

namespace ferry::cli {

Runner add_chat(CLI::App& app) {
  app.add_subcommand("chat", "(not available yet)");
  return []() -> int { fail(ErrorKind::Usage, "ferry chat is not available yet in this build"); };
}

}  // namespace ferry::cli
