#include "plan/plan.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace ferry {

namespace {

// "embed, layers.0-7, head": consecutive layers folded into a range.
std::string module_ranges(const std::vector<std::string>& modules) {
  if (modules.empty()) return "-";
  std::vector<std::string> parts;
  int first = -1;
  int last = -1;
  const auto flush = [&] {
    if (first < 0) return;
    parts.push_back(first == last ? fmt::format("layers.{}", first) : fmt::format("layers.{}-{}", first, last));
    first = last = -1;
  };
  for (const auto& m : modules) {
    if (m.rfind("layers.", 0) == 0) {
      const int layer = std::stoi(m.substr(7));
      if (first >= 0 && layer == last + 1) {
        last = layer;
      } else {
        flush();
        first = last = layer;
      }
    } else {
      flush();
      parts.push_back(m);
    }
  }
  flush();
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

int Plan::device_index_of(const std::string& module) const {
  for (const auto& [m, d] : assignment) {
    if (m == module) return d;
  }
  return -1;
}

std::string Plan::describe() const {
  std::string out = fmt::format("plan for a context of {} tokens:\n", context);
  out += fmt::format("  {:<8} {:<28} {:>12} {:>12} {:>12} {:>12}\n", "device", "modules", "weights", "KV cache",
                     "total", "budget");
  for (const auto& d : devices) {
    const std::string mods = module_ranges(d.modules);
    out += fmt::format("  {:<8} {:<28} {:>12} {:>12} {:>12} {:>12}\n", d.device.id.str(), mods,
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
    c.kv_bytes = static_cast<uint64_t>(m.state_bytes_per_token) * static_cast<uint64_t>(context);
    costs.push_back(c);
  }
  return costs;
}

Plan plan_balanced(const ModelSpec& spec, const std::vector<DeviceSpec>& devices, int64_t context) {
  if (devices.empty()) fail(ErrorKind::Usage, "no devices to plan for");
  if (context <= 0 || context > spec.config.max_context) {
    fail(ErrorKind::Usage, "a context of {} tokens is outside what the model supports (1 to {})", context,
         spec.config.max_context);
  }
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
