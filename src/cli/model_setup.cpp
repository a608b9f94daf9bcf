#include "cli/model_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "engine/plan_placement.h"
#include "engine/weight_loader.h"
#include "formats/json_file.h"
#include "plan/device_map.h"
#include "plan/plan_json.h"

namespace ferry::cli {

void RunOptions::add_to(CLI::App& cmd, bool model_required) {
  auto* m = cmd.add_option("--model,-m", model,
                           "Model: a Hugging Face directory (config.json + *.safetensors) or a "
                           "GGUF file");
  if (model_required) m->required();
  placement.add_to(cmd);
  cmd.add_option("--threads,-t", threads,
                 "Worker threads in all, split over the devices (0: all cores); cpu:0=6GiB@2 sets one device's")
      ->capture_default_str();
  ctx_option = cmd.add_option("--ctx,-c", ctx, "Context length to reserve KV cache for (0: the model's, at most 4096)")
                   ->capture_default_str();
  cmd.add_option("--dtype", dtype, kWeightDtypeHelp);
  cmd.add_option("--kv-dtype", kv_dtype, kv_dtype_help());
  cmd.add_flag("--quiet,-q", quiet, "Do not print the plan or the loading progress");
  cmd.add_flag("--trace-devices", trace_devices, "Log every copy between devices (also: FERRY_TRACE_DEVICES=1)");
}

void PlacementOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--devices", devices,
                 "Devices, optional budgets and threads, e.g. cpu:0=6GiB,cpu:1=6GiB@2 (default: one CPU device per "
                 "NUMA node with its memory)");
  strategy_option = cmd.add_option("--strategy", strategy,
                                   "Placement: balanced, auto, balanced_low_0, sequential (custom: --device-map)")
                        ->capture_default_str();
  cmd.add_option("--device-map", device_map,
                 "JSON map of module-name prefixes to devices (accelerate's device_map format); unplaced modules are "
                 "placed by --strategy");
  cmd.add_flag("--strict-map", strict_map, "Refuse a --device-map that does not place every module");
  cmd.add_option("--plan", plan_file, "Replay a plan saved by `ferry plan --save` (its devices and assignment)");
  chunk_option =
      cmd.add_option("--prefill-chunk", prefill_chunk, "Longest step: prompts are fed in chunks of this many tokens")
          ->capture_default_str();
  cmd.add_option("--max-images", max_images,
                 "Vision models: images one prompt may carry, each planned at its largest (0: the model's default, 1)")
      ->capture_default_str();
}

void PlacementOptions::apply_max_images(ModelSpec& spec) const {
  if (max_images == 0) return;
  if (!spec.config.vision.present()) fail(ErrorKind::Usage, "--max-images: this model has no vision tower");
  if (max_images < 1 || max_images > 64)
    fail(ErrorKind::Usage, "--max-images must be within 1..64, got {}", max_images);
  spec.config.vision.max_images = max_images;
}

std::vector<DeviceSpec> PlacementOptions::device_specs() const {
  std::vector<DeviceSpec> specs = devices.empty() ? default_devices() : parse_device_list(devices);
  resolve_default_budgets(specs);  // a GPU without a budget plans with its real free memory
  for (const std::string& w : budget_warnings(specs)) fmt::print(stderr, "warning: {}\n", w);
  return specs;
}

Plan plan_for(const ModelSpec& spec, const PlacementOptions& o, const RunLimits& limits) {
  if (!o.plan_file.empty()) {
    if (!o.devices.empty() || !o.device_map.empty()) {
      fail(ErrorKind::Usage, "--plan replays a saved plan with its own devices; drop --devices/--device-map");
    }
    for (const CLI::Option* given : {o.strategy_option, o.chunk_option}) {
      if (given != nullptr && given->count() > 0) {
        fail(ErrorKind::Usage, "--plan replays a saved plan with its own {}; drop {} (or make a new plan with it)",
             given->get_name() == "--strategy" ? "placement" : "step limits", given->get_name());
      }
    }
    Plan plan = plan_from_json(read_json_file(o.plan_file, ErrorKind::Format), spec, o.plan_file);
    PlanRequest request{plan.devices.empty() ? std::vector<DeviceSpec>{} : std::vector<DeviceSpec>{},
                        plan.limits,
                        Strategy::Custom,
                        {}};
    for (const auto& d : plan.devices) request.devices.push_back(d.device);
    check_plan_fits(plan, spec, request);
    return plan;
  }
  PlanRequest request;
  request.devices = o.device_specs();
  request.limits = limits;
  request.strategy = parse_strategy(o.strategy);
  if (request.strategy == Strategy::Custom && o.device_map.empty()) {
    fail(ErrorKind::Usage, "--strategy custom needs --device-map FILE");
  }
  if (!o.device_map.empty()) {
    request.pinned =
        pins_from_device_map(read_json_file(o.device_map, ErrorKind::Usage), spec, request.devices, o.device_map);
    if (request.strategy == Strategy::Auto || request.strategy == Strategy::Custom)
      request.strategy = Strategy::Balanced;
    Plan plan = make_plan(spec, request);
    if (o.strict_map) require_complete(request.pinned, spec, plan);
    plan.strategy = "custom";
    request.strategy = Strategy::Custom;
    check_plan_fits(plan, spec, request);
    return plan;
  }
  Plan plan = make_plan(spec, request);
  check_plan_fits(plan, spec, request);
  return plan;
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
    // On a terminal the line is rewritten in place and cleared to its end ("\33[K"): a shorter
    // figure ("1.00 MiB" after "999.50 KiB") leaves no stale characters behind.
    fmt::print(stderr, "{}loading weights [{}{}] {:3d}% {} / {}{}", tty_ ? "\r\33[K" : "", std::string(filled, '#'),
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

std::optional<WeightQuant> parse_weight_quant_option(const std::string& name) {
  if (name.empty()) return std::nullopt;
  const auto q = parse_weight_quant(name);
  if (!q) fail(ErrorKind::Usage, "--dtype '{}' is not a weight type; use one of {}", name, weight_quant_names());
  return q;
}

std::string kv_dtype_help() {
  std::vector<std::string_view> names;
  for (DType t : kKvCacheDtypes) names.push_back(dtype_name(t));
  return fmt::format("KV-cache dtype: {} (default {}; q8_0 needs a kv width of whole blocks of 32)",
                     fmt::join(names, ", "), dtype_name(RunLimits{}.kv_dtype));
}

std::optional<DType> parse_kv_dtype_option(const std::string& name) {
  if (name.empty()) return std::nullopt;
  const auto t = dtype_from_name(name);
  if (!t || !is_kv_cache_dtype(*t)) {
    std::vector<std::string_view> names;
    for (DType k : kKvCacheDtypes) names.push_back(dtype_name(k));
    fail(ErrorKind::Usage, "--kv-dtype '{}' is not a KV-cache dtype; use one of {}", name, fmt::join(names, ", "));
  }
  return t;
}

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
  const int threads = resolve_threads(o.threads);
  if (!o.placement.plan_file.empty() && o.ctx_option != nullptr && o.ctx_option->count() > 0) {
    fail(ErrorKind::Usage, "--plan replays a saved plan with its own context; drop --ctx (or make a new plan with it)");
  }
  m->ckpt = open_checkpoint(o.model);
  o.placement.apply_max_images(m->ckpt.spec);
  const ModelConfig& c = m->ckpt.config();
  m->context = resolve_context(o.ctx, c);
  // The plan is made and checked before any weight is read.
  RunLimits limits;
  limits.max_context = m->context;
  limits.prefill_chunk = o.placement.prefill_chunk;
  limits.weight_quant = parse_weight_quant_option(o.dtype);
  if (limits.weight_quant && !o.placement.plan_file.empty()) {
    fail(ErrorKind::Usage,
         "--plan replays a saved plan with its own weight dtype; drop --dtype (or make a new plan with it)");
  }
  if (limits.weight_quant) check_weight_quant(m->ckpt.spec, *limits.weight_quant);
  if (const auto kv = parse_kv_dtype_option(o.kv_dtype)) limits.kv_dtype = *kv;
  if (!o.kv_dtype.empty() && !o.placement.plan_file.empty()) {
    fail(ErrorKind::Usage,
         "--plan replays a saved plan with its own KV-cache dtype; drop --kv-dtype (or make a new plan with it)");
  }
  m->plan = plan_for(m->ckpt.spec, o.placement, limits);
  m->context = m->plan.limits.max_context;  // a replayed plan brings its own
  // The graph and the loader read the dtypes the plan counted.
  if (m->plan.limits.weight_quant) apply_weight_quant(m->ckpt.spec, *m->plan.limits.weight_quant);
  std::vector<DeviceSpec> specs;
  for (const auto& d : m->plan.devices) specs.push_back(d.device);
  if (!o.quiet) {
    fmt::print(stderr, "model: {} ({}, {} layers, {} parameters, {})\n", o.model, c.architecture, c.n_layer,
               parameter_count_text(m->ckpt.spec.parameter_count()), format_bytes(m->ckpt.weight_bytes()));
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
  auto session = std::make_unique<Session>(ckpt.spec, placement, weights, context, plan.limits.prefill_chunk,
                                           plan.limits.kv_dtype);
  reserve_planned_workspaces(session->executor(), plan, *devices);
  return session;
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

std::string parameter_count_text(uint64_t count) {
  const auto n = static_cast<double>(count);
  const auto three_digits = [](double v, const char* unit) {
    return fmt::format("{:.{}f}{}", v, v >= 100 ? 0 : v >= 10 ? 1 : 2, unit);
  };
  if (n >= 1e9) return three_digits(n / 1e9, "B");
  if (n >= 1e6) return three_digits(n / 1e6, "M");
  if (n >= 1e3) return three_digits(n / 1e3, "K");
  return std::to_string(count);
}

std::vector<DeviceUsage> device_usage(const LoadedModel& model, const Session& session) {
  const RunStats& stats = session.last_stats();
  const auto weights = model.weights.bytes_by_device();
  const auto states = session.states().bytes_by_device();
  std::vector<DeviceUsage> out;
  for (const auto& dp : model.plan.devices) {
    DeviceUsage u;
    u.name = dp.device.id.str();
    u.planned_bytes = dp.total();
    u.weight_bytes = weights.count(u.name) ? weights.at(u.name) : 0;
    u.kv_bytes = states.count(u.name) ? states.at(u.name) : 0;
    u.workspace_bytes = dp.modules.empty() ? 0 : session.workspace_bytes(model.devices->get(dp.device.id));
    u.planned_weight_bytes = dp.weight_bytes;
    u.planned_kv_bytes = dp.kv_bytes;
    u.planned_workspace_bytes = dp.workspace_bytes;
    u.peak_bytes = session.peak_bytes(u.name);
    u.allocated_bytes = model.devices->get(dp.device.id).allocated_bytes();
    for (const auto& e : stats.edges) {
      if (e.to == u.name && e.from != "host") {
        u.copies++;
        u.bytes_copied += e.bytes;
      }
    }
    out.push_back(u);
  }
  return out;
}

std::string device_report(const LoadedModel& model, const Session& session, int decoded_tokens) {
  // Each figure measured, then as planned.
  // "allocated": what the device's backend holds from its driver, padding included.
  std::string out = fmt::format("  {:<10} {:>23} {:>23} {:>23} {:>23} {:>11}\n", "device", "weights (plan)",
                                "KV cache (plan)", "workspace (plan)", "peak (plan)", "allocated");
  const auto pair = [](uint64_t measured, uint64_t planned) {
    return fmt::format("{} ({})", format_bytes(measured), format_bytes(planned));
  };
  for (const DeviceUsage& u : device_usage(model, session)) {
    out += fmt::format("  {:<10} {:>23} {:>23} {:>23} {:>23} {:>11}\n", u.name,
                       pair(u.weight_bytes, u.planned_weight_bytes), pair(u.kv_bytes, u.planned_kv_bytes),
                       pair(u.workspace_bytes, u.planned_workspace_bytes), pair(u.peak_bytes, u.planned_bytes),
                       format_bytes(u.allocated_bytes));
  }
  const RunStats& stats = session.last_stats();
  out += fmt::format("  {} step: {} copies between devices, {} moved{}\n", decoded_tokens > 0 ? "last decode" : "last",
                     stats.device_copies, format_bytes(stats.device_bytes_moved),
                     decoded_tokens > 0 ? " (per decoded token)" : "");
  return out;
}

}  // namespace ferry::cli
