// Placeholder until issue 3's `ferry template` lands: the command exists and says it is not there yet.
#include "cli/commands.h"
#include "core/error.h"

namespace ferry::cli {

Runner add_template(CLI::App& app) {
  app.add_subcommand("template", "(not available yet)");
  return []() -> int { fail(ErrorKind::Usage, "ferry template is not available yet in this build"); };
}

}  // namespace ferry::cli
