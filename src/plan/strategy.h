// Placement strategies: module -> device assignments over the units in model order, cutting only
// between units, keeping tied weights together. make_plan runs one and checks the result.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.h"

namespace ferry {

enum class Strategy : uint8_t {
  Auto,          // the fewest devices that fit (fewest crossings), balanced across them
  Balanced,      // an equal share of the bytes on every device (capped by each budget)
  BalancedLow0,  // device 0 keeps only the entry unit (and what is tied to it); the rest balanced
  Sequential,    // fill devices in order
  Custom,        // a device map pins units; the rest is filled as Balanced
};

std::string_view strategy_name(Strategy s);
Strategy parse_strategy(std::string_view name);  // Error(Usage) listing the names

// What a strategy places: the devices, the limits, and units pinned by a device map
// (pinned[i] = device index of unit i, or nullopt to fill automatically).
struct PlanRequest {
  std::vector<DeviceSpec> devices;
  RunLimits limits;
  Strategy strategy = Strategy::Auto;
  std::vector<std::optional<int>> pinned;  // empty: nothing pinned
};

// Runs the strategy and estimates the result. The returned plan may not fit (Plan::fits()); the
// caller decides (check_plan_fits explains).
Plan make_plan(const ModelSpec& spec, const PlanRequest& request);

// Throws Error(OutOfMemory) when `plan` does not fit: which device, by how much, and what would
// fit instead (another strategy, a shorter context, q8_0/q4_0 weights, more memory), worked out
// by planning those alternatives for real.
void check_plan_fits(const Plan& plan, const ModelSpec& spec, const PlanRequest& request);

// A balanced plan for `context` tokens, checked to fit (the common case in tests and tools).
Plan plan_balanced(const ModelSpec& spec, const std::vector<DeviceSpec>& devices, int64_t context);

// The same assignment as `plan` (a saved plan replayed), estimated afresh for `spec`.
Plan replay_plan(const ModelSpec& spec, const std::vector<DeviceSpec>& devices, const RunLimits& limits,
                 const std::vector<std::pair<std::string, int>>& assignment, const std::string& strategy);

}  // namespace ferry
