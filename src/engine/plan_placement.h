// Turns a plan (data about device ids) into a Placement over live devices.
#pragma once

#include "core/device.h"
#include "plan/plan.h"
#include "runtime/placement.h"

namespace ferry {

// Every planned module mapped to its device in `devices` (Error(Usage) if a planned device is
// missing from the set).
Placement placement_from_plan(const Plan& plan, DeviceSet& devices);

}  // namespace ferry
