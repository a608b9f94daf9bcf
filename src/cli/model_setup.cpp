#include "cli/model_setup.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "engine/plan_placement.h"
#include "engine/weight_loader.h"

namespace ferry::cli {

void RunOptions::add_to(CLI::App& cmd, bool model_required) {
  auto* m = cmd.add_option("--model,-m", model,
                           "Model: a Hugging Face directory (config.json + *.safetensors) or a "
                           "GGUF file");
  if (model_required) m->required();
  cmd.add_option("--devices", devices,
                 "Devices and optional memory budgets, e.g. cpu:0=6GiB,cpu:1=6GiB (the model is split over them)")
      ->capture_default_str();
  cmd.add_option("--threads,-t", threads, "Worker threads in all, split over the devices (0: all cores)")
      ->capture_default_str();
  cmd.add_option("--ctx,-c", ctx, "Context length to reserve KV cache for (0: the model's, at most 4096)")
      ->capture_default_str();
  cmd.add_flag("--quiet,-q", quiet, "Do not print the plan or the loading progress");
  cmd.add_flag("--trace-devices", trace_devices, "Log every copy between devices (also: FERRY_TRACE_DEVICES=1)");
}

namespace {

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), tty_(isatty(fileno(stderr)) != 0) {}
  void update(uint64_t done, uint64_t total) {
    if (!enabled_ || total == 0) return;
    const int percent = static_cast<int>(done * 100 / total);
    if (!tty_ && done < total) return;  // logs get one final line, not a stream of updates
    if (tty_ && percent == last_percent_ && done < total) return;
    last_percent_ = percent;
    constexpr int kWidth = 30;
    const int filled = percent * kWidth / 100;
    fmt::print(stderr, "{}loading weights [{}{}] {:3d}% {} / {}{}", tty_ ? "\r" : "", std::string(filled, '#'),
               std::string(kWidth - filled, ' '), percent, format_bytes(done), format_bytes(total),
               done >= total ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  bool tty_;
  int last_percent_ = -1;
};

}  // namespace

int64_t resolve_context(int64_t requested, const ModelConfig& config) {
  if (requested < 0) fail(ErrorKind::Usage, "--ctx must be positive, got {}", requested);
  if (requested > config.max_context) {
    fail(ErrorKind::Usage, "--ctx {} exceeds the {} tokens this model was made for (its config); use at most {}",
         requested, config.max_context, config.max_context);
  }
  return requested > 0 ? requested : std::min<int64_t>(config.max_context, 4096);
}

int resolve_threads(int requested) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (requested < 0) fail(ErrorKind::Usage, "--threads must be positive, got {}", requested);
  if (requested > 4 * hardware) {
    fail(ErrorKind::Usage, "--threads {} is far more than the {} hardware threads here; use at most {}", requested,
         hardware, 4 * hardware);
  }
  return requested > 0 ? requested : hardware;
}

std::unique_ptr<LoadedModel> load_model(const RunOptions& o) {
  auto m = std::make_unique<LoadedModel>();
  const auto specs = parse_device_list(o.devices);
  const int threads = resolve_threads(o.threads);
  m->ckpt = open_checkpoint(o.model);
  const ModelConfig& c = m->ckpt.config();
  m->context = resolve_context(o.ctx, c);
  // The plan is made and checked before any weight is read.
  m->plan = plan_balanced(m->ckpt.spec, specs, m->context);
  if (!o.quiet) {
    fmt::print(stderr, "model: {} ({}, {} layers, {:.1f}M parameters, {})\n", o.model, c.architecture, c.n_layer,
               static_cast<double>(m->ckpt.spec.parameter_count()) / 1e6, format_bytes(m->ckpt.weight_bytes()));
    fmt::print(stderr, "{}", m->plan.describe());
  }
  m->devices = std::make_unique<DeviceSet>(specs, threads);
  m->placement = placement_from_plan(m->plan, *m->devices);
  ProgressBar bar(!o.quiet);
  load_weights(m->ckpt, m->placement, m->weights, [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  m->tokenizer = load_checkpoint_tokenizer(m->ckpt);
  return m;
}

std::unique_ptr<Session> LoadedModel::new_session() {
  return std::make_unique<Session>(ckpt.spec, placement, weights, context);
}

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || id < 0) {
      fail(ErrorKind::Usage, "--prompt-ids: '{}' is not a token id (write ids like 1,2,3)", item);
    }
    ids.push_back(id);
    start = comma + 1;
    if (comma + 1 == text.size()) fail(ErrorKind::Usage, "--prompt-ids: '{}' ends with a comma", text);
  }
  if (ids.empty()) fail(ErrorKind::Usage, "--prompt-ids is empty (write ids like 1,2,3)");
  return ids;
}

std::string device_report(const LoadedModel& model, const Session& session, int decoded_tokens) {
  const RunStats& stats = session.last_stats();
  std::string out =
      fmt::format("  {:<8} {:>12} {:>12} {:>12} {:>12}\n", "device", "weights", "KV cache", "peak", "planned");
  const auto weights = model.weights.bytes_by_device();
  const auto states = session.states().bytes_by_device();
  for (const auto& dp : model.plan.devices) {
    const std::string name = dp.device.id.str();
    const auto w = weights.count(name) ? weights.at(name) : 0;
    const auto kv = states.count(name) ? states.at(name) : 0;
    Device* dev = nullptr;
    for (Device* d : model.devices->all()) {
      if (d->name() == name) dev = d;
    }
    out += fmt::format("  {:<8} {:>12} {:>12} {:>12} {:>12}\n", name, format_bytes(w), format_bytes(kv),
                       format_bytes(dev ? dev->allocator().peak() : 0), format_bytes(dp.weight_bytes + dp.kv_bytes));
  }
  out += fmt::format("  last step: {} copies between devices, {} moved", stats.device_copies,
                     format_bytes(stats.device_bytes_moved));
  if (decoded_tokens > 0) out += fmt::format(" (per decoded token)");
  out += "\n";
  return out;
}

}  // namespace ferry::cli
