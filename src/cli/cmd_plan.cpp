// `ferry plan`: where each module would go and what each device would hold, before anything is
// loaded; from a checkpoint's headers or from a config.json (or a bundled preset) alone.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"
#include "engine/checkpoint.h"
#include "engine/model_config_reader.h"
#include "formats/json_file.h"
#include "models/presets.h"
#include "plan/device_map.h"
#include "plan/plan_json.h"

namespace ferry::cli {

namespace {

struct PlanArgs {
  std::string model;
  std::string config;  // a config.json, or a preset name
  PlacementOptions placement;
  int64_t max_context = 0;
  int64_t max_batch = 1;
  std::string dtype;  // weights as if stored in this dtype
  std::string kv_dtype;
  std::string reserve = "0";
  std::string save;
  std::string export_format;
  std::string export_path;
  bool json = false;
};

// The model's spec from a checkpoint's headers, or from a config alone.
ModelSpec load_spec(const PlanArgs& a, std::optional<Checkpoint>& ckpt) {
  if (a.model.empty() == a.config.empty()) fail(ErrorKind::Usage, "give either --model PATH or --config FILE|PRESET");
  if (!a.model.empty()) {
    ckpt = open_checkpoint(a.model);
    return ckpt->spec;
  }
  const std::optional<std::string> preset = preset_config(a.config);
  if (!preset && !std::filesystem::is_regular_file(a.config)) {
    fail(ErrorKind::Usage, "--config '{}' is neither a config.json file nor a preset; the presets are: {}", a.config,
         preset_names());
  }
  const nlohmann::json config =
      preset ? parse_json_text(*preset, "preset " + a.config) : read_json_file(a.config, ErrorKind::Config);
  const std::string source = preset ? "preset " + a.config : a.config;
  const ModelConfig c = model_config_from_hf(config, nullptr, source);
  // Without a checkpoint, matrices are stored as config.json's torch_dtype says (--dtype converts them).
  DType stored = DType::BF16;
  if (const auto td = config.find("torch_dtype"); td != config.end() && td->is_string()) {
    const auto name = td->get<std::string>();
    stored = name == "float32" ? DType::F32 : name == "float16" ? DType::F16 : DType::BF16;
  }
  return make_decoder_spec_from_config(c, stored, source);
}

int run_plan(const PlanArgs& a) {
  const std::optional<WeightQuant> quant = parse_weight_quant_option(a.dtype);
  std::optional<Checkpoint> ckpt;
  ModelSpec spec = load_spec(a, ckpt);
  if (quant) check_weight_quant(spec, *quant);
  a.placement.apply_max_images(spec);
  RunLimits limits;
  limits.max_context = a.max_context > 0 ? a.max_context : std::min<int64_t>(spec.config.max_context, 4096);
  if (limits.max_context > spec.config.max_context) {
    fail(ErrorKind::Usage, "--max-context {} exceeds the {} tokens this model was made for", limits.max_context,
         spec.config.max_context);
  }
  limits.max_batch = a.max_batch;
  limits.prefill_chunk = a.placement.prefill_chunk;
  limits.weight_quant = quant;
  if (const auto kv = parse_kv_dtype_option(a.kv_dtype)) limits.kv_dtype = *kv;
  limits.reserve_bytes = parse_byte_size(a.reserve);

  Plan plan;
  std::string refusal;
  try {
    plan = plan_for(spec, a.placement, limits);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::OutOfMemory || !a.json) throw;
    refusal = e.what();
    // --json prints the plan that does not fit too, then fails.
    PlanRequest request{a.placement.device_specs(), limits, parse_strategy(a.placement.strategy), {}};
    plan = make_plan(spec, request);
  }

  if (!a.save.empty()) {
    std::ofstream out(a.save);
    out << plan_to_json(plan, spec).dump(2) << "\n";
    if (!out) fail(ErrorKind::Io, "cannot write the plan to {}", a.save);
  }
  if (!a.export_format.empty()) {
    if (a.export_format != "accelerate")
      fail(ErrorKind::Usage, "--export '{}': the format is accelerate", a.export_format);
    const std::string text = export_device_map(plan, spec).dump(2) + "\n";
    if (a.export_path.empty() || a.export_path == "-") {
      std::fputs(text.c_str(), stdout);
    } else {
      std::ofstream out(a.export_path);
      out << text;
      if (!out) fail(ErrorKind::Io, "cannot write the device map to {}", a.export_path);
    }
    return 0;
  }
  if (a.json) {
    std::puts(plan_to_json(plan, spec).dump(2).c_str());
    if (!refusal.empty()) {
      std::fflush(stdout);
      fmt::print(stderr, "ferry: out of memory: {}\n", printable_message(refusal));
      return 1;
    }
    return 0;
  }
  const ModelConfig& c = spec.config;
  fmt::print("model: {} ({}, {} layers{}, {} parameters)\n", a.model.empty() ? a.config : a.model,
             c.architecture.empty() ? family_name(c.family) : c.architecture, c.n_layer,
             c.vision.present() ? fmt::format(", vision tower of {} layers", c.vision.n_layer) : std::string(),
             parameter_count_text(spec.parameter_count()));
  fmt::print("{}", plan.describe());
  if (!a.save.empty()) fmt::print("saved to {}\n", a.save);
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Show where each module would go and what each device holds, before loading");
  cmd->add_option("--model,-m", a->model, "A Hugging Face model directory or a GGUF file (headers only are read)");
  cmd->add_option("--config", a->config,
                  std::string("A config.json, or a bundled preset: ") + preset_names() + " (planning only)");
  a->placement.add_to(*cmd);
  cmd->add_option("--max-context,--ctx,-c", a->max_context,
                  "KV-cache tokens per sequence (0: the model's, at most 4096)")
      ->capture_default_str();
  cmd->add_option("--max-batch", a->max_batch, "Sequences held at once")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, kWeightDtypeHelp);
  cmd->add_option("--kv-dtype", a->kv_dtype, kv_dtype_help());
  cmd->add_option("--reserve", a->reserve, "Bytes kept free on every device (e.g. 512MiB)")->capture_default_str();
  cmd->add_option("--save", a->save, "Write the plan as JSON (replay it with --plan)");
  cmd->add_option("--export", a->export_format, "Write a device map instead: accelerate");
  cmd->add_option("--out,-o", a->export_path, "Where --export writes (default: stdout)");
  cmd->add_flag("--json", a->json, "Print the plan as JSON; exit 1 when it does not fit");
  return [a] { return run_plan(*a); };
}

}  // namespace ferry::cli
