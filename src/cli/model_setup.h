// What every model-running subcommand shares: the device/thread/context options, opening the
// checkpoint, planning, printing the plan, and loading the weights with a progress bar.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "engine/checkpoint.h"
#include "engine/generator.h"
#include "engine/session.h"
#include "plan/plan.h"
#include "runtime/placement.h"
#include "runtime/weight_store.h"

namespace ferry::cli {

struct RunOptions {
  std::string model;
  std::string devices = "cpu:0";
  int threads = 0;     // 0: all hardware threads, split over the devices
  int64_t ctx = 0;     // 0: min(model context, 4096)
  bool quiet = false;  // no plan, no progress bar
  bool trace_devices = false;

  void add_to(CLI::App& cmd, bool model_required = true);
};

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

// A per-device report after a run: weights, KV cache, peak, copies.
std::string device_report(const LoadedModel& model, const Session& session, int decoded_tokens);

}  // namespace ferry::cli
