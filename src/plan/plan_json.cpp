#include "plan/plan_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "core/error.h"
#include "formats/json_file.h"
#include "plan/strategy.h"

namespace ferry {

namespace {

nlohmann::ordered_json model_json(const ModelSpec& spec) {
  const ModelConfig& c = spec.config;
  nlohmann::ordered_json m;
  m["architecture"] = c.architecture;
  m["family"] = family_name(c.family);
  m["layers"] = c.n_layer;
  m["hidden"] = c.hidden;
  m["vocab"] = c.vocab;
  m["vision_layers"] = c.vision.n_layer;
  m["parameters"] = spec.parameter_count();
  return m;
}

}  // namespace

nlohmann::ordered_json plan_to_json(const Plan& plan, const ModelSpec& spec) {
  nlohmann::ordered_json j;
  j["format"] = "ferry-plan";
  j["version"] = 1;
  j["model"] = model_json(spec);
  j["strategy"] = plan.strategy;
  const RunLimits& l = plan.limits;
  j["limits"] = {{"max_context", l.max_context},
                 {"max_batch", l.max_batch},
                 {"prefill_chunk", l.prefill_chunk},
                 {"weight_dtype", l.weight_dtype ? nlohmann::ordered_json(std::string(dtype_name(*l.weight_dtype)))
                                                 : nlohmann::ordered_json(nullptr)},
                 {"kv_dtype", std::string(dtype_name(l.kv_dtype))},
                 {"reserve_bytes", l.reserve_bytes}};
  j["devices"] = nlohmann::ordered_json::array();
  for (const auto& d : plan.devices) {
    nlohmann::ordered_json dj;
    dj["name"] = d.device.id.str();
    dj["budget"] = d.device.budget == Allocator::kUnlimited ? nlohmann::ordered_json(nullptr)
                                                            : nlohmann::ordered_json(d.device.budget);
    dj["threads"] = d.device.threads;
    dj["modules"] = d.modules;
    dj["weight_bytes"] = d.weight_bytes;
    dj["kv_bytes"] = d.kv_bytes;
    dj["workspace_bytes"] = d.workspace_bytes;
    dj["logits_bytes"] = d.logits_bytes;
    dj["vision_workspace_bytes"] = d.vision_bytes;
    dj["image_embeds_bytes"] = d.image_embeds_bytes;
    dj["reserve_bytes"] = d.reserve_bytes;
    dj["total_bytes"] = d.total();
    dj["fits"] = !d.over_budget();
    j["devices"].push_back(dj);
  }
  j["assignment"] = nlohmann::ordered_json::object();
  for (const auto& [module, device] : plan.assignment) {
    j["assignment"][module] = plan.devices[static_cast<size_t>(device)].device.id.str();
  }
  j["crossings"] = nlohmann::ordered_json::array();
  for (const auto& c : plan.crossings) {
    j["crossings"].push_back({{"from", c.from_module},
                              {"to", c.to_module},
                              {"from_device", plan.devices[static_cast<size_t>(c.from_device)].device.id.str()},
                              {"to_device", plan.devices[static_cast<size_t>(c.to_device)].device.id.str()},
                              {"bytes", c.bytes},
                              {"per", c.per_image ? "image" : "token"}});
  }
  j["crossing_bytes_per_token"] = plan.crossing_bytes_per_token;
  j["fits"] = plan.fits();
  return j;
}

Plan plan_from_json(const nlohmann::json& j, const ModelSpec& spec, const std::string& source) {
  if (!j.is_object() || j.value("format", "") != "ferry-plan") {
    fail(ErrorKind::Format, "{}: not a ferry plan (no \"format\": \"ferry-plan\"); write one with `ferry plan --save`",
         source);
  }
  if (json_int(j, "version", source) != 1) {
    fail(ErrorKind::Unsupported, "{}: plan version {} is not supported (this ferry reads version 1)", source,
         j["version"].dump());
  }
  // The same model: otherwise every figure in the plan is about something else.
  const auto& model = j.at("model");
  const ModelConfig& c = spec.config;
  const auto differs = [&](const char* key, int64_t ours) {
    const auto theirs = json_int(model, key, source);
    if (theirs != ours) {
      fail(ErrorKind::Usage,
           "{}: the plan was made for a model with {} = {}, but this model has {}; make a new plan "
           "with `ferry plan --save`",
           source, key, theirs, ours);
    }
  };
  differs("layers", c.n_layer);
  differs("hidden", c.hidden);
  differs("vocab", c.vocab);
  differs("vision_layers", c.vision.n_layer);

  RunLimits limits;
  const auto& lj = j.at("limits");
  limits.max_context = json_int(lj, "max_context", source);
  limits.max_batch = json_int(lj, "max_batch", source);
  limits.prefill_chunk = json_int(lj, "prefill_chunk", source);
  if (const auto wd = lj.find("weight_dtype"); wd != lj.end() && !wd->is_null()) {
    const auto d = dtype_from_name(json_string(lj, "weight_dtype", source));
    if (!d) fail(ErrorKind::Format, "{}: unknown weight_dtype {}", source, wd->dump());
    limits.weight_dtype = *d;
  }
  const auto kv = dtype_from_name(json_string(lj, "kv_dtype", source));
  if (!kv) fail(ErrorKind::Format, "{}: unknown kv_dtype {}", source, lj["kv_dtype"].dump());
  limits.kv_dtype = *kv;
  limits.reserve_bytes = static_cast<uint64_t>(json_int(lj, "reserve_bytes", source));

  std::vector<DeviceSpec> devices;
  const auto& dj = j.at("devices");
  if (!dj.is_array() || dj.empty()) fail(ErrorKind::Format, "{}: \"devices\" must be a non-empty array", source);
  for (const auto& d : dj) {
    DeviceSpec spec_d;
    spec_d.id = DeviceId::parse(json_string(d, "name", source));
    const auto budget = d.find("budget");
    spec_d.budget = budget == d.end() || budget->is_null() ? Allocator::kUnlimited
                                                           : static_cast<size_t>(json_int(d, "budget", source));
    spec_d.threads = static_cast<int>(json_opt_int(d, "threads", source).value_or(0));
    devices.push_back(spec_d);
  }

  // The assignment must name exactly the model's units.
  const auto& aj = j.at("assignment");
  if (!aj.is_object()) fail(ErrorKind::Format, "{}: \"assignment\" must be an object of module -> device", source);
  std::vector<std::pair<std::string, int>> assignment;
  std::vector<std::string> missing;
  std::set<std::string> known;
  for (const auto& m : spec.modules) {
    known.insert(m.name);
    const auto it = aj.find(m.name);
    if (it == aj.end()) {
      missing.push_back(m.name);
      continue;
    }
    if (!it->is_string()) fail(ErrorKind::Format, "{}: assignment of '{}' must be a device name", source, m.name);
    const DeviceId id = DeviceId::parse(it->get<std::string>());
    int index = -1;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].id == id) index = static_cast<int>(i);
    }
    if (index < 0)
      fail(ErrorKind::Format, "{}: '{}' is assigned to {}, which is not among the plan's devices", source, m.name,
           id.str());
    assignment.emplace_back(m.name, index);
  }
  if (!missing.empty()) {
    fail(ErrorKind::Usage,
         "{}: the plan does not place {} of the model's modules ({}); make a new plan with `ferry "
         "plan --save`",
         source, missing.size(), fmt::join(missing, ", "));
  }
  for (const auto& [name, value] : aj.items()) {
    if (!known.count(name)) {
      fail(ErrorKind::Usage,
           "{}: the plan places '{}', which this model does not have; make a new plan with `ferry "
           "plan --save`",
           source, name);
    }
  }
  return replay_plan(spec, devices, limits, assignment, j.value("strategy", "replayed"));
}

}  // namespace ferry
