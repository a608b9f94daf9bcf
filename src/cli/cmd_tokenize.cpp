// Placeholder until issue 3's `ferry tokenize` lands: the command exists and says it is not there yet.
#include "cli/commands.h"
#include "core/error.h"

namespace ferry::cli {

Runner add_tokenize(CLI::App& app) {
  app.add_subcommand("tokenize", "(not available yet)");
  return []() -> int { fail(ErrorKind::Usage, "ferry tokenize is not available yet in this build"); };
}

}  // namespace ferry::cli
