#include "plan/step_memory.h"

#include <map>
#include <utility>

#include "core/arena.h"
#include "core/error.h"

namespace ferry {

namespace {

constexpr int kHost = -1;

uint64_t allocation_bytes(const Value& v, uint64_t alignment) {
  const auto bytes = dtype_bytes(v.dtype, static_cast<uint64_t>(v.shape.numel()));
  if (!bytes)
    fail(ErrorKind::Shape, "value '{}' of shape {} does not fit dtype {}", v.name, v.shape.str(), dtype_name(v.dtype));
  const uint64_t b = *bytes == 0 ? 1 : *bytes;
  return (b + alignment - 1) / alignment * alignment;
}

// One step of the simulated run: a copy or a compute that writes one tensor at one location.
struct SimStep {
  ValueId value = kNoValue;
  int location = kHost;
  std::vector<std::pair<ValueId, int>> reads;  // (value, location) tensors read
  bool device_copy = false;
};

}  // namespace

StepMemory simulate_step_memory(const Graph& graph, const std::vector<int>& module_device, int n_devices,
                                uint64_t alignment, const std::vector<std::pair<std::string, int>>& device_inputs,
                                bool outputs_to_host) {
  const auto& values = graph.values();
  std::vector<int> home(values.size(), kHost);  // where each value lives before any copy
  for (size_t id = 0; id < values.size(); ++id) {
    const Value& v = values[id];
    if ((v.kind == ValueKind::Weight || v.kind == ValueKind::State) && v.module >= 0) {
      home[id] = module_device.at(static_cast<size_t>(v.module));
    }
  }
  std::vector<uint64_t> held(static_cast<size_t>(n_devices), 0);  // the caller's inputs, live throughout
  for (const auto& [name, device] : device_inputs) {
    const ValueId id = graph.find(name);
    if (id == kNoValue || values[static_cast<size_t>(id)].kind != ValueKind::Input || device < 0 ||
        device >= n_devices) {
      fail(ErrorKind::Internal, "'{}' on device {} is not a graph input on a simulated device", name, device);
    }
    home[static_cast<size_t>(id)] = device;
    held[static_cast<size_t>(device)] += allocation_bytes(values[static_cast<size_t>(id)], alignment);
  }

  // The scheduler's order: runs of consecutive nodes on one device ("splits"), each starting with
  // the copies its nodes need; graph outputs are copied to host last.
  std::vector<SimStep> steps;
  std::vector<SimStep> split_copies;
  std::vector<SimStep> split_computes;
  int split_device = -2;
  std::map<std::pair<ValueId, int>, bool> copied;
  const auto flush_split = [&] {
    for (auto& s : split_copies) steps.push_back(std::move(s));
    for (auto& s : split_computes) steps.push_back(std::move(s));
    split_copies.clear();
    split_computes.clear();
  };
  for (const Node& node : graph.nodes()) {
    const int device = module_device.at(static_cast<size_t>(node.module));
    if (device < 0 || device >= n_devices) {
      fail(ErrorKind::Internal, "module '{}' has no device in the simulated assignment",
           graph.modules()[static_cast<size_t>(node.module)]);
    }
    if (device != split_device) {
      flush_split();
      split_device = device;
    }
    SimStep compute{node.output, device, {}, false};
    for (ValueId in : node.inputs) {
      const Value& v = values[static_cast<size_t>(in)];
      const int from = home[static_cast<size_t>(in)];
      const bool stored = v.kind == ValueKind::Weight || v.kind == ValueKind::State;
      if (from == device || stored) {
        compute.reads.emplace_back(in, from);
        continue;
      }
      if (copied.emplace(std::make_pair(in, device), true).second) {
        split_copies.push_back(SimStep{in, device, {{in, from}}, from != kHost});
      }
      compute.reads.emplace_back(in, device);
    }
    home[static_cast<size_t>(node.output)] = device;
    split_computes.push_back(std::move(compute));
  }
  flush_split();
  std::map<ValueId, bool> output_seen;
  std::map<std::pair<ValueId, int>, bool> kept;  // outputs left on their device
  for (ValueId id : graph.outputs()) {
    if (!output_seen.emplace(id, true).second || home[static_cast<size_t>(id)] == kHost) continue;
    if (outputs_to_host) {
      steps.push_back(SimStep{kNoValue, kHost, {{id, home[static_cast<size_t>(id)]}}, false});
    } else if (values[static_cast<size_t>(id)].kind == ValueKind::Result) {
      kept[{id, home[static_cast<size_t>(id)]}] = true;
    }
  }

  // Liveness: a produced tensor lives from its step to the last step that reads it.
  std::map<std::pair<ValueId, int>, size_t> last_read;
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const auto& r : steps[i].reads) last_read[r] = i;
  }
  // Each produced tensor's lifetime, packed per device as the executor packs its workspace.
  StepMemory out;
  out.workspace_bytes.assign(static_cast<size_t>(n_devices), 0);
  out.held_bytes = held;
  std::vector<std::vector<ArenaBlock>> blocks(static_cast<size_t>(n_devices));
  for (size_t i = 0; i < steps.size(); ++i) {
    const SimStep& s = steps[i];
    if (s.value == kNoValue || s.location == kHost) continue;
    const Value& v = values[static_cast<size_t>(s.value)];
    const auto key = std::make_pair(s.value, s.location);
    if (s.device_copy) {
      out.device_copies++;
      out.device_bytes_copied += *dtype_bytes(v.dtype, static_cast<uint64_t>(v.shape.numel()));
    }
    if (kept.count(key)) {
      out.held_bytes[static_cast<size_t>(s.location)] += allocation_bytes(v, alignment);
      continue;
    }
    const auto it = last_read.find(key);
    const size_t last = it == last_read.end() ? i : std::max(i, it->second);
    blocks[static_cast<size_t>(s.location)].push_back(
        ArenaBlock{*dtype_bytes(v.dtype, static_cast<uint64_t>(v.shape.numel())), static_cast<int64_t>(i),
                   static_cast<int64_t>(last)});
  }
  for (size_t d = 0; d < blocks.size(); ++d) out.workspace_bytes[d] = pack_arena(blocks[d], alignment).size;
  return out;
}

}  // namespace ferry
