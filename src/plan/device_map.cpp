#include "plan/device_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/edit_distance.h"
#include "core/error.h"

namespace ferry {

namespace {

// The module paths of the vision units in the tower's own names.
std::vector<std::string> vision_unit_paths(const VisionConfig& v, const std::string& unit) {
  if (v.layout == VisionLayout::Eva2Clip) {
    if (unit == vision_module()) return {"transformer.vision.patch_embedding", "transformer.vision.transformer"};
    if (unit == projector_module()) {
      return {"transformer.vision.conv", "transformer.vision.linear_proj", "transformer.vision.boi",
              "transformer.vision.eoi"};
    }
  } else {
    if (unit == vision_module()) return {"vpm"};
    if (unit == projector_module()) return {"resampler"};
  }
  return {};
}

std::vector<std::string> text_unit_paths(const ModelConfig& config, const std::string& unit) {
  const bool layer = unit.rfind("layers.", 0) == 0;
  const std::string n = layer ? unit.substr(7) : std::string();
  switch (config.layout) {
    case TensorLayout::HfDecoder:
      if (unit == embed_module()) return {"model.embed_tokens", "model.rotary_emb"};
      if (unit == head_module()) return {"model.norm", "lm_head"};
      if (layer) return {"model.layers." + n};
      break;
    case TensorLayout::HfChatGlm:
      if (unit == embed_module()) return {"transformer.embedding", "transformer.rotary_pos_emb"};
      if (unit == head_module()) return {"transformer.encoder.final_layernorm", "transformer.output_layer"};
      if (layer) return {"transformer.encoder.layers." + n};
      break;
    case TensorLayout::Gguf:
      if (unit == embed_module()) return {"token_embd"};
      if (unit == head_module()) return {"output_norm", "output"};
      if (layer) return {"blk." + n};
      break;
  }
  return {};
}

}  // namespace

std::vector<std::string> unit_paths(const ModelConfig& config, const std::string& unit) {
  if (config.vision.present() && (unit == vision_module() || unit == projector_module())) {
    return vision_unit_paths(config.vision, unit);
  }
  std::vector<std::string> paths = text_unit_paths(config, unit);
  for (auto& p : paths) p = config.tensor_prefix + p;
  return paths;
}

namespace {

// `prefix` names `path` or one of its ancestors, component-wise ("" names everything).
bool covers(const std::string& prefix, const std::string& path) {
  if (prefix.empty()) return true;
  return path.size() >= prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
         (path.size() == prefix.size() || path[prefix.size()] == '.');
}

std::string device_list(const std::vector<DeviceSpec>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ", ") + d.id.str();
  return s;
}

int resolve_device(const nlohmann::json& value, const std::string& key, const std::vector<DeviceSpec>& devices,
                   const std::string& source) {
  const auto bad = [&](const std::string& why) -> int {
    fail(ErrorKind::Usage, "{}: \"{}\": {}; the devices of this run are {}", source, key, why, device_list(devices));
  };
  if (value.is_number_integer()) {
    const auto index = value.get<int64_t>();
    int found = -1;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].id.index != index) continue;
      if (found >= 0)
        bad(fmt::format("device {} is ambiguous ({} and {}); write the device name", index,
                        devices[static_cast<size_t>(found)].id.str(), devices[i].id.str()));
      found = static_cast<int>(i);
    }
    if (found < 0) bad(fmt::format("there is no device {}", index));
    return found;
  }
  if (!value.is_string())
    return bad(fmt::format("{} is not a device (write 0, \"cuda:1\" or \"cpu:0\")", value.dump()));
  const auto name = value.get<std::string>();
  if (name == "disk" || name == "meta") {
    fail(ErrorKind::Unsupported, "{}: \"{}\": \"{}\" offload is not supported by ferry; give it a device ({})", source,
         key, name, device_list(devices));
  }
  if (name == "cpu" || name == "cuda" || name == "vulkan") {
    int found = -1;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].id.str().rfind(name + ":", 0) != 0) continue;
      if (found >= 0)
        bad(fmt::format("\"{}\" is ambiguous with several {} devices; write e.g. \"{}:1\"", name, name, name));
      found = static_cast<int>(i);
    }
    if (found < 0) bad(fmt::format("there is no {} device", name));
    return found;
  }
  DeviceId id;
  try {
    id = DeviceId::parse(name);
  } catch (const Error&) {
    return bad(fmt::format("\"{}\" is not a device name", name));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].id == id) return static_cast<int>(i);
  }
  return bad(fmt::format("{} is not among the devices", name));
}

}  // namespace

std::vector<std::optional<int>> pins_from_device_map(const nlohmann::json& map, const ModelSpec& spec,
                                                     const std::vector<DeviceSpec>& devices,
                                                     const std::string& source) {
  if (!map.is_object()) {
    fail(ErrorKind::Usage,
         "{}: a device map is a JSON object of module names to devices, e.g. "
         "{{\"model.embed_tokens\": 0, \"model.layers.0\": 1}}",
         source);
  }
  struct Entry {
    std::string key;
    int device;
    bool used = false;
  };
  std::vector<Entry> entries;
  for (const auto& [key, value] : map.items())
    entries.push_back(Entry{key, resolve_device(value, key, devices, source)});

  const size_t n = spec.modules.size();
  std::vector<std::optional<int>> pins(n);
  for (size_t u = 0; u < n; ++u) {
    const std::string& unit = spec.modules[u].name;
    const std::vector<std::string> paths = unit_paths(spec.config, unit);
    // ferry's own names work too: the unit ("layers.4", "head") or "layers" for every layer; they
    // name the whole unit, so they are as specific as its paths.
    const auto names_unit = [&](const std::string& key) {
      return key == unit || (key == "layers" && unit.rfind("layers.", 0) == 0);
    };
    std::map<int, std::string> seen;  // device -> a key that sends (part of) the unit there
    for (const auto& path : paths) {
      // The most specific key naming the path or an ancestor decides for the whole path ...
      Entry* best = nullptr;
      size_t best_length = 0;
      for (auto& e : entries) {
        const bool alias = names_unit(e.key);
        if (!alias && !covers(e.key, path)) continue;
        const size_t length = alias ? path.size() : e.key.size();
        if (best == nullptr || length > best_length) {
          best = &e;
          best_length = length;
        }
      }
      if (best) {
        best->used = true;
        seen.emplace(best->device, best->key);
      }
      // ... and keys below the path (a sub-module) must agree with it: a unit is never cut.
      for (auto& e : entries) {
        if (e.key.size() > path.size() && covers(path, e.key)) {
          e.used = true;
          seen.emplace(e.device, e.key);
        }
      }
    }
    if (seen.size() > 1) {
      auto a = seen.begin();
      auto b = std::next(a);
      fail(ErrorKind::Usage,
           "{}: the map cuts placement unit '{}' ({}) in two: \"{}\" -> {} but \"{}\" -> {}; a unit stays on one "
           "device (a split inside it is what makes ops see two devices); send every key under it to the same device",
           source, unit, fmt::join(unit_paths(spec.config, unit), ", "), a->second,
           devices[static_cast<size_t>(a->first)].id.str(), b->second, devices[static_cast<size_t>(b->first)].id.str());
    }
    if (!seen.empty()) pins[u] = seen.begin()->first;
  }

  for (const auto& e : entries) {
    if (e.used) continue;
    // The nearest name among every unit path, unit name and their ancestors.
    std::set<std::string> names;
    for (const auto& m : spec.modules) {
      std::vector<std::string> paths = unit_paths(spec.config, m.name);
      paths.push_back(m.name);
      paths.push_back("layers");
      for (const auto& p : paths) {
        for (size_t dot = p.find('.'); dot != std::string::npos; dot = p.find('.', dot + 1))
          names.insert(p.substr(0, dot));
        names.insert(p);
      }
    }
    std::string nearest;
    size_t best = SIZE_MAX;
    for (const auto& name : names) {
      const size_t d = edit_distance(e.key, name);
      if (d < best) {
        best = d;
        nearest = name;
      }
    }
    fail(ErrorKind::Usage, "{}: \"{}\" names no module of this {} model; did you mean \"{}\"?", source, e.key,
         family_name(spec.config.family), nearest);
  }

  if (spec.config.tied_embeddings) {
    std::optional<int> embed, head;
    for (size_t u = 0; u < n; ++u) {
      if (spec.modules[u].name == embed_module()) embed = pins[u];
      if (spec.modules[u].name == head_module()) head = pins[u];
    }
    if (embed && head && *embed != *head) {
      fail(
          ErrorKind::Usage,
          "{}: the embedding and the output head share one weight matrix (tied embeddings) but the map puts them on {} "
          "and {}; put {} and {} on the same device",
          source, devices[static_cast<size_t>(*embed)].id.str(), devices[static_cast<size_t>(*head)].id.str(),
          fmt::join(unit_paths(spec.config, embed_module()), ", "),
          fmt::join(unit_paths(spec.config, head_module()), ", "));
    }
  }
  return pins;
}

void require_complete(const std::vector<std::optional<int>>& pins, const ModelSpec& spec, const Plan& suggestion) {
  // Missing units, consecutive layers folded: "model.layers.14-27 -> cpu:1".
  std::vector<std::string> groups;
  size_t u = 0;
  while (u < pins.size()) {
    if (pins[u]) {
      ++u;
      continue;
    }
    const int device = suggestion.device_index_of(spec.modules[u].name);
    size_t end = u + 1;
    const bool layer = spec.modules[u].name.rfind("layers.", 0) == 0;
    while (layer && end < pins.size() && !pins[end] && spec.modules[end].name.rfind("layers.", 0) == 0 &&
           suggestion.device_index_of(spec.modules[end].name) == device) {
      ++end;
    }
    std::string name = layer ? unit_paths(spec.config, spec.modules[u].name).front()
                             : fmt::format("{}", fmt::join(unit_paths(spec.config, spec.modules[u].name), " + "));
    if (end - u > 1) name += fmt::format("-{}", spec.modules[end - 1].name.substr(7));
    groups.push_back(fmt::format("{} -> {}", name,
                                 device >= 0 ? suggestion.devices[static_cast<size_t>(device)].device.id.str() : "?"));
    u = end;
  }
  if (groups.empty()) return;
  fail(ErrorKind::Usage,
       "the device map does not place {} group(s) of modules:\n  {}\n(suggested devices shown); add them to the map, "
       "or drop --strict-map to let ferry place them",
       groups.size(), fmt::join(groups, "\n  "));
}

nlohmann::ordered_json export_device_map(const Plan& plan, const ModelSpec& spec) {
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (const auto& m : spec.modules) {
    const int d = plan.device_index_of(m.name);
    const DeviceId& id = plan.devices.at(static_cast<size_t>(d)).device.id;
    for (const auto& path : unit_paths(spec.config, m.name)) {
      // accelerate numbers GPUs by ordinal: a Vulkan device (and each of its partitions) is its GPU's.
      if (id.type == DeviceType::Cuda || id.type == DeviceType::Vulkan) {
        map[path] = id.index;
      } else {
        map[path] = "cpu";
      }
    }
  }
  return map;
}

}  // namespace ferry
