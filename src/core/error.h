// Typed errors. Thrown below, caught once at the CLI/server edge.
// Every message says what went wrong, where (file, tensor, module, device)
// and, when we know it, what would fix it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace ferry {

enum class ErrorKind {
  Io,              // cannot open/read/map a file
  Format,          // a file's bytes do not follow its format (headers, offsets, dtypes)
  Config,          // config.json / generation_config.json missing or inconsistent fields
  Shape,           // tensor shape or dtype does not match what the model needs
  Unsupported,     // valid input we do not handle (architecture, dtype, op on a device)
  OutOfMemory,     // a device's budget cannot hold an allocation
  DeviceMismatch,  // an op saw inputs on two devices
  Usage,           // bad command-line or API arguments
  Internal,        // a broken invariant of our own (a bug)
};

const char* error_kind_name(ErrorKind kind);

// A message as it may reach a terminal: valid UTF-8, newlines and tabs kept; every other control
// byte and every byte that is not valid UTF-8 written as \xNN. Messages quote what files hold
// (names, keys, strings), and a corrupt file must not print raw bytes or terminal escapes.
std::string printable_message(std::string_view message);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(kind, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ferry
