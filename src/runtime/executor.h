// Runs a graph: schedules it, then executes the steps in order, each compute on its node's device
// with that device's thread pool, each copy into a tensor allocated on the destination device.
// Intermediates are freed after their last use, so each allocator's peak is what the step needs.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "runtime/placement.h"
#include "runtime/scheduler.h"
#include "runtime/state_store.h"
#include "runtime/weight_store.h"

namespace ferry {

struct CopyRecord {
  std::string value;
  std::string consumer;  // first node reading the copy, or "output"
  std::string from;      // "cpu:0", "host", ...
  std::string to;
  size_t bytes = 0;
};

struct DeviceRunStats {
  std::string device;
  size_t computes = 0;         // compute steps run there
  double compute_seconds = 0;  // wall time of those steps
  size_t peak_bytes = 0;       // allocator peak during the run (weights and state included)
};

struct RunStats {
  size_t copies = 0;
  size_t bytes_moved = 0;
  size_t device_copies = 0;  // copies between two devices (host inputs/outputs excluded)
  size_t device_bytes_moved = 0;
  std::vector<CopyRecord> edges;        // in execution order
  std::vector<DeviceRunStats> devices;  // ordered by device id

  const DeviceRunStats* device(const std::string& name) const;  // nullptr if the run did not use it
};

class Executor {
 public:
  // Copies the placement; keeps references to the stores, which must outlive the executor. Tracing
  // starts enabled (to stderr) when the environment variable FERRY_TRACE_DEVICES is set to 1.
  Executor(Placement placement, const WeightStore& weights, StateStore& states);
  Executor(Placement placement, const WeightStore&& weights, StateStore& states) = delete;

  // `inputs` maps each Input value's name to a host tensor of the declared dtype and shape
  // (Error(Usage) naming the input otherwise). Creates missing state (StateStore::ensure), schedules
  // and runs. Returns every graph output as a host tensor, by value name.
  std::unordered_map<std::string, Tensor> run(const Graph& graph,
                                              const std::unordered_map<std::string, Tensor>& inputs);

  const RunStats& stats() const { return stats_; }             // of the last run
  const Schedule& last_schedule() const { return schedule_; }  // of the last run

  // One line per copy: "[trace] step S copy <value> -> <consumer> <from> -> <to> <bytes> B".
  // nullptr turns tracing off.
  void set_trace(std::ostream* out) { trace_ = out; }

  // Test hook: drop the scheduler's device-to-device copies so the executor's own device check
  // (Error(DeviceMismatch)) can be exercised. Never set outside tests.
  void set_drop_device_copies_for_testing(bool drop) { drop_device_copies_ = drop; }

 private:
  Placement placement_;
  const WeightStore& weights_;
  StateStore& states_;
  std::ostream* trace_ = nullptr;
  bool drop_device_copies_ = false;
  Schedule schedule_;
  RunStats stats_;
};

}  // namespace ferry
