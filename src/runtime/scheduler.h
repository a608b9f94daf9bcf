// The scheduler: the only place in ferry that decides where an op runs and where data moves.
// Every node runs on the device its module is placed on. Weights and state never move: an op
// must run where they live. Every other edge that crosses devices (host inputs, activations between
// modules, graph outputs back to host) gets one counted copy per (value, destination device),
// reused by every consumer there. There are no per-op cases here.
#pragma once

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"
#include "runtime/placement.h"
#include "runtime/state_store.h"
#include "runtime/weight_store.h"

namespace ferry {

// In a schedule, a null Device* means host memory.
std::string location_name(const Device* device);  // "cpu:1" or "host"

struct CopyStep {
  ValueId value = kNoValue;
  std::string value_name;
  Device* from = nullptr;
  Device* to = nullptr;
  size_t bytes = 0;
  int consumer = -1;          // first node reading the copy; -1 for a graph output copied to host
  std::string consumer_name;  // that node's name, or "output"
};

struct ComputeStep {
  int node = -1;
  std::string node_name;
  Op op = Op::Copy;
  Device* device = nullptr;
  size_t bytes = 0;  // of the node's output
};

using ScheduleStep = std::variant<CopyStep, ComputeStep>;

// A maximal run of consecutive compute steps on one device, preceded by the copies that bring its
// inputs there. Steps [first_step, end_step) of the schedule.
struct Split {
  Device* device = nullptr;
  size_t first_step = 0;
  size_t end_step = 0;
  size_t n_copies = 0;  // input copies at the start of the split
  size_t n_nodes = 0;
  size_t input_bytes = 0;
};

struct Schedule {
  std::vector<ScheduleStep> steps;  // in execution order; graph-output copies to host come last
  std::vector<Split> splits;
  // Where each value lives before any copy, by ValueId: host (nullptr) or its input home for inputs, the producer's
  // device for results, the stored tensor's device for weights and state (nullptr if not loaded and
  // not read).
  std::vector<Device*> homes;

  size_t n_splits() const { return splits.size(); }
  size_t n_copies() const;
  size_t bytes_copied() const;
  size_t n_device_copies() const;  // copies between two devices (host inputs/outputs excluded)
  size_t device_bytes_copied() const;

  // One block per split with its device, its input copies (value, source, bytes) and its nodes,
  // then the outputs copied to host; like ggml's GGML_SCHED_DEBUG output.
  std::string describe() const;
};

// Where a run's inputs come from and where its outputs go. By default inputs start in host memory
// and every graph output is copied back to host at the end.
struct ScheduleOptions {
  // By ValueId (empty: all on host): the device an Input value already lives on, nullptr for host.
  // A reader on that device uses it in place; a reader elsewhere gets a counted copy, as for any value.
  std::vector<Device*> input_homes;
  // False: outputs stay on the device that produced them (no copies to host).
  bool outputs_to_host = true;
};

// Throws Error(Usage) for an unplaced module or a weight/state that is not loaded, Error(Shape) when
// a loaded weight/state disagrees with the graph, Error(DeviceMismatch) when a weight or state lives
// on another device than the op reading it, Error(Unsupported) when the device's kernels do not
// support an op for its input dtypes. Nothing runs before all of these checks pass.
Schedule schedule(const Graph& graph, const Placement& placement, const WeightStore& weights, const StateStore& states,
                  const ScheduleOptions& options = {});

}  // namespace ferry
