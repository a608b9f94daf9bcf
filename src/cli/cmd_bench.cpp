// Speed, reported as ratios measured in the same run: decode's achieved read bandwidth (weights
// and KV cache) over the devices' read bandwidth, which each device's backend measures itself (the
// CPU with the device's threads, a GPU with a shader) right after each repetition. On a shared
// machine both move with the load; a ratio of two figures taken moments apart moves much less, and
// the median over the repetitions least. Split over devices, the ceiling is the time each device
// needs to read its own share at its own bandwidth, one after the other as decode runs them.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/registry.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"

namespace ferry::cli {

namespace {

struct BenchArgs {
  RunOptions run;
  int prompt_tokens = 128;
  int gen_tokens = 32;
  int reps = 3;
  bool json = false;
};

// Bytes a decode step reads from the weights of module `m`: every matrix once; the embedding
// table only one row, unless the head reads it too (tied).
uint64_t weight_bytes_per_token(const ModelSpec& spec, const ModuleSpec& m) {
  uint64_t bytes = 0;
  for (const auto& p : m.params) {
    const uint64_t full = dtype_bytes(p.compute_dtype, static_cast<uint64_t>(p.shape.numel())).value_or(0);
    if (p.role == LogicalTensor::TokenEmbedding && !spec.config.tied_embeddings) {
      bytes += full / static_cast<uint64_t>(p.shape[0]);
    } else {
      bytes += full;
    }
  }
  return bytes;
}

// KV-cache bytes one layer's attention reads while decoding tokens at positions [first, first +
// count): at position p it reads p + 1 rows of K and of V (in the cache's dtype).
uint64_t kv_bytes_read(const ModelConfig& c, DType kv_dtype, int64_t first, int64_t count) {
  const uint64_t row = dtype_bytes(kv_dtype, static_cast<uint64_t>(c.kv_width())).value_or(0);
  uint64_t rows = 0;
  for (int64_t p = first; p < first + count; ++p) rows += static_cast<uint64_t>(p + 1);
  return rows * row * 2;
}

// What the decode steps read, per device of the plan (weights, then weights + KV cache).
struct DecodeReads {
  std::vector<uint64_t> weights;  // per token
  std::vector<uint64_t> total;    // over all decoded tokens
};

DecodeReads decode_reads(const Plan& plan, const ModelSpec& spec, int64_t first, int64_t count) {
  DecodeReads r;
  r.weights.assign(plan.devices.size(), 0);
  r.total.assign(plan.devices.size(), 0);
  const uint64_t kv_per_layer = kv_bytes_read(spec.config, plan.limits.kv_dtype, first, count);
  for (size_t i = 0; i < spec.modules.size(); ++i) {
    const ModuleSpec& m = spec.modules[i];
    const auto d = static_cast<size_t>(plan.device_index_of(m.name));
    const uint64_t w = weight_bytes_per_token(spec, m);
    r.weights[d] += w;
    r.total[d] += w * static_cast<uint64_t>(count) + (plan.units.at(i).kind == UnitKind::Layer ? kv_per_layer : 0);
  }
  return r;
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Rep {
  double prompt_s = 0;
  double decode_s = 0;
  std::vector<double> device_bw;  // each device's read bandwidth, measured right after this repetition
  double ceiling_s = 0;           // the decode time at those bandwidths
  double fraction = 0;            // ceiling_s / decode_s
};

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

  // Decode reads positions prompt_tokens .. prompt_tokens + gen_tokens - 1.
  const DecodeReads reads = decode_reads(model->plan, model->ckpt.spec, a.prompt_tokens, a.gen_tokens);
  uint64_t weight_bytes = 0, decode_bytes = 0;
  for (size_t d = 0; d < reads.total.size(); ++d) {
    weight_bytes += reads.weights[d];
    decode_bytes += reads.total[d];
  }
  std::vector<Device*> plan_devices;
  for (const auto& d : model->plan.devices) plan_devices.push_back(&model->devices->get(d.device.id));
  std::vector<Rep> reps;
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
    Rep r;
    r.prompt_s = seconds(t0, t1);
    r.decode_s = seconds(t1, t2);
    for (size_t d = 0; d < plan_devices.size(); ++d) {
      if (reads.total[d] == 0) {
        r.device_bw.push_back(0);
        continue;
      }
      r.device_bw.push_back(measure_read_bandwidth(*plan_devices[d]));
      r.ceiling_s += static_cast<double>(reads.total[d]) / r.device_bw.back();
    }
    r.fraction = r.ceiling_s / r.decode_s;
    reps.push_back(r);
  }

  std::vector<double> fractions, decode_tps, machine_bws;
  std::vector<std::vector<double>> device_bws(plan_devices.size());
  double best_prompt = 1e30, best_decode = 1e30;
  for (const Rep& r : reps) {
    fractions.push_back(r.fraction);
    decode_tps.push_back(a.gen_tokens / r.decode_s);
    machine_bws.push_back(static_cast<double>(decode_bytes) / r.ceiling_s);  // the devices' bandwidth, combined
    for (size_t d = 0; d < plan_devices.size(); ++d) device_bws[d].push_back(r.device_bw[d]);
    best_prompt = std::min(best_prompt, r.prompt_s);
    best_decode = std::min(best_decode, r.decode_s);
  }
  const double fraction = median(fractions);
  const double fraction_min = *std::min_element(fractions.begin(), fractions.end());
  const double fraction_max = *std::max_element(fractions.begin(), fractions.end());
  const double machine_bw = median(machine_bws);
  const double decode_tps_best = a.gen_tokens / best_decode;
  const double prompt_tps = a.prompt_tokens / best_prompt;
  const double bytes_per_token = static_cast<double>(decode_bytes) / a.gen_tokens;
  const char* q8_activations = kernels::q8_0_activations() == kernels::Q8Activations::Q8_0 ? "q8_0" : "f32";
  const char* gemv_prefetch = kernels::gemv_prefetch() == kernels::GemvPrefetch::On ? "on" : "off";

  if (a.json) {
    nlohmann::json j;
    j["model"] = a.run.model;
    j["threads"] = threads;
    j["q8_0_activations"] = q8_activations;
    j["cpu_simd_level"] = kernels::simd_level();
    j["gemv_prefetch"] = gemv_prefetch;
    j["kv_dtype"] = std::string(dtype_name(model->plan.limits.kv_dtype));
    j["devices"] = a.run.placement.devices;
    j["prompt_tokens"] = a.prompt_tokens;
    j["gen_tokens"] = a.gen_tokens;
    j["prompt_tokens_per_s"] = prompt_tps;
    j["decode_tokens_per_s"] = decode_tps_best;
    j["decode_tokens_per_s_median"] = median(decode_tps);
    j["weight_bytes_per_token"] = weight_bytes;
    j["read_bytes_per_token"] = bytes_per_token;
    j["achieved_read_bandwidth"] = bytes_per_token * decode_tps_best;
    j["machine_read_bandwidth"] = machine_bw;
    for (size_t d = 0; d < plan_devices.size(); ++d) {
      j["device_read_bandwidth"][plan_devices[d]->name()] = median(device_bws[d]);
      j["device_read_bytes_per_token"][plan_devices[d]->name()] = static_cast<double>(reads.total[d]) / a.gen_tokens;
    }
    j["bandwidth_fraction"] = fraction;
    j["bandwidth_fraction_min"] = fraction_min;
    j["bandwidth_fraction_max"] = fraction_max;
    nlohmann::json per_rep = nlohmann::json::array();
    for (const Rep& r : reps) {
      per_rep.push_back({{"decode_tokens_per_s", a.gen_tokens / r.decode_s},
                         {"machine_read_bandwidth", static_cast<double>(decode_bytes) / r.ceiling_s},
                         {"bandwidth_fraction", r.fraction}});
    }
    j["reps"] = per_rep;
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("threads                 {}\n", threads);
  fmt::print("CPU kernels             {} (FERRY_SIMD)\n", kernels::simd_level());
  fmt::print("quantized weights meet  {} activations (FERRY_Q8_ACTIVATIONS)\n", q8_activations);
  fmt::print("decode prefetch         {} (FERRY_GEMV_PREFETCH)\n", gemv_prefetch);
  fmt::print("KV cache                {}\n", dtype_name(model->plan.limits.kv_dtype));
  fmt::print("prompt                  {} tokens: {:.1f} tok/s (best of {})\n", a.prompt_tokens, prompt_tps, a.reps);
  fmt::print("decode                  {} tokens: {:.2f} tok/s ({:.2f} ms/token, best of {}; median {:.2f} tok/s)\n",
             a.gen_tokens, decode_tps_best, 1000.0 / decode_tps_best, a.reps, median(decode_tps));
  fmt::print("read per token          {} weights + {} KV cache (mean)\n", format_bytes(weight_bytes),
             format_bytes(static_cast<size_t>(bytes_per_token) - weight_bytes));
  fmt::print("achieved read bandwidth {:.2f} GB/s (best repetition)\n", bytes_per_token * decode_tps_best / 1e9);
  for (size_t d = 0; d < plan_devices.size(); ++d) {
    if (reads.total[d] == 0) continue;
    fmt::print("{:<24}{:.2f} GB/s read bandwidth (median; measured after each repetition{}), {} per token\n",
               plan_devices[d]->name(), median(device_bws[d]) / 1e9,
               plan_devices[d]->id().type == DeviceType::Cpu ? fmt::format(", {} threads", plan_devices[d]->threads())
                                                             : std::string(", on the device"),
               format_bytes(static_cast<size_t>(static_cast<double>(reads.total[d]) / a.gen_tokens)));
  }
  if (plan_devices.size() > 1) {
    fmt::print(
        "combined bandwidth      {:.2f} GB/s (median: the bytes over the time each device needs for its share)\n",
        machine_bw / 1e9);
  }
  fmt::print(
      "fraction of bandwidth   {:.1f}% (median of {} repetitions, each against the probe run right after "
      "it; range {:.1f}-{:.1f}%)\n",
      100.0 * fraction, a.reps, 100.0 * fraction_min, 100.0 * fraction_max);
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt and decode speed, and decode's share of memory bandwidth");
  a->run.add_to(*cmd);
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length")->capture_default_str();
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens to decode (EOS ignored)")->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions (best tok/s and the median bandwidth fraction are reported)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object");
  return [a] { return run_bench(*a); };
}

}  // namespace ferry::cli
