// `ferry convert IN OUT.gguf [--dtype T]`: a Hugging Face checkpoint written as a GGUF file that
// llama.cpp and ferry both load (see engine/gguf_export.h).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"
#include "engine/checkpoint.h"
#include "engine/gguf_export.h"

namespace ferry::cli {

namespace {

namespace fs = std::filesystem;

struct ConvertArgs {
  std::string in;
  std::string out;
  std::string dtype;
  std::string name;
  bool no_tokenizer = false;
  int threads = 0;
};

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

// What IN must be: a Hugging Face model directory (or its config.json).
void check_input(const std::string& in) {
  std::error_code ec;
  const fs::file_status st = fs::status(in, ec);
  if (ec || !fs::exists(st)) {
    fail(ErrorKind::Io,
         "{}: no such file or directory; give a Hugging Face model directory (config.json + "
         "*.safetensors + tokenizer files)",
         in);
  }
  if (fs::is_directory(st) || fs::path(in).filename() == "config.json") return;
  if (fs::path(in).extension() == ".gguf" || starts_with_gguf_magic(in)) {
    fail(ErrorKind::Usage,
         "{} is already a GGUF file; convert reads a Hugging Face model directory (config.json + *.safetensors + "
         "tokenizer files) and writes GGUF. ferry runs GGUF files as they are: ferry generate --model {}",
         in, in);
  }
  fail(ErrorKind::Usage, "{} is a file, not a Hugging Face model directory (config.json + *.safetensors)", in);
}

int run_convert(const ConvertArgs& a) {
  GgufExportOptions options;
  options.quant = parse_weight_quant_option(a.dtype);
  options.name = a.name;
  options.tokenizer = !a.no_tokenizer;
  options.threads = a.threads;
  check_input(a.in);
  const auto start = std::chrono::steady_clock::now();
  const Checkpoint ck = open_checkpoint(a.in);
  const GgufExportResult r = export_gguf(ck, a.out, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("wrote {}: arch {}, {} tensors ({}), {:.1f} MiB in {:.1f} s\n", a.out, r.architecture, r.tensors,
             fmt::join(r.dtypes, ", "), static_cast<double>(r.bytes) / (1024.0 * 1024.0), seconds);
  fmt::print("tokenizer: {}{}\n", r.tokenizer, r.chat_template ? ", with its chat template" : "");
  for (const std::string& note : r.notes) fmt::print(stderr, "ferry: note: {}\n", note);
  return 0;
}

}  // namespace

Runner add_convert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand(
      "convert", "Write a Hugging Face checkpoint as a GGUF file (llama.cpp's conventions), optionally quantized");
  sub->add_option("in", args->in, "A Hugging Face model directory (config.json + *.safetensors + tokenizer files)")
      ->required();
  sub->add_option("out", args->out, "The GGUF file to write")->required();
  sub->add_option("--dtype", args->dtype,
                  "Weight type of the matrices: q8_0, q6_k, q5_k_m, q4_k_m, q4_0, ... (any GGUF type, or "
                  "llama-quantize's mixes q3_k_s/m/l, q4_k_s/m, q5_k_s/m), f16, bf16, f32 (default: as stored; "
                  "norms and biases are always f32)");
  sub->add_option("--name", args->name, "general.name (default: the model directory's name)");
  sub->add_flag("--no-tokenizer", args->no_tokenizer, "Write no tokenizer (the model then runs on token ids)");
  sub->add_option("--threads,-t", args->threads, "Conversion threads (0: all cores)")->capture_default_str();
  return [args] { return run_convert(*args); };
}

}  // namespace ferry::cli
