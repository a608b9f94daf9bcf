// Runs a graph on devices through the device interface (core/device.h) alone: schedules it, lays
// out every intermediate at an offset of one workspace per device (packed by lifetime, allocated
// once and shared by every graph the executor runs), compiles each split into a device program,
// then queues the copies and programs in order, ordering devices with events, and waits for them.
// A PreparedGraph keeps its schedule, layout and programs between runs: a decode step plans and
// allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
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
  size_t peak_bytes = 0;       // allocator peak during the run (weights, state and workspace included)
  size_t workspace_bytes = 0;  // the executor's workspace there (after the run)
};

struct RunStats {
  size_t copies = 0;
  size_t bytes_moved = 0;
  size_t device_copies = 0;  // copies between two devices (host inputs/outputs excluded)
  size_t device_bytes_moved = 0;
  std::vector<CopyRecord> edges;        // in execution order
  std::vector<DeviceRunStats> devices;  // ordered by device id
  bool planned = false;  // this run scheduled and planned its graph (false: a prepared graph's plan was reused)

  const DeviceRunStats* device(const std::string& name) const;  // nullptr if the run did not use it
};

struct ExecutablePlan;  // executor.cpp

// A graph kept for repeated runs. Its first run schedules and plans it; later runs reuse that work
// for as long as the loaded weights and state tensors stay the same (WeightStore::generation(),
// StateStore::generation()) and it is run by the same executor. The structure is fixed; node
// parameters may change between runs (set_params), though the decoder gives its per-step values
// (KV write position, logits row) as input tensors so that its graphs run unchanged.
// Move-only: the plan holds the tensors of a run in progress.
class PreparedGraph {
 public:
  explicit PreparedGraph(Graph graph);
  PreparedGraph(PreparedGraph&&) noexcept;
  PreparedGraph& operator=(PreparedGraph&&) noexcept;
  ~PreparedGraph();

  const Graph& graph() const { return graph_; }
  // See Graph::set_params: the same kind of parameters, new values, used from the next run on.
  void set_params(int node, OpParams params) { graph_.set_params(node, std::move(params)); }

 private:
  friend class Executor;
  Graph graph_;
  std::vector<ValueId> inputs_;  // the Input values, in graph order
  std::shared_ptr<ExecutablePlan> plan_;
};

class Executor {
 public:
  using Inputs = std::unordered_map<std::string, Tensor>;

  // Copies the placement; keeps references to the stores, which must outlive the executor. Tracing
  // starts enabled (to stderr) when the environment variable FERRY_TRACE_DEVICES is set to 1.
  Executor(Placement placement, const WeightStore& weights, StateStore& states);
  Executor(Placement placement, const WeightStore&& weights, StateStore& states) = delete;

  // `inputs` maps each Input value's name to a tensor of the declared dtype and shape (Error(Usage)
  // naming the input otherwise), in host memory or already on a device: a reader on that device uses
  // it in place, a reader elsewhere gets a counted copy. Creates missing state (StateStore::ensure), schedules
  // and runs. Returns every graph output as a host tensor, by value name; an output that is an
  // input is returned as the supplied tensor.
  std::unordered_map<std::string, Tensor> run(const Graph& graph, const Inputs& inputs);

  // The same for a prepared graph, planning only when its plan is missing or stale. Output i of the
  // graph (graph.outputs()[i]) is written into outputs[i], which must be a host tensor of the
  // output's dtype and shape, e.g. a view of the caller's buffer (Error(Usage) otherwise).
  void run(PreparedGraph& graph, const Inputs& inputs, std::span<Tensor> outputs);

  // The same, but the outputs stay on the devices that produced them (no copy to host), in the
  // order of graph.outputs(); an output that is an input comes back as supplied. For results a later
  // run reads as an input (GLM-4V's image embeddings): that run copies them device to device, or
  // reads them in place.
  std::vector<Tensor> run_outputs_on_device(PreparedGraph& graph, const Inputs& inputs);

  // Sizes each device's workspace up front (e.g. to the plan's figure), so that no graph the plan
  // covers grows it later. A graph that needs more than a workspace holds grows it; plans made
  // over the old one are then made again.
  void reserve_workspace(Device& device, size_t bytes);
  size_t workspace_bytes(const Device& device) const;  // 0 where it has none

  const RunStats& stats() const { return stats_; }  // of the last run
  const Schedule& last_schedule() const;            // of the last run

  // One line per copy: "[trace] step S copy <value> -> <consumer> <from> -> <to> <bytes> B".
  // nullptr turns tracing off.
  void set_trace(std::ostream* out) { trace_ = out; }

  // Test hook: drop the scheduler's device-to-device copies so the executor's own device check
  // (Error(DeviceMismatch), raised when the run is planned) can be exercised. Never set outside tests.
  void set_drop_device_copies_for_testing(bool drop) { drop_device_copies_ = drop; }

 private:
  struct Workspace {
    Device* device = nullptr;
    std::shared_ptr<Storage> storage;
  };

  bool is_current(const ExecutablePlan& plan) const;
  Workspace& workspace_of(Device& device, size_t bytes);  // grows it when smaller than `bytes`
  std::shared_ptr<ExecutablePlan> make_plan(const Graph& graph, std::vector<Device*> input_homes, bool outputs_to_host);
  // Runs the steps; outputs land in outputs[position of the output]: copied into the caller's host
  // tensors, or (outputs_to_host false) handed over where they were made.
  void execute(PreparedGraph& graph, const Inputs& inputs, std::span<Tensor> outputs, bool outputs_to_host);

  const uint64_t id_;  // tells this executor's plans from another's
  Placement placement_;
  const WeightStore& weights_;
  StateStore& states_;
  std::ostream* trace_ = nullptr;
  bool drop_device_copies_ = false;
  std::shared_ptr<const ExecutablePlan> last_plan_;  // of the last run, for last_schedule()
  bool stats_from_last_plan_ = false;                // stats_ was filled from last_plan_
  RunStats stats_;
  std::vector<Workspace> workspaces_;  // one per device, in first-use order
  uint64_t workspace_generation_ = 0;  // moves when a workspace is replaced
  // The plans made so far (owned by their prepared graphs): a workspace that grows drops their
  // views of the old buffer, which then goes at once instead of when each plan is made again, so
  // a device never holds two workspaces (the planner counts one).
  std::vector<std::weak_ptr<ExecutablePlan>> plans_;
};

}  // namespace ferry
