#include "engine/plan_placement.h"

namespace ferry {

Placement placement_from_plan(const Plan& plan, DeviceSet& devices) {
  Placement placement;
  for (const auto& [module, index] : plan.assignment) {
    placement.module_device[module] = &devices.get(plan.devices.at(static_cast<size_t>(index)).device.id);
  }
  return placement;
}

void reserve_planned_workspaces(Executor& executor, const Plan& plan, DeviceSet& devices) {
  for (const DevicePlan& d : plan.devices) {
    if (d.modules.empty()) continue;
    executor.reserve_workspace(devices.get(d.device.id), static_cast<size_t>(d.workspace_bytes));
  }
}

}  // namespace ferry
