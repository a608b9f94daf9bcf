// The lines of an interactive command (`ferry chat`): from a terminal through libedit, with line
// editing and the history of this run (~/.editrc applies); from a pipe or a file as they come, so
// scripts and tests read exactly what they wrote. Either way a read notices the program's interrupt
// flag while it waits, whenever the signal came (no reliance on EINTR).
#pragma once

#include <atomic>
#include <memory>
#include <string>

namespace ferry::cli {

class LineReader {
 public:
  enum class Read { Line, Interrupted, End };

  // `interrupted`: the flag the program's SIGINT handler raises. LineReader neither installs a
  // handler nor lowers the flag.
  explicit LineReader(const std::atomic<bool>& interrupted);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Standard input is a terminal: lines are edited, and the prompt is shown.
  bool interactive() const;
  // One line into `line`, without its end-of-line. `prompt` is shown on standard error
  // (interactive only). Interrupted: a SIGINT came while waiting (what was typed is dropped).
  // End: end of input (Ctrl-D on an empty line).
  Read read(const std::string& prompt, std::string& line);
  // Adds a line to the history that the up and down keys walk through (interactive only).
  void remember(const std::string& line);

 private:
  struct Editor;
  Read read_plain(std::string& line);

  const std::atomic<bool>& interrupted_;
  std::unique_ptr<Editor> editor_;  // null when standard input is not a terminal
  std::string pending_;             // read from a pipe or file, not yet returned
  bool at_end_ = false;
};

}  // namespace ferry::cli
