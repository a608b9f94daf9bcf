#include "plan/plan.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "models/vision.h"
#include "plan/step_memory.h"

namespace ferry {

namespace {

// "embed, layers.0-7, head": consecutive layers folded into a range.
std::string module_ranges(const std::vector<std::string>& modules) {
  if (modules.empty()) return "-";
  std::vector<std::string> parts;
  int first = -1;
  int last = -1;
  const auto flush = [&] {
    if (first < 0) return;
    parts.push_back(first == last ? fmt::format("layers.{}", first) : fmt::format("layers.{}-{}", first, last));
    first = last = -1;
  };
  for (const auto& m : modules) {
    if (m.rfind("layers.", 0) == 0) {
      const int layer = std::stoi(m.substr(7));
      if (first >= 0 && layer == last + 1) {
        last = layer;
      } else {
        flush();
        first = last = layer;
      }
    } else {
      flush();
      parts.push_back(m);
    }
  }
  flush();
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

int Plan::device_index_of(const std::string& module) const {
  for (const auto& [m, d] : assignment) {
    if (m == module) return d;
  }
  return -1;
}

bool Plan::fits() const {
  return std::none_of(devices.begin(), devices.end(), [](const DevicePlan& d) { return d.over_budget(); });
}

std::string Plan::describe() const {
  std::string out = fmt::format(
      "plan ({}) for a context of {} tokens x {} sequence(s), steps of up to {} tokens, {} weights, {} KV cache:\n",
      strategy, limits.max_context, limits.max_batch, limits.largest_step(),
      limits.weight_quant ? weight_quant_name(*limits.weight_quant) : std::string("stored"),
      dtype_name(limits.kv_dtype));
  out += fmt::format("  {:<8} {:<34} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "device", "modules", "weights",
                     "KV cache", "workspace", "reserve", "total", "budget");
  for (const auto& d : devices) {
    out += fmt::format("  {:<8} {:<34} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}{}\n", d.device.id.str(),
                       module_ranges(d.modules), format_bytes(d.weight_bytes), format_bytes(d.kv_bytes),
                       format_bytes(d.workspace_bytes), format_bytes(d.reserve_bytes), format_bytes(d.total()),
                       d.device.budget == Allocator::kUnlimited ? std::string("-") : format_bytes(d.device.budget),
                       d.over_budget() ? "  OVER BUDGET" : "");
  }
  // The vision units whole, each on one device, with their weights; the tower's step activations.
  for (const auto& u : units) {
    if (u.kind != UnitKind::Vision && u.kind != UnitKind::Projector) continue;
    const int d = device_index_of(u.module);
    out += fmt::format("  {} on {}: weights {}", u.kind == UnitKind::Vision ? "vision tower" : "projector",
                       devices[static_cast<size_t>(d)].device.id.str(), format_bytes(u.weight_bytes));
    if (u.kind == UnitKind::Vision) {
      std::string steps;
      for (const auto& dev : devices) {
        if (dev.vision_bytes > 0)
          steps +=
              fmt::format("{}{} {}", steps.empty() ? "" : ", ", dev.device.id.str(), format_bytes(dev.vision_bytes));
      }
      out += fmt::format("; vision step activations at {} image(s) (within workspace): {}", images, steps);
    }
    out += "\n";
  }
  if (crossings.empty()) {
    out += "  no activation crosses devices\n";
  } else {
    for (const auto& c : crossings) {
      out += fmt::format("  crossing {} ({}) -> {} ({}): {} per {}\n", c.from_module,
                         devices[static_cast<size_t>(c.from_device)].device.id.str(), c.to_module,
                         devices[static_cast<size_t>(c.to_device)].device.id.str(), format_bytes(c.bytes),
                         c.per_image ? "image" : "token");
    }
    out +=
        fmt::format("  activations crossing devices per decoded token: {}\n", format_bytes(crossing_bytes_per_token));
  }
  return out;
}

namespace {

uint64_t aligned(uint64_t bytes) {
  const uint64_t a = Allocator::kAlignment;
  return bytes == 0 ? a : (bytes + a - 1) / a * a;
}

UnitKind unit_kind(const std::string& module) {
  if (module == embed_module()) return UnitKind::Embed;
  if (module == head_module()) return UnitKind::Head;
  if (module == vision_module()) return UnitKind::Vision;
  if (module == projector_module()) return UnitKind::Projector;
  return UnitKind::Layer;
}

// The dtype a parameter has once loaded under `limits`: the loader's rule (apply_weight_quant).
DType loaded_dtype(const ModelSpec& spec, const ParamSpec& p, const RunLimits& limits) {
  return limits.weight_quant ? quantized_dtype(spec, p, *limits.weight_quant) : p.compute_dtype;
}

uint64_t checked_bytes(DType dtype, int64_t numel, const std::string& what) {
  const auto bytes = dtype_bytes(dtype, static_cast<uint64_t>(numel));
  if (!bytes) fail(ErrorKind::Shape, "{}: {} elements do not fit dtype {}", what, numel, dtype_name(dtype));
  return *bytes;
}

}  // namespace

std::vector<UnitCost> unit_costs(const ModelSpec& spec, const RunLimits& limits) {
  if (limits.max_context <= 0 || limits.max_context > spec.config.max_context) {
    fail(ErrorKind::Usage, "a context of {} tokens is outside what the model supports (1 to {})", limits.max_context,
         spec.config.max_context);
  }
  if (limits.max_batch <= 0 || limits.prefill_chunk <= 0) {
    fail(ErrorKind::Usage, "the batch ({}) and the prefill chunk ({}) must be positive", limits.max_batch,
         limits.prefill_chunk);
  }
  check_kv_cache_dtype(spec.config, limits.kv_dtype);  // q8_0 needs rows of whole blocks
  std::vector<UnitCost> costs;
  std::unordered_set<std::string> seen;
  for (const auto& m : spec.modules) {
    UnitCost c{m.name, unit_kind(m.name), 0, 0};
    for (const auto& p : m.params) {
      if (!seen.insert(p.name).second) continue;  // tied: counted with its first module
      c.weight_bytes += aligned(checked_bytes(loaded_dtype(spec, p, limits), p.shape.numel(), p.name));
    }
    if (m.state_bytes_per_token > 0) {
      // Two tensors (keys, values), each [context, kv width] of kv_dtype per sequence, as the step
      // graph declares them (q8_0: each row kv width / 32 blocks of 34 bytes); state_bytes_per_token
      // counts a k and a v row in f32.
      const int64_t kv_width = m.state_bytes_per_token / 2 / 4;
      const uint64_t per_tensor = checked_bytes(limits.kv_dtype, kv_width, m.name + " KV-cache row") *
                                  static_cast<uint64_t>(limits.max_context);
      c.kv_bytes = 2 * aligned(per_tensor) * static_cast<uint64_t>(limits.max_batch);
    }
    costs.push_back(std::move(c));
  }
  return costs;
}

void estimate_plan(Plan& plan, const ModelSpec& spec) {
  const std::vector<UnitCost> costs = unit_costs(spec, plan.limits);
  plan.context = plan.limits.max_context;
  plan.units = costs;
  plan.images = spec.config.vision.present() ? spec.config.vision.max_images : 0;
  for (auto& d : plan.devices) {
    d.modules.clear();
    d.weight_bytes = d.kv_bytes = d.workspace_bytes = d.logits_bytes = d.vision_bytes = d.image_embeds_bytes = 0;
    d.reserve_bytes = plan.limits.reserve_bytes;
  }
  if (plan.assignment.size() != costs.size()) {
    fail(ErrorKind::Internal, "plan assigns {} modules but the model has {}", plan.assignment.size(), costs.size());
  }
  for (size_t i = 0; i < costs.size(); ++i) {
    const auto& [module, device] = plan.assignment[i];
    if (module != costs[i].module) fail(ErrorKind::Internal, "plan order differs from the model's at '{}'", module);
    DevicePlan& d = plan.devices.at(static_cast<size_t>(device));
    d.modules.push_back(module);
    d.weight_bytes += costs[i].weight_bytes;
    d.kv_bytes += costs[i].kv_bytes;
  }

  // Workspace: the largest of the steps a run takes, each simulated on this assignment: a text step
  // of the largest size (a prefill chunk, per sequence), and with a vision tower the tower +
  // projector step at the most images and the prefill step that splices their embeddings in (all
  // image rows arrive at once). Per decoded token: the one-token step's device-to-device bytes.
  const auto simulate = [&](const Graph& g, const std::vector<std::pair<std::string, int>>& device_inputs = {},
                            bool outputs_to_host = true) {
    std::vector<int> module_device;
    for (const auto& name : g.modules()) {
      const int d = plan.device_index_of(name);
      if (d < 0) fail(ErrorKind::Internal, "graph module '{}' is not in the plan", name);
      module_device.push_back(d);
    }
    return simulate_step_memory(g, module_device, static_cast<int>(plan.devices.size()), Allocator::kAlignment,
                                device_inputs, outputs_to_host);
  };
  const int64_t context = plan.limits.max_context;
  const StepShape largest_shape{plan.limits.largest_step(), 0, context, false};
  const StepMemory largest = simulate(build_decoder_graph(spec, largest_shape));
  const StepMemory decode = simulate(build_decoder_graph(spec, StepShape{1, 0, context, false}));
  for (size_t d = 0; d < plan.devices.size(); ++d)
    plan.devices[d].workspace_bytes = largest.workspace_bytes[d] * static_cast<uint64_t>(plan.limits.max_batch);
  const VisionConfig& vision = spec.config.vision;
  if (vision.present() && vision.max_images > 0) {
    // The image embeddings stay on the projector's device, outside the workspace, from the tower's
    // step until the prefill step that reads them.
    const std::vector<VisionGrid> inputs = worst_case_vision_inputs(vision);
    int64_t image_rows = 0;
    for (const VisionGrid& g : inputs) image_rows += vision_rows(vision, g);
    const StepMemory tower = simulate(build_vision_graph(spec, inputs), {}, false);
    const StepMemory image_step = simulate(build_decoder_graph_with_images(spec, largest_shape, image_rows),
                                           {{"image_embeds", plan.device_index_of(projector_module())}});
    for (size_t d = 0; d < plan.devices.size(); ++d) {
      plan.devices[d].vision_bytes = tower.workspace_bytes[d];
      plan.devices[d].workspace_bytes =
          std::max({plan.devices[d].workspace_bytes, tower.workspace_bytes[d], image_step.workspace_bytes[d]});
      plan.devices[d].image_embeds_bytes = std::max(tower.held_bytes[d], image_step.held_bytes[d]);
    }
  }
  const int head = plan.device_index_of(head_module());
  if (head >= 0)
    plan.devices[static_cast<size_t>(head)].logits_bytes = aligned(static_cast<uint64_t>(spec.config.vocab) * 4);
  plan.crossing_bytes_per_token = decode.device_bytes_copied;

  plan.crossings.clear();
  for (size_t i = 1; i < plan.assignment.size(); ++i) {
    const auto& [from_module, from] = plan.assignment[i - 1];
    const auto& [to_module, to] = plan.assignment[i];
    if (from == to) continue;
    // The hidden state (f32) crosses per token; the tower's patch features and the projector's
    // image embeddings once per image.
    const UnitKind kind = costs[i - 1].kind;
    const VisionConfig& v = spec.config.vision;
    uint64_t bytes = static_cast<uint64_t>(spec.config.hidden) * 4;
    if (kind == UnitKind::Vision) {
      bytes = static_cast<uint64_t>(v.max_inputs_per_image() * v.max_patches_per_input()) *
              static_cast<uint64_t>(v.hidden) * 4;
    }
    if (kind == UnitKind::Projector)
      bytes = static_cast<uint64_t>(v.text_tokens()) * static_cast<uint64_t>(spec.config.hidden) * 4;
    plan.crossings.push_back(
        Crossing{from_module, to_module, from, to, bytes, kind == UnitKind::Vision || kind == UnitKind::Projector});
  }
}

}  // namespace ferry
