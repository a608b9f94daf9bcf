#include "text/tokenizer_loader.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "formats/gguf.h"
#include "text/sentencepiece_model.h"
#include "text/vocab.h"

namespace ferry {

namespace fs = std::filesystem;

namespace {

std::string first_bytes(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "{}: cannot open the file", path);
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

Tokenizer load_file(const std::string& path) {
  const std::string head = first_bytes(path, 64);
  if (head.rfind("GGUF", 0) == 0) {
    const GgufFile file = GgufFile::open(path);
    if (!file.has("tokenizer.ggml.model")) {
      fail(ErrorKind::Format, "{}: this GGUF file has no tokenizer (no tokenizer.ggml.model key)", path);
    }
    return Tokenizer::from_vocab(vocab_from_gguf(file));
  }
  const size_t text_start = head.find_first_not_of(" \t\r\n");
  if (text_start != std::string::npos && head[text_start] == '{') {
    return Tokenizer::from_vocab(vocab_from_tokenizer_json(path));
  }
  if (looks_like_tiktoken(path)) return Tokenizer::from_vocab(vocab_from_tiktoken(path));
  if (looks_like_sentencepiece(path)) return load_sentencepiece_tokenizer(path);
  fail(ErrorKind::Format,
       "{}: not a tokenizer ferry reads: expected a tokenizer.json, a sentencepiece or tiktoken tokenizer.model, or "
       "a GGUF file",
       path);
}

}  // namespace

Tokenizer load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(ErrorKind::Io, "{}: no such file or directory", path);
  if (!fs::is_directory(path, ec)) return load_file(path);

  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    const fs::path candidate = fs::path(path) / name;
    if (fs::is_regular_file(candidate, ec)) return load_file(candidate.string());
  }
  std::vector<fs::path> ggufs;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") ggufs.push_back(entry.path());
  }
  if (ggufs.size() == 1) return load_file(ggufs.front().string());
  if (ggufs.size() > 1) {
    fail(ErrorKind::Usage, "{}: the directory holds {} GGUF files and no tokenizer.json; name the file to use", path,
         ggufs.size());
  }
  fail(ErrorKind::Usage, "{}: the directory has no tokenizer.json, tokenizer.model or GGUF file", path);
}

}  // namespace ferry
