// `ferry tokenize`: text to token ids with a model's tokenizer, as a JSON array, or many test
// strings from a llama.cpp .inp file printed like its .out golden.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/text_source.h"
#include "core/error.h"
#include "text/tokenizer_loader.h"

namespace ferry::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::string text;
  std::string file;  // --file: the text from a file, or "-" for standard input
  std::string inp;
  bool add_special = false;
  bool no_parse_special = false;
};

constexpr std::string_view kInpSeparator = "\n__ggml_vocab_test__\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "{}: cannot open the file", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The strings of a llama.cpp .inp file: each one is followed by the separator line.
std::vector<std::string> read_inp(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<std::string> strings;
  size_t at = 0;
  for (size_t next = text.find(kInpSeparator); next != std::string::npos; next = text.find(kInpSeparator, at)) {
    strings.push_back(text.substr(at, next - at));
    at = next + kInpSeparator.size();
  }
  if (at < text.size()) strings.push_back(text.substr(at));  // a last string without its separator
  if (strings.empty()) {
    fail(ErrorKind::Usage, "{}: no test strings; a .inp file separates them with \"\\n__ggml_vocab_test__\\n\"", path);
  }
  return strings;
}

int run_tokenize(TokenizeArgs a) {
  if ((!a.inp.empty()) + (!a.text.empty()) + (!a.file.empty()) > 1) {
    fail(ErrorKind::Usage, "give one of TEXT, --file FILE (- for standard input) or --inp FILE, not both");
  }
  if (a.text == "-" || !a.file.empty()) a.text = read_text_source(a.text == "-" ? "-" : a.file, "--file");
  const Tokenizer tokenizer = load_tokenizer(a.tokenizer);
  const bool parse_special = !a.no_parse_special;
  if (!a.inp.empty()) {
    for (const std::string& s : read_inp(a.inp)) {
      std::string line;
      for (int32_t id : tokenizer.encode(s, a.add_special, parse_special)) line += fmt::format(" {}", id);
      std::puts(line.c_str());
    }
    return 0;
  }
  const std::vector<int32_t> ids = tokenizer.encode(a.text, a.add_special, parse_special);
  std::puts(fmt::format("[{}]", fmt::join(ids, ",")).c_str());
  return 0;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "Print the token ids of a text as a JSON array (or of each string of a llama.cpp .inp file)");
  sub->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json, tokenizer.model (sentencepiece or tiktoken), a GGUF file or a model directory")
      ->required();
  sub->add_option("text", args->text, "The text to encode (- reads standard input)");
  sub->add_option("--file", args->file, "Encode the text of this file (- for standard input)");
  sub->add_option("--inp", args->inp,
                  "A llama.cpp .inp file: prints one line of space-separated ids per string, as its .out file");
  sub->add_flag("--add-special", args->add_special, "Add the tokens the tokenizer puts around a text (bos, eos, ...)");
  sub->add_flag("--no-parse-special", args->no_parse_special,
                "Leave control tokens written in the text (\"<|im_end|>\") as text");
  return [args]() -> int { return run_tokenize(*args); };
}

}  // namespace ferry::cli
