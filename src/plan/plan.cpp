#include "plan/plan.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace ferry {

int Plan::device_index_of(const std::string& module) const {
  for (const auto& [m, d] : assignment) {
    if (m == module) return d;
  }
  return -1;
}

std::string Plan::describe() const {
  std::string out = fmt::format("plan for a context of {} tokens:\n", context);
  out += fmt::format("  {:<8} {:<22} {:>12} {:>12} {:>12} {:>12}\n", "device", "modules", "weights", "KV cache",
                     "total", "budget");
  for (const auto& d : devices) {
    std::string mods;
    if (!d.modules.empty()) {
      mods = d.modules.front();
      if (d.modules.size() > 1) mods += " .. " + d.modules.back();
      mods += fmt::format(" ({})", d.modules.size());
    } else {
      mods = "-";
    }
    out += fmt::format("  {:<8} {:<22} {:>12} {:>12} {:>12} {:>12}\n", d.device.id.str(), mods,
                       format_bytes(d.weight_bytes), format_bytes(d.kv_bytes),
                       format_bytes(d.weight_bytes + d.kv_bytes), format_bytes(d.device.budget));
  }
  out += fmt::format("  activations crossing devices per decoded token: {}\n", format_bytes(crossing_bytes_per_token));
  return out;
}

std::vector<ModuleCost> module_costs(const ModelSpec& spec, int64_t context) {
  std::vector<ModuleCost> costs;
  std::unordered_set<std::string> seen;
  for (const auto& m : spec.modules) {
    ModuleCost c{m.name, 0, 0};
    for (const auto& p : m.params) {
      if (!seen.insert(p.name).second) continue;  // tied: counted with its first module
      c.weight_bytes += dtype_bytes(p.compute_dtype, static_cast<uint64_t>(p.shape.numel())).value_or(0);
    }
    if (m.name.rfind("layers.", 0) == 0) {
      c.kv_bytes = 2ull * static_cast<uint64_t>(context) * static_cast<uint64_t>(spec.config.kv_width()) * 4ull;
    }
    costs.push_back(c);
  }
  return costs;
}

Plan plan_balanced(const ModelSpec& spec, const std::vector<DeviceSpec>& devices, int64_t context) {
  if (devices.empty()) fail(ErrorKind::Usage, "no devices to plan for");
  const std::vector<ModuleCost> costs = module_costs(spec, context);
  uint64_t total = 0;
  for (const auto& c : costs) total += c.weight_bytes + c.kv_bytes;

  // Each device's share of the bytes: proportional to its budget, equal when any is unlimited.
  const bool all_limited = std::all_of(devices.begin(), devices.end(),
                                       [](const DeviceSpec& d) { return d.budget != Allocator::kUnlimited; });
  std::vector<double> share(devices.size(), 1.0 / static_cast<double>(devices.size()));
  if (all_limited) {
    double sum = 0;
    for (const auto& d : devices) sum += static_cast<double>(d.budget);
    for (size_t i = 0; i < devices.size(); ++i) share[i] = static_cast<double>(devices[i].budget) / sum;
  }

  Plan plan;
  plan.context = context;
  for (const auto& d : devices) plan.devices.push_back(DevicePlan{d, {}, 0, 0});
  const bool tied = spec.config.tied_embeddings;
  size_t dev = 0;
  double target_end = share[0] * static_cast<double>(total);
  uint64_t cumulative = 0;
  for (const auto& c : costs) {
    const uint64_t bytes = c.weight_bytes + c.kv_bytes;
    // Move on when this module sits mostly beyond the current device's share.
    while (dev + 1 < devices.size() &&
           static_cast<double>(cumulative) + static_cast<double>(bytes) / 2.0 > target_end) {
      ++dev;
      target_end += share[dev] * static_cast<double>(total);
    }
    // Tied weights stay together: the head reads the embedding matrix where it was loaded.
    const size_t chosen =
        (tied && c.module == head_module()) ? static_cast<size_t>(plan.device_index_of(embed_module())) : dev;
    DevicePlan& dp = plan.devices[chosen];
    dp.modules.push_back(c.module);
    dp.weight_bytes += c.weight_bytes;
    dp.kv_bytes += c.kv_bytes;
    plan.assignment.emplace_back(c.module, static_cast<int>(chosen));
    cumulative += bytes;
  }

  // Crossings: the hidden state (f32 per token) wherever consecutive modules change device.
  for (size_t i = 1; i < plan.assignment.size(); ++i) {
    if (plan.assignment[i].second != plan.assignment[i - 1].second) {
      plan.crossing_bytes_per_token += static_cast<uint64_t>(spec.config.hidden) * 4ull;
    }
  }

  for (const auto& d : plan.devices) {
    const uint64_t need = d.weight_bytes + d.kv_bytes;
    if (d.device.budget != Allocator::kUnlimited && need > d.device.budget) {
      fail(ErrorKind::OutOfMemory,
           "the plan does not fit: {} needs {} ({} weights + {} KV cache for {} tokens) but its budget is {} ({} "
           "over); the model needs {} in all: add a device, raise the budgets, or shorten the context (--ctx)",
           d.device.id.str(), format_bytes(need), format_bytes(d.weight_bytes), format_bytes(d.kv_bytes), context,
           format_bytes(d.device.budget), format_bytes(need - d.device.budget), format_bytes(total));
    }
  }
  return plan;
}

}  // namespace ferry
