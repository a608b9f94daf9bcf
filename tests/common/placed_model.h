// A checkpoint planned by the real planner over the request's devices, the devices made and the
// weights loaded where the plan says: what the placement tests of every model family run on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "engine/checkpoint.h"
#include "engine/plan_placement.h"
#include "engine/weight_loader.h"
#include "plan/plan.h"
#include "plan/strategy.h"
#include "runtime/placement.h"
#include "runtime/weight_store.h"

namespace ferry::testing {

struct PlacedModel {
  Plan plan;
  DeviceSet devices;
  Placement placement;
  WeightStore weights;
  PlacedModel(const Checkpoint& ck, const PlanRequest& request)
      : plan(make_plan(ck.spec, request)), devices(specs_of(plan), static_cast<int>(plan.devices.size())) {
    check_plan_fits(plan, ck.spec, request);
    placement = placement_from_plan(plan, devices);
    load_weights(ck, placement, weights);
  }
  static std::vector<DeviceSpec> specs_of(const Plan& p) {
    std::vector<DeviceSpec> s;
    for (const auto& d : p.devices) s.push_back(d.device);
    return s;
  }
};

// A request for `devices` ("cpu:0,cpu:1") under `strategy`, with the test's context and step size.
inline PlanRequest placement_request(const std::string& devices, Strategy strategy, int64_t context, int64_t chunk) {
  PlanRequest r;
  r.devices = parse_device_list(devices);
  r.strategy = strategy;
  r.limits.max_context = context;
  r.limits.prefill_chunk = chunk;
  return r;
}

}  // namespace ferry::testing
