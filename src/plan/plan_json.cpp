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
                 {"weight_dtype", l.weight_quant ? nlohmann::ordered_json(weight_quant_name(*l.weight_quant))
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
  // Equal sizes are not the same model: another architecture (a tied head, another layout) places
  // other modules and parameters.
  const auto differs_text = [&](const char* key, const std::string& ours) {
    const std::string theirs = json_string(model, key, source);
    if (theirs != ours) {
      fail(ErrorKind::Usage,
           "{}: the plan was made for a model with {} '{}', but this model's is '{}'; make a new plan with `ferry "
           "plan --save`",
           source, key, theirs, ours);
    }
  };
  differs_text("architecture", c.architecture);
  differs_text("family", family_name(c.family));
  if (const auto params = json_opt_int(model, "parameters", source);
      params && static_cast<uint64_t>(*params) != spec.parameter_count()) {
    fail(ErrorKind::Usage,
         "{}: the plan was made for a model of {} parameters, but this one has {}; make a new plan with `ferry plan "
         "--save`",
         source, *params, spec.parameter_count());
  }
  // The strategy is recorded, not replayed, but a name ferry does not know means a file it did not write.
  if (const auto st = j.find("strategy"); st != j.end()) {
    if (!st->is_string()) fail(ErrorKind::Format, "{}: \"strategy\" must be a name", source);
    parse_strategy(st->get<std::string>());
  }

  RunLimits limits;
  const auto& lj = j.at("limits");
  // The same bounds as the command line's --ctx, --max-batch and --prefill-chunk.
  const auto bounded = [&](const char* key, int64_t low, int64_t high) {
    const int64_t v = json_int(lj, key, source);
    if (v < low || v > high) {
      fail(ErrorKind::Usage, "{}: limits.{} = {} is outside {}..{}; make a new plan with `ferry plan --save`", source,
           key, v, low, high);
    }
    return v;
  };
  limits.max_context = bounded("max_context", 1, c.max_context);
  limits.max_batch = bounded("max_batch", 1, 4096);
  limits.prefill_chunk = bounded("prefill_chunk", 1, int64_t{1} << 20);
  if (const auto wd = lj.find("weight_dtype"); wd != lj.end() && !wd->is_null()) {
    const auto q = parse_weight_quant(json_string(lj, "weight_dtype", source));
    if (!q) fail(ErrorKind::Format, "{}: unknown weight_dtype {}", source, wd->dump());
    limits.weight_quant = *q;
  }
  const auto kv = dtype_from_name(json_string(lj, "kv_dtype", source));
  if (!kv) fail(ErrorKind::Format, "{}: unknown kv_dtype {}", source, lj["kv_dtype"].dump());
  limits.kv_dtype = *kv;
  limits.reserve_bytes = static_cast<uint64_t>(bounded("reserve_bytes", 0, INT64_MAX));

  std::vector<DeviceSpec> devices;
  const auto& dj = j.at("devices");
  if (!dj.is_array() || dj.empty()) fail(ErrorKind::Format, "{}: \"devices\" must be a non-empty array", source);
  // Checked as --devices is: a known device name, each once, a budget of bytes, 0..1024 threads.
  for (const auto& d : dj) {
    DeviceSpec spec_d;
    const std::string name = json_string(d, "name", source);
    try {
      spec_d.id = DeviceId::parse(name);
    } catch (const Error& e) {
      fail(ErrorKind::Usage, "{}: device \"{}\": {}", source, name, e.what());
    }
    for (const DeviceSpec& earlier : devices) {
      if (earlier.id == spec_d.id) fail(ErrorKind::Usage, "{}: device {} is listed twice", source, name);
    }
    const auto budget = d.find("budget");
    if (budget != d.end() && !budget->is_null()) {
      const int64_t bytes = json_int(d, "budget", source);
      if (bytes <= 0)
        fail(ErrorKind::Usage, "{}: device {} has a budget of {} bytes; a budget is positive", source, name, bytes);
      spec_d.budget = static_cast<size_t>(bytes);
    }
    const int64_t threads = json_opt_int(d, "threads", source).value_or(0);
    if (threads < 0 || threads > 1024) {
      fail(ErrorKind::Usage, "{}: device {} asks for {} threads; a device takes 0 (the default) to 1024", source, name,
           threads);
    }
    spec_d.threads = static_cast<int>(threads);
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
