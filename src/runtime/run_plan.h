// What running a scheduled graph takes, worked out once so that repeated runs plan nothing: every
// tensor a run holds (a value at a location) gets a dense slot, each step knows the slots it reads
// and writes, and each slot is released after the step that reads it last, so allocator peaks stay
// what the step needs.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "runtime/scheduler.h"

namespace ferry {

inline constexpr int32_t kNoSlot = -1;

enum class SlotKind : uint8_t {
  Input,     // a tensor the caller supplies each run (on host or on a device)
  Stored,    // a weight or state tensor owned by its store; never released by a run
  Produced,  // made by a step of the run (a copy or a node's output)
};

struct Slot {
  ValueId value = kNoValue;
  Device* location = nullptr;  // nullptr: host
  SlotKind kind = SlotKind::Produced;
};

struct StepSlots {
  // A copy reads its source; a compute reads one slot per node input, in the node's order.
  std::vector<int32_t> reads;
  int32_t writes = kNoSlot;  // kNoSlot for a copy of a graph output to host (the caller's tensor)
  // Input and Produced slots read for the last time here (or produced here and never read).
  std::vector<int32_t> release_after;
};

struct RunPlan {
  std::vector<ScheduleStep> steps;  // what runs, in order
  std::vector<Slot> slots;
  std::vector<StepSlots> step_slots;  // one per step
  // With keep_outputs: by position in graph.outputs(), the slot holding that output where it was
  // made (kNoSlot for an output the run does not produce: an input or a stored tensor).
  std::vector<int32_t> output_slots;
};

// `steps` are a schedule's steps (possibly with copies left out, see
// Executor::set_drop_device_copies_for_testing) and `homes` its Schedule::homes. A compute reads the
// copy on its own device when one was made, else the value where it lives. Throws Error(Internal)
// when a step reads a tensor that no earlier step produced. With `keep_outputs` the graph outputs
// produced by the run are never released: the caller takes them after the run.
RunPlan plan_run(const Graph& graph, std::vector<ScheduleStep> steps, const std::vector<Device*>& homes,
                 bool keep_outputs = false);

}  // namespace ferry
