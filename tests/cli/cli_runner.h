// Runs the real `ferry` binary (FERRY_CLI) and captures its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "common/temp_dir.h"

namespace ferry::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `args` are already shell-quoted where needed; `stdin_text` is fed to standard input.
inline CliRun run_ferry(const std::string& args, const std::string& stdin_text = "") {
  TempDir tmp("cli_stderr");
  const std::string err_path = tmp.str() + "/stderr";
  const std::string in_path = tmp.write_text("stdin", stdin_text);
  const std::string cmd = std::string(FERRY_CLI) + " " + args + " <" + in_path + " 2>" + err_path;
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

// One shell word: single-quoted, with any single quote inside escaped.
inline std::string quote(const std::string& arg) {
  std::string q = "'";
  for (char c : arg) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

}  // namespace ferry::testing
