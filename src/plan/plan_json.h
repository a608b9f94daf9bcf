// Plans as JSON: `ferry plan --save plan.json` writes one, `--plan plan.json` replays it exactly,
// `ferry plan --json` prints it. The model's shape is recorded so a plan is never replayed onto
// another model.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.h"

namespace ferry {

nlohmann::ordered_json plan_to_json(const Plan& plan, const ModelSpec& spec);

// Reads a saved plan for `spec` and estimates it afresh. Errors name the file: not a ferry plan,
// made for another model (its architecture / layers / width differ), units missing from it
// (grouped) or unknown to the model, a device index out of range.
Plan plan_from_json(const nlohmann::json& json, const ModelSpec& spec, const std::string& source);

}  // namespace ferry
