#include "cli/text_source.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ferry::cli {

namespace {

std::string read_all(std::FILE* f, const std::string& name, std::string_view what) {
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) {
    text.append(buffer, n);
    if (text.size() > kMaxTextBytes) {
      fail(ErrorKind::Io, "{} {}: more than {} MiB of text; give a shorter prompt", what, name, kMaxTextBytes >> 20);
    }
  }
  if (std::ferror(f)) fail(ErrorKind::Io, "{} {}: reading failed", what, name);
  return text;
}

}  // namespace

std::string read_text_source(const std::string& path, std::string_view what) {
  if (path == "-") return read_all(stdin, "(standard input)", what);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    fail(ErrorKind::Io, "{} {}: is a directory; give a text file, or - for standard input", what, path);
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(ErrorKind::Io, "{} {}: cannot open the file ({})", what, path, std::strerror(errno));
  try {
    std::string text = read_all(f, path, what);
    std::fclose(f);
    return text;
  } catch (...) {
    std::fclose(f);
    throw;
  }
}

}  // namespace ferry::cli
