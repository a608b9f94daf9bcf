// make_tiny_model: writes a random-weight checkpoint, deterministic by seed, for one of the
// architectures ferry supports, in Hugging Face layout (config.json, generation_config.json,
// safetensors, tokenizer.json, tokenizer_config.json) and/or GGUF (model.gguf). See
// docs/test-models.md.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "tiny_model/generate.h"

int main(int argc, char** argv) {
  using namespace ferry;
  CLI::App app{"Writes a tiny random-weight checkpoint (Hugging Face layout and/or GGUF), deterministic by seed."};
  std::string arch = "llama";
  std::string dtype = "f32";
  int64_t seed = 0;
  tiny::Options o;
  app.add_option("--arch", arch, "llama | qwen2 | glm | glm4 | chatglm")->required();
  app.add_option("--out", o.out_dir, "directory to write into (created if missing)")->required();
  app.add_option("--format", o.format, "hf | gguf | both")->capture_default_str();
  app.add_option("--dtype", dtype, "f32 | f16 | bf16 | q8_0 | q4_0 (block formats: GGUF only)")->capture_default_str();
  app.add_option("--seed", seed, "weights are a pure function of the seed")->capture_default_str();
  app.add_option("--preset", o.preset, "tiny | demo | bench300m")->capture_default_str();
  app.add_option("--layers", o.layers, "override the preset's number of layers");
  app.add_option("--hidden", o.hidden, "override the hidden size");
  app.add_option("--heads", o.heads, "override the number of query heads");
  app.add_option("--kv-heads", o.kv_heads, "override the number of key/value heads");
  app.add_option("--head-dim", o.head_dim, "override the head dimension (default: hidden / heads when those change)");
  app.add_option("--ffn", o.ffn, "override the feed-forward size");
  app.add_option("--max-context", o.max_context, "override the context length in the config");
  app.add_option("--vocab", o.vocab, "embedding rows (>= the tokenizer's size; the rest are unused pad tokens)");
  app.add_option("--shards", o.shards, "split the safetensors into this many files plus an index")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "worker threads (0: all)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    o.arch = tiny::parse_arch(arch);
    const std::optional<DType> parsed = dtype_from_name(dtype);
    if (!parsed) fail(ErrorKind::Usage, "unknown --dtype '{}'; choose f32, f16, bf16, q8_0 or q4_0", dtype);
    o.dtype = *parsed;
    if (seed < 0) fail(ErrorKind::Usage, "--seed must not be negative, got {}", seed);
    o.seed = static_cast<uint64_t>(seed);
    const auto start = std::chrono::steady_clock::now();
    const tiny::Result r = tiny::write_tiny_model(o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const tiny::Hyper& h = r.hyper;
    fmt::print("{} {} seed {}: {} layers, hidden {}, heads {}/{} x {}, ffn {}, vocab {}, {:.2f}M parameters, {}\n",
               arch, o.preset, o.seed, h.layers, h.hidden, h.heads, h.kv_heads, h.head_dim, h.ffn, h.vocab,
               static_cast<double>(r.parameters) / 1e6, dtype_name(o.dtype));
    for (const std::string& f : r.files) fmt::print("  {}/{}\n", o.out_dir, f);
    fmt::print("written in {:.2f} s\n", seconds);
  } catch (const Error& e) {
    fmt::print(stderr, "make_tiny_model: {}: {}\n", error_kind_name(e.kind()), e.what());
    return 1;
  }
  return 0;
}
