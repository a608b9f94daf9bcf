// How many bytes of activations a step holds on each device at its worst moment, worked out from
// the step's graph and a module -> device assignment without running anything. It follows the
// runtime's rules exactly (src/runtime/scheduler.h, run_plan.h): every op runs on its module's
// device and allocates its result there; a value read on another device is copied there once, at
// the start of the run of ops that first reads it; graph inputs come from the host and graph outputs
// go back to it (or stay where they were made); every tensor lives from its step to its last read,
// and the tensors of each device are packed into one workspace by core/arena.h, exactly as the
// executor lays out its workspaces. Weights and state are not counted here (they are static
// costs), nor host memory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace ferry {

struct StepMemory {
  std::vector<uint64_t> workspace_bytes;  // by device index: the packed workspace the step needs there
  // By device index: bytes outside the workspace for the whole step: inputs the caller holds on the
  // device, and outputs left there for the caller.
  std::vector<uint64_t> held_bytes;
  // Bytes copied between two devices (host transfers excluded), and how many copies.
  uint64_t device_bytes_copied = 0;
  int device_copies = 0;
};

// `module_device[m]` is the device index of graph module m (graph.modules()); every module a node
// uses must have one in [0, n_devices). Allocations are rounded up to `alignment` bytes, as the
// device allocator does. `device_inputs` names inputs the caller already holds on a device (name,
// device index): they count there for the whole step, are read in place by ops on that device and
// copied device to device for the others (GLM-4V's image embeddings, kept on the projector's device).
// With outputs_to_host false the outputs stay where they are made (held, outside the workspace).
StepMemory simulate_step_memory(const Graph& graph, const std::vector<int>& module_device, int n_devices,
                                uint64_t alignment, const std::vector<std::pair<std::string, int>>& device_inputs = {},
                                bool outputs_to_host = true);

}  // namespace ferry
