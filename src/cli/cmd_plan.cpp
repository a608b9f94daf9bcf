#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/error.h"
#include "engine/checkpoint.h"
#include "plan/plan.h"

namespace ferry::cli {

namespace {

struct PlanArgs {
  std::string model;
  std::string devices = "cpu:0";
  int64_t ctx = 0;
};

int run_plan(const PlanArgs& a) {
  const auto devices = parse_device_list(a.devices);
  const Checkpoint ck = open_checkpoint(a.model);
  const Plan plan = plan_balanced(ck.spec, devices, resolve_context(a.ctx, ck.config()));
  fmt::print("{}", plan.describe());
  for (const auto& [module, device] : plan.assignment) {
    fmt::print("  {:<12} -> {}\n", module, plan.devices[static_cast<size_t>(device)].device.id.str());
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Show where each module would go, before loading anything");
  cmd->add_option("--model,-m", a->model, "A Hugging Face model directory or a GGUF file")->required();
  cmd->add_option("--devices", a->devices, "Devices and budgets, e.g. cpu:0=6GiB,cpu:1=6GiB")->capture_default_str();
  cmd->add_option("--ctx,-c", a->ctx, "Context length to reserve KV cache for (0: the model's, at most 4096)")
      ->capture_default_str();
  return [a] { return run_plan(*a); };
}

}  // namespace ferry::cli
