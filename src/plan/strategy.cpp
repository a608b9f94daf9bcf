#include "plan/strategy.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace ferry {

std::string_view strategy_name(Strategy s) {
  switch (s) {
    case Strategy::Auto:
      return "auto";
    case Strategy::Balanced:
      return "balanced";
    case Strategy::BalancedLow0:
      return "balanced_low_0";
    case Strategy::Sequential:
      return "sequential";
    case Strategy::Custom:
      return "custom";
  }
  return "?";
}

Strategy parse_strategy(std::string_view name) {
  for (Strategy s :
       {Strategy::Auto, Strategy::Balanced, Strategy::BalancedLow0, Strategy::Sequential, Strategy::Custom}) {
    if (name == strategy_name(s)) return s;
  }
  fail(ErrorKind::Usage,
       "unknown placement strategy '{}': use auto, balanced, balanced_low_0, sequential, or custom (with --device-map)",
       name);
}

namespace {

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

// Places `units` (indices into sizes, in model order) contiguously over `devices` (indices), given
// each device's capacity (bytes left for static costs). Balanced: an equal share per device, capped
// by capacity, the excess spread over the others (water-filling). Sequential: fill in order.
void fill(const std::vector<size_t>& units, const std::vector<uint64_t>& sizes, const std::vector<int>& devices,
          std::vector<uint64_t> capacity, bool balanced, std::vector<int>& out) {
  if (units.empty() || devices.empty()) return;
  uint64_t total = 0;
  for (size_t u : units) total += sizes[u];
  std::vector<double> target(devices.size(), 0.0);
  if (balanced) {
    // Water-filling: devices whose capacity is below the level get their capacity; the level is
    // what splits the rest equally.
    std::vector<size_t> open(devices.size());
    std::iota(open.begin(), open.end(), size_t{0});
    double remaining = static_cast<double>(total);
    while (!open.empty()) {
      const double level = remaining / static_cast<double>(open.size());
      std::vector<size_t> still;
      for (size_t k : open) {
        const auto cap = capacity[static_cast<size_t>(devices[k])];
        if (cap != kNoLimit && static_cast<double>(cap) < level) {
          target[k] = static_cast<double>(cap);
          remaining -= static_cast<double>(cap);
        } else {
          still.push_back(k);
        }
      }
      if (still.size() == open.size()) {
        for (size_t k : open) target[k] = level;
        break;
      }
      open = std::move(still);
    }
  }
  size_t k = 0;
  uint64_t used = 0;
  for (size_t u : units) {
    const uint64_t s = sizes[u];
    const auto cap = [&] { return capacity[static_cast<size_t>(devices[k])]; };
    // A device takes at least one unit: one that fits nowhere is reported by the fit check, not
    // piled onto the last device.
    const auto overflows = [&] { return cap() != kNoLimit && used > 0 && used + s > cap(); };
    const auto beyond_share = [&] {
      return balanced && used > 0 && static_cast<double>(used) + static_cast<double>(s) / 2.0 > target[k];
    };
    while (k + 1 < devices.size() && (overflows() || beyond_share())) {
      ++k;
      used = 0;
    }
    out[u] = devices[k];
    used += s;
  }
}

std::vector<int> assign(const ModelSpec& spec, const std::vector<UnitCost>& costs, const PlanRequest& req,
                        const std::vector<uint64_t>& capacity, size_t n_used) {
  const size_t n_units = costs.size();
  std::vector<int> out(n_units, -1);
  std::vector<uint64_t> sizes(n_units);
  for (size_t i = 0; i < n_units; ++i) sizes[i] = costs[i].weight_bytes + costs[i].kv_bytes;
  std::vector<uint64_t> cap = capacity;

  // Tied weights: the head reads the embedding matrix, so it goes wherever the embedding goes.
  const bool tied = spec.config.tied_embeddings;
  std::vector<size_t> free_units;
  for (size_t i = 0; i < n_units; ++i) {
    if (!req.pinned.empty() && req.pinned[i]) {
      out[i] = *req.pinned[i];
      auto& c = cap[static_cast<size_t>(out[i])];
      if (c != kNoLimit) c -= std::min(c, sizes[i]);
    } else if (!(tied && costs[i].kind == UnitKind::Head)) {
      free_units.push_back(i);
    }
  }
  std::vector<int> devices(n_used);
  std::iota(devices.begin(), devices.end(), 0);
  switch (req.strategy) {
    case Strategy::Sequential:
      fill(free_units, sizes, devices, cap, false, out);
      break;
    case Strategy::BalancedLow0:
      if (n_used > 1 && !free_units.empty() && free_units.front() == 0) {
        out[0] = 0;  // the entry unit: inputs arrive there
        const std::vector<size_t> rest(free_units.begin() + 1, free_units.end());
        fill(rest, sizes, std::vector<int>(devices.begin() + 1, devices.end()), cap, true, out);
        break;
      }
      fill(free_units, sizes, devices, cap, true, out);
      break;
    default:
      fill(free_units, sizes, devices, cap, true, out);
      break;
  }
  if (tied) {
    int embed = -1;
    for (size_t i = 0; i < n_units; ++i) {
      if (costs[i].kind == UnitKind::Embed) embed = out[i];
    }
    for (size_t i = 0; i < n_units; ++i) {
      if (costs[i].kind == UnitKind::Head && out[i] < 0) out[i] = embed;
    }
  }
  return out;
}

Plan plan_from(const ModelSpec& spec, const PlanRequest& req, const std::vector<UnitCost>& costs,
               const std::vector<int>& where) {
  Plan plan;
  plan.strategy = std::string(strategy_name(req.strategy));
  plan.limits = req.limits;
  for (const auto& d : req.devices) plan.devices.push_back(DevicePlan{d, {}, 0, 0, 0, 0, 0});
  for (size_t i = 0; i < costs.size(); ++i) plan.assignment.emplace_back(costs[i].module, where[i]);
  estimate_plan(plan, spec);
  return plan;
}

// One strategy over the first n_used devices. Workspace depends on the assignment, so capacities
// start from the budgets and are corrected by the estimate until the assignment stops changing.
Plan plan_over(const ModelSpec& spec, const PlanRequest& req, const std::vector<UnitCost>& costs, size_t n_used) {
  std::vector<uint64_t> workspace(req.devices.size(), 0);
  std::vector<int> last;
  Plan plan;
  for (int round = 0; round < 6; ++round) {
    std::vector<uint64_t> capacity(req.devices.size(), kNoLimit);
    for (size_t d = 0; d < req.devices.size(); ++d) {
      const uint64_t budget = req.devices[d].budget;
      if (budget == Allocator::kUnlimited) continue;
      const uint64_t taken = workspace[d] + req.limits.reserve_bytes;
      capacity[d] = budget > taken ? budget - taken : 0;
    }
    const std::vector<int> where = assign(spec, costs, req, capacity, n_used);
    if (where == last) break;
    plan = plan_from(spec, req, costs, where);
    last = where;
    for (size_t d = 0; d < req.devices.size(); ++d) {
      workspace[d] = std::max(workspace[d], plan.devices[d].workspace_bytes);
    }
    if (plan.fits()) break;
  }
  return plan;
}

}  // namespace

Plan make_plan(const ModelSpec& spec, const PlanRequest& request) {
  if (request.devices.empty()) fail(ErrorKind::Usage, "no devices to plan for");
  const std::vector<UnitCost> costs = unit_costs(spec, request.limits);
  if (!request.pinned.empty() && request.pinned.size() != costs.size()) {
    fail(ErrorKind::Internal, "pinned list has {} entries for {} units", request.pinned.size(), costs.size());
  }
  const size_t n = request.devices.size();
  if (request.strategy == Strategy::Auto) {
    // The fewest devices that fit: every crossing is a copy per token and a pipeline bubble.
    for (size_t used = 1; used < n; ++used) {
      Plan p = plan_over(spec, request, costs, used);
      if (p.fits()) return p;
    }
  }
  return plan_over(spec, request, costs, n);
}

Plan plan_balanced(const ModelSpec& spec, const std::vector<DeviceSpec>& devices, int64_t context) {
  PlanRequest request;
  request.devices = devices;
  request.limits.max_context = context;
  request.strategy = Strategy::Balanced;
  Plan plan = make_plan(spec, request);
  check_plan_fits(plan, spec, request);
  return plan;
}

Plan replay_plan(const ModelSpec& spec, const std::vector<DeviceSpec>& devices, const RunLimits& limits,
                 const std::vector<std::pair<std::string, int>>& assignment, const std::string& strategy) {
  Plan plan;
  plan.strategy = strategy;
  plan.limits = limits;
  for (const auto& d : devices) plan.devices.push_back(DevicePlan{d, {}, 0, 0, 0, 0, 0});
  plan.assignment = assignment;
  estimate_plan(plan, spec);
  return plan;
}

}  // namespace ferry
