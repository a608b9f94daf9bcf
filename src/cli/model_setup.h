// What every model-running subcommand shares: the device/thread/context options, opening the
// checkpoint, planning, printing the plan, and loading the weights with a progress bar.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "backends/registry.h"
#include "core/device.h"
#include "engine/checkpoint.h"
#include "engine/generator.h"
#include "engine/session.h"
#include "plan/plan.h"
#include "plan/strategy.h"
#include "runtime/placement.h"
#include "runtime/weight_store.h"

namespace ferry::cli {

// Where a model goes: the devices, and a strategy, a device map or a saved plan.
struct PlacementOptions {
  std::string devices;  // empty: default_devices() (one CPU device per NUMA node)
  std::string strategy = "balanced";
  std::string device_map;   // accelerate-style JSON file: pins units, the rest is placed by the strategy
  bool strict_map = false;  // the device map must place every unit
  std::string plan_file;    // a saved plan (ferry plan --save), replayed exactly (its devices too)
  int max_images = 0;       // images one prompt may carry (0: the model's default); planned for at their largest
  // Options a saved plan overrides, to refuse them with --plan instead of ignoring them.
  CLI::Option* strategy_option = nullptr;
  CLI::Option* chunk_option = nullptr;
  int64_t prefill_chunk = 512;

  void add_to(CLI::App& cmd);
  // Sets spec's images per prompt from --max-images (Error(Usage) for a text model or a count
  // outside 1..64).
  void apply_max_images(ModelSpec& spec) const;
  // The devices asked for (not with --plan, whose devices are in the file), GPUs without a budget
  // given their free memory less a reserve (resolve_default_budgets).
  std::vector<DeviceSpec> device_specs() const;
};

// --dtype's help text, the same on every command that loads weights.
inline constexpr const char* kWeightDtypeHelp =
    "Quantize or convert the matrices while loading: q8_0, q6_k, q5_k_m, q4_k_m, q4_0, ... (any GGUF type, or "
    "llama-quantize's mixes q3_k_s/m/l, q4_k_s/m, q5_k_s/m), f16, bf16, f32";
// --dtype's value: nullopt when empty, Error(Usage) listing the names for anything unknown.
std::optional<WeightQuant> parse_weight_quant_option(const std::string& name);

// --kv-dtype's help text (the dtypes and RunLimits' default) and value: nullopt when empty (keep
// RunLimits' default); anything but one of graph/op.h's kKvCacheDtypes is Error(Usage) listing them.
std::string kv_dtype_help();
std::optional<DType> parse_kv_dtype_option(const std::string& name);

struct RunOptions {
  std::string model;
  std::string dtype;  // --dtype: empty keeps the weights as stored
  PlacementOptions placement;
  int threads = 0;     // 0: all hardware threads, split over the devices
  int64_t ctx = 0;     // 0: min(model context, 4096)
  bool quiet = false;  // no plan, no progress bar
  bool trace_devices = false;
  CLI::Option* ctx_option = nullptr;  // a saved plan brings its own context
  std::string kv_dtype;               // --kv-dtype: empty keeps RunLimits' default (a saved plan brings its own)

  void add_to(CLI::App& cmd, bool model_required = true);
};

// Plans `spec` under `options` and `limits` (the strategy, device map or saved plan), and checks
// that it fits: Error(OutOfMemory) says which device, by how much and what would fit.
Plan plan_for(const ModelSpec& spec, const PlacementOptions& options, const RunLimits& limits);

// Owns everything a run needs, in destruction-safe order.
struct LoadedModel {
  Checkpoint ckpt;
  std::unique_ptr<DeviceSet> devices;
  Plan plan;
  Placement placement;
  WeightStore weights;
  std::optional<Tokenizer> tokenizer;
  int64_t context = 0;

  std::unique_ptr<Session> new_session();
};

// --ctx resolved against the model: 0 means the model's context, at most 4096.
int64_t resolve_context(int64_t requested, const ModelConfig& config);
// --threads resolved: 0 means every hardware thread; more than 4 per hardware thread is refused.
int resolve_threads(int requested);

// Opens, plans (printing the plan to stderr unless quiet), loads.
std::unique_ptr<LoadedModel> load_model(const RunOptions& options);

// "1,2,3" -> ids (Error(Usage) naming the bad item).
std::vector<int32_t> parse_id_list(const std::string& text);

// A parameter count with three significant digits: "152K", "3.10M", "9.40B".
std::string parameter_count_text(uint64_t count);

// A per-device report after a run: weights, KV cache, workspace and peak, each measured and as
// planned; copies and bytes moved per decoded token (the last step's).
std::string device_report(const LoadedModel& model, const Session& session, int decoded_tokens);

struct DeviceUsage {
  std::string name;
  uint64_t planned_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t workspace_bytes = 0;  // the executor's workspace there
  uint64_t planned_weight_bytes = 0;
  uint64_t planned_kv_bytes = 0;
  uint64_t planned_workspace_bytes = 0;
  uint64_t allocated_bytes = 0;  // what the device's backend holds now, its driver's padding included
  size_t copies = 0;             // into this device, last step
  uint64_t bytes_copied = 0;     // into this device, last step
};
std::vector<DeviceUsage> device_usage(const LoadedModel& model, const Session& session);

}  // namespace ferry::cli
