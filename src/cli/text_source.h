// Text given by file instead of on the command line (`--prompt-file`, `tokenize --file`): a path,
// or "-" for standard input. Prompts larger than a command line holds (~128 KiB) come this way.
#pragma once

#include <string>
#include <string_view>

namespace ferry::cli {

// The bytes of `path` ("-": standard input, read to its end), as they are. Error(Io) naming the
// file when it cannot be read, is a directory, or holds more than kMaxTextBytes; `what` names the
// option in the message.
std::string read_text_source(const std::string& path, std::string_view what);

inline constexpr size_t kMaxTextBytes = size_t{256} << 20;

}  // namespace ferry::cli
