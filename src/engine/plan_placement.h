// Turns a plan (data about device ids) into a Placement over live devices.
#pragma once

#include "backends/registry.h"
#include "core/device.h"
#include "plan/plan.h"
#include "runtime/executor.h"
#include "runtime/placement.h"

namespace ferry {

// Every planned module mapped to its device in `devices` (Error(Usage) if a planned device is
// missing from the set).
Placement placement_from_plan(const Plan& plan, DeviceSet& devices);

// Gives each device of the plan its planned workspace up front, so that the memory a run holds is
// the plan's figure (no step the plan covers grows it).
void reserve_planned_workspaces(Executor& executor, const Plan& plan, DeviceSet& devices);

}  // namespace ferry
