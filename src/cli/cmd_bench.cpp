// Speed, reported as ratios measured in the same run: decode's achieved weight-read bandwidth over
// the machine's read bandwidth, which ferry measures itself with the same thread count.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"
#include "kernels/bandwidth.h"

namespace ferry::cli {

namespace {

struct BenchArgs {
  RunOptions run;
  int prompt_tokens = 128;
  int gen_tokens = 32;
  int reps = 3;
  bool json = false;
};

// Bytes a decode step reads from weights: every matrix once; the embedding table only one row,
// unless the head reads it too (tied).
uint64_t weight_bytes_per_token(const ModelSpec& spec) {
  uint64_t bytes = 0;
  for (const auto& m : spec.modules) {
    for (const auto& p : m.params) {
      const uint64_t full = dtype_bytes(p.compute_dtype, static_cast<uint64_t>(p.shape.numel())).value_or(0);
      if (p.role == LogicalTensor::TokenEmbedding && !spec.config.tied_embeddings) {
        bytes += full / static_cast<uint64_t>(p.shape[0]);
      } else {
        bytes += full;
      }
    }
  }
  return bytes;
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int run_bench(BenchArgs a) {
  if (a.prompt_tokens <= 0 || a.gen_tokens <= 0 || a.reps <= 0) {
    fail(ErrorKind::Usage, "--prompt-tokens, --gen-tokens and --reps must be positive");
  }
  if (a.run.ctx == 0) a.run.ctx = a.prompt_tokens + a.gen_tokens + 1;
  auto model = load_model(a.run);
  const int threads = resolve_threads(a.run.threads);

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, model->ckpt.config().vocab - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_tokens));
  for (auto& id : prompt) id = pick(rng);

  double best_prompt = 1e30;
  double best_decode = 1e30;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto session = model->new_session();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits = session->eval(prompt);
    auto t1 = std::chrono::steady_clock::now();
    int32_t next = 0;
    for (int i = 0; i < a.gen_tokens; ++i) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      logits = session->eval(std::vector<int32_t>{next});
    }
    auto t2 = std::chrono::steady_clock::now();
    best_prompt = std::min(best_prompt, seconds(t0, t1));
    best_decode = std::min(best_decode, seconds(t1, t2));
  }

  // The machine's read bandwidth, with as many threads as the run used.
  ThreadPool pool(threads);
  const double machine_bw = kernels::measure_read_bandwidth(pool);
  const uint64_t per_token = weight_bytes_per_token(model->ckpt.spec);
  const double decode_tps = a.gen_tokens / best_decode;
  const double achieved_bw = static_cast<double>(per_token) * decode_tps;
  const double prompt_tps = a.prompt_tokens / best_prompt;

  if (a.json) {
    nlohmann::json j;
    j["model"] = a.run.model;
    j["threads"] = threads;
    j["devices"] = a.run.placement.devices;
    j["prompt_tokens"] = a.prompt_tokens;
    j["gen_tokens"] = a.gen_tokens;
    j["prompt_tokens_per_s"] = prompt_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["weight_bytes_per_token"] = per_token;
    j["achieved_read_bandwidth"] = achieved_bw;
    j["machine_read_bandwidth"] = machine_bw;
    j["bandwidth_fraction"] = achieved_bw / machine_bw;
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("threads                 {}\n", threads);
  fmt::print("prompt                  {} tokens: {:.1f} tok/s\n", a.prompt_tokens, prompt_tps);
  fmt::print("decode                  {} tokens: {:.2f} tok/s ({:.2f} ms/token)\n", a.gen_tokens, decode_tps,
             1000.0 / decode_tps);
  fmt::print("weights read per token  {}\n", format_bytes(per_token));
  fmt::print("achieved read bandwidth {:.2f} GB/s\n", achieved_bw / 1e9);
  fmt::print("machine read bandwidth  {:.2f} GB/s (measured now, {} threads)\n", machine_bw / 1e9, threads);
  fmt::print("fraction of bandwidth   {:.1f}%\n", 100.0 * achieved_bw / machine_bw);
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt and decode speed, and decode's share of memory bandwidth");
  a->run.add_to(*cmd);
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length")->capture_default_str();
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens to decode (EOS ignored)")->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions (the best is reported)")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object");
  return [a] { return run_bench(*a); };
}

}  // namespace ferry::cli
