#include "runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>

#include "core/arena.h"
#include "core/error.h"
#include "runtime/run_plan.h"

namespace ferry {

// One thing the run does, in order: a copy (a schedule step) or a split's program on its device.
struct Action {
  enum class Kind : uint8_t { Copy, Program } kind = Kind::Copy;
  size_t step = 0;     // Copy: the run plan's step
  size_t program = 0;  // Program: index into ExecutablePlan::programs
};

// Everything a run of one prepared graph needs that does not change from run to run. Built by
// Executor::make_plan for one executor, one generation of its stores and one of its workspaces.
struct ExecutablePlan {
  uint64_t executor_id = 0;
  uint64_t weights_generation = 0;
  uint64_t states_generation = 0;
  uint64_t workspace_generation = 0;
  bool dropped_device_copies = false;
  std::vector<Device*> input_homes;  // by ValueId: where the run's inputs were supplied (nullptr: host)
  bool outputs_to_host = true;

  Schedule schedule;
  RunPlan run;
  std::vector<size_t> output_position;  // by step: for a copy to host, its index in graph.outputs()
  std::vector<int32_t> input_slots;     // slots of the Input values that steps read
  std::vector<int32_t> kept_slots;      // outputs left on their device: a fresh tensor each run
  std::vector<std::string> kept_what;   // by kept slot: what the allocation is for
  // By slot: the tensor's handle. Workspace views are made once; inputs and kept outputs are set
  // each run and dropped after it. Stored tensors are pointed to in their store (`tensor`).
  std::vector<Tensor> held;
  std::vector<const Tensor*> tensor;  // by slot: &held[slot], or the stored weight/state tensor
  std::vector<Tensor> staging;        // by step: host memory a copy between two devices passes through
  std::vector<std::unique_ptr<Program>> programs;
  std::vector<Device*> program_device;
  std::vector<Action> actions;
  std::vector<Device*> devices;  // every device a step uses, ordered by id
  RunStats stats;                // all but the allocator peaks, which each run reads
};

const DeviceRunStats* RunStats::device(const std::string& name) const {
  for (const auto& d : devices) {
    if (d.device == name) return &d;
  }
  return nullptr;
}

PreparedGraph::PreparedGraph(Graph graph) : graph_(std::move(graph)) {
  for (size_t id = 0; id < graph_.values().size(); ++id) {
    if (graph_.values()[id].kind == ValueKind::Input) inputs_.push_back(static_cast<ValueId>(id));
  }
}
PreparedGraph::PreparedGraph(PreparedGraph&&) noexcept = default;
PreparedGraph& PreparedGraph::operator=(PreparedGraph&&) noexcept = default;
PreparedGraph::~PreparedGraph() = default;

namespace {

uint64_t next_executor_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

std::string input_names(const Graph& graph, const std::vector<ValueId>& input_values) {
  std::string s;
  for (ValueId id : input_values) s += (s.empty() ? "" : ", ") + graph.value(id).name;
  return s.empty() ? std::string("(none)") : s;
}

void check_inputs(const Graph& graph, const std::vector<ValueId>& input_values, const Executor::Inputs& inputs) {
  for (ValueId id : input_values) {
    const Value& v = graph.value(id);
    auto it = inputs.find(v.name);
    if (it == inputs.end() || !it->second.defined()) {
      fail(ErrorKind::Usage, "graph input '{}' ({} {}) is not supplied; supply a tensor for it", v.name,
           dtype_name(v.dtype), v.shape.str());
    }
    const Tensor& t = it->second;
    if (t.dtype() != v.dtype || !(t.shape() == v.shape)) {
      fail(ErrorKind::Usage, "graph input '{}' is supplied as {} {} but the graph declares {} {}", v.name,
           dtype_name(t.dtype()), t.shape().str(), dtype_name(v.dtype), v.shape.str());
    }
  }
  if (inputs.size() == input_values.size()) return;  // every input found, so no name is unknown
  for (const auto& [name, t] : inputs) {
    const ValueId id = graph.find(name);
    if (id == kNoValue || graph.value(id).kind != ValueKind::Input) {
      fail(ErrorKind::Usage, "'{}' is supplied as an input but the graph has no input of that name; its inputs are: {}",
           name, input_names(graph, input_values));
    }
  }
}

void check_outputs(const Graph& graph, std::span<const Tensor> outputs) {
  if (outputs.size() != graph.outputs().size()) {
    fail(ErrorKind::Usage, "the graph has {} outputs but {} tensors are given to receive them", graph.outputs().size(),
         outputs.size());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Value& v = graph.value(graph.outputs()[i]);
    const Tensor& t = outputs[i];
    if (!t.defined() || t.device() != nullptr || t.dtype() != v.dtype || !(t.shape() == v.shape)) {
      fail(ErrorKind::Usage, "graph output '{}' needs a host tensor of {} {} to receive it, but {} is given", v.name,
           dtype_name(v.dtype), v.shape.str(),
           t.defined() ? fmt::format("{} {} on {}", dtype_name(t.dtype()), t.shape().str(), t.device_name())
                       : std::string("no tensor"));
    }
  }
}

// The statistics a run of `plan` reports, except the allocator peaks.
RunStats stats_of(const RunPlan& plan, const std::vector<Device*>& devices) {
  RunStats st;
  for (Device* d : devices) st.devices.push_back(DeviceRunStats{d->name(), 0, 0});
  for (const auto& step : plan.steps) {
    if (const auto* c = std::get_if<CopyStep>(&step)) {
      st.copies++;
      st.bytes_moved += c->bytes;
      if (c->from && c->to) {
        st.device_copies++;
        st.device_bytes_moved += c->bytes;
      }
      st.edges.push_back(
          CopyRecord{c->value_name, c->consumer_name, location_name(c->from), location_name(c->to), c->bytes});
    } else {
      const Device* d = std::get<ComputeStep>(step).device;
      const auto at = std::find(devices.begin(), devices.end(), d) - devices.begin();
      st.devices[static_cast<size_t>(at)].computes++;
    }
  }
  return st;
}

std::vector<Device*> devices_of(const std::vector<ScheduleStep>& steps) {
  std::vector<Device*> devices;
  const auto add = [&](Device* d) {
    if (d != nullptr && std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  };
  for (const auto& s : steps) {
    if (const auto* c = std::get_if<CopyStep>(&s)) {
      add(c->from);
      add(c->to);
    } else {
      add(std::get<ComputeStep>(s).device);
    }
  }
  std::sort(devices.begin(), devices.end(), [](const Device* a, const Device* b) { return a->id() < b->id(); });
  return devices;
}

const Schedule kNoSchedule;

// By ValueId: the device each supplied input lives on (nullptr: host).
std::vector<Device*> input_homes_of(const Graph& graph, const std::vector<ValueId>& input_values,
                                    const Executor::Inputs& inputs) {
  std::vector<Device*> homes(graph.values().size(), nullptr);
  for (ValueId id : input_values) homes[static_cast<size_t>(id)] = inputs.at(graph.value(id).name).device();
  return homes;
}

// Whether the supplied inputs are where a plan expects them (checked every run, without allocating).
bool inputs_where_planned(const Graph& graph, const std::vector<ValueId>& input_values, const Executor::Inputs& inputs,
                          const std::vector<Device*>& planned) {
  for (ValueId id : input_values) {
    if (inputs.at(graph.value(id).name).device() != planned[static_cast<size_t>(id)]) return false;
  }
  return true;
}

}  // namespace

Executor::Executor(Placement placement, const WeightStore& weights, StateStore& states)
    : id_(next_executor_id()), placement_(std::move(placement)), weights_(weights), states_(states) {
  const char* env = std::getenv("FERRY_TRACE_DEVICES");
  if (env != nullptr && std::string(env) == "1") trace_ = &std::cerr;
}

const Schedule& Executor::last_schedule() const {
  return last_plan_ ? last_plan_->schedule : kNoSchedule;
}

bool Executor::is_current(const ExecutablePlan& plan) const {
  return plan.executor_id == id_ && plan.weights_generation == weights_.generation() &&
         plan.states_generation == states_.generation() && plan.workspace_generation == workspace_generation_ &&
         plan.dropped_device_copies == drop_device_copies_;
}

Executor::Workspace& Executor::workspace_of(Device& device, size_t bytes) {
  auto it =
      std::find_if(workspaces_.begin(), workspaces_.end(), [&](const Workspace& w) { return w.device == &device; });
  if (it == workspaces_.end()) {
    workspaces_.push_back(Workspace{&device, nullptr});
    it = workspaces_.end() - 1;
  }
  const size_t have = it->storage ? it->storage->size() : 0;
  if (bytes > have) {
    // The old buffer goes first: every plan viewing it is stale from here on (the generation
    // moves), so its views and device programs are dropped now and made again when next run.
    std::erase_if(plans_, [](const std::weak_ptr<ExecutablePlan>& w) { return w.expired(); });
    for (const auto& w : plans_) {
      if (const auto plan = w.lock()) {
        plan->held.clear();
        plan->tensor.clear();
        plan->programs.clear();
      }
    }
    it->storage.reset();
    it->storage = device.allocate(bytes, fmt::format("the workspace of {}", device.name()));
    workspace_generation_++;
  }
  return *it;
}

void Executor::reserve_workspace(Device& device, size_t bytes) {
  if (bytes > 0) workspace_of(device, bytes);
}

size_t Executor::workspace_bytes(const Device& device) const {
  for (const Workspace& w : workspaces_) {
    if (w.device == &device && w.storage) return w.storage->size();
  }
  return 0;
}

namespace {

// The slots of produced tensors on each device, with the steps they live through, laid out in one
// workspace per device (core/arena.h). `kept` slots (outputs handed over) are left out.
struct WorkspaceLayout {
  std::vector<Device*> devices;
  std::vector<size_t> bytes;        // by device
  std::vector<size_t> offset;       // by slot (Produced slots on a device)
  std::vector<int> device_of_slot;  // by slot: index into devices, -1 for none
};

WorkspaceLayout lay_out_workspaces(const Graph& graph, const RunPlan& run, const std::vector<bool>& kept) {
  WorkspaceLayout out;
  out.offset.assign(run.slots.size(), 0);
  out.device_of_slot.assign(run.slots.size(), -1);
  std::vector<int64_t> first(run.slots.size(), -1), last(run.slots.size(), -1);
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const StepSlots& io = run.step_slots[i];
    if (io.writes != kNoSlot) first[static_cast<size_t>(io.writes)] = static_cast<int64_t>(i);
    for (int32_t s : io.release_after) last[static_cast<size_t>(s)] = static_cast<int64_t>(i);
  }
  std::vector<std::vector<ArenaBlock>> blocks;
  std::vector<std::vector<size_t>> block_slot;
  for (size_t s = 0; s < run.slots.size(); ++s) {
    const Slot& slot = run.slots[s];
    if (slot.kind != SlotKind::Produced || slot.location == nullptr || kept[s]) continue;
    auto at = std::find(out.devices.begin(), out.devices.end(), slot.location);
    if (at == out.devices.end()) {
      out.devices.push_back(slot.location);
      blocks.emplace_back();
      block_slot.emplace_back();
      at = out.devices.end() - 1;
    }
    const auto d = static_cast<size_t>(at - out.devices.begin());
    const Value& v = graph.value(slot.value);
    const size_t bytes = *dtype_bytes(v.dtype, static_cast<uint64_t>(v.shape.numel()));
    blocks[d].push_back(ArenaBlock{bytes, first[s], std::max(first[s], last[s])});
    block_slot[d].push_back(s);
    out.device_of_slot[s] = static_cast<int>(d);
  }
  for (size_t d = 0; d < out.devices.size(); ++d) {
    const ArenaLayout layout = pack_arena(blocks[d], Allocator::kAlignment);
    out.bytes.push_back(layout.size);
    for (size_t b = 0; b < blocks[d].size(); ++b) out.offset[block_slot[d][b]] = layout.offsets[b];
  }
  return out;
}

}  // namespace

std::shared_ptr<ExecutablePlan> Executor::make_plan(const Graph& graph, std::vector<Device*> input_homes,
                                                    bool outputs_to_host) {
  states_.ensure(graph, placement_);
  auto p = std::make_shared<ExecutablePlan>();
  plans_.push_back(p);
  p->executor_id = id_;
  p->weights_generation = weights_.generation();
  p->states_generation = states_.generation();
  p->dropped_device_copies = drop_device_copies_;
  p->input_homes = std::move(input_homes);
  p->outputs_to_host = outputs_to_host;
  p->schedule = schedule(graph, placement_, weights_, states_, ScheduleOptions{p->input_homes, outputs_to_host});

  std::vector<ScheduleStep> steps = p->schedule.steps;
  if (drop_device_copies_) {
    std::erase_if(steps, [](const ScheduleStep& s) {
      const auto* c = std::get_if<CopyStep>(&s);
      return c != nullptr && c->from != nullptr && c->to != nullptr;
    });
  }
  p->run = plan_run(graph, std::move(steps), p->schedule.homes, !outputs_to_host);
  const RunPlan& run = p->run;

  // Guards the scheduler: an op must never see a tensor from another device.
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const auto* cs = std::get_if<ComputeStep>(&run.steps[i]);
    if (cs == nullptr) continue;
    const std::vector<int32_t>& reads = run.step_slots[i].reads;
    const bool mixed = std::any_of(reads.begin(), reads.end(), [&](int32_t slot) {
      return run.slots[static_cast<size_t>(slot)].location != cs->device;
    });
    if (!mixed) continue;
    std::string described;
    for (size_t r = 0; r < reads.size(); ++r) {
      const Slot& slot = run.slots[static_cast<size_t>(reads[r])];
      if (r > 0) described += r + 1 == reads.size() ? " and " : ", ";
      described += fmt::format("{} on {}", graph.value(slot.value).name, location_name(slot.location));
    }
    fail(ErrorKind::DeviceMismatch,
         "op {} ({}) reads {}; it runs on {}, so all its inputs must be there. A cross-device copy is "
         "missing: this is a bug in ferry's scheduler, please report it",
         cs->node_name, op_name(cs->op), described, cs->device->name());
  }

  std::vector<bool> kept(run.slots.size(), false);
  for (int32_t slot : run.output_slots) {
    if (slot != kNoSlot) kept[static_cast<size_t>(slot)] = true;
  }
  const WorkspaceLayout layout = lay_out_workspaces(graph, run, kept);
  std::vector<std::shared_ptr<Storage>> workspace(layout.devices.size());
  for (size_t d = 0; d < layout.devices.size(); ++d) {
    workspace[d] = workspace_of(*layout.devices[d], layout.bytes[d]).storage;
  }
  p->workspace_generation = workspace_generation_;

  p->held.resize(run.slots.size());
  p->tensor.resize(run.slots.size());
  for (size_t s = 0; s < run.slots.size(); ++s) {
    const Slot& slot = run.slots[s];
    const Value& v = graph.value(slot.value);
    p->tensor[s] = &p->held[s];
    if (slot.kind == SlotKind::Stored) {
      p->tensor[s] = v.kind == ValueKind::Weight ? weights_.find(v.name) : states_.find(v.name);
    } else if (slot.kind == SlotKind::Input) {
      p->input_slots.push_back(static_cast<int32_t>(s));
      p->held[s] = Tensor::unbound(v.dtype, v.shape, v.name);  // each run binds the caller's tensor
    } else if (kept[s]) {
      p->kept_slots.push_back(static_cast<int32_t>(s));
      p->held[s] = Tensor::unbound(v.dtype, v.shape, v.name);  // each run allocates a fresh one
      p->kept_what.push_back(fmt::format("the output '{}' kept on {}", v.name, location_name(slot.location)));
    } else if (layout.device_of_slot[s] >= 0) {
      const auto d = static_cast<size_t>(layout.device_of_slot[s]);
      p->held[s] = Tensor::view(workspace[d], layout.offset[s], v.dtype, v.shape, v.name);
    }
  }

  p->output_position.resize(run.steps.size(), 0);
  p->staging.resize(run.steps.size());
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const auto* c = std::get_if<CopyStep>(&run.steps[i]);
    if (c == nullptr) continue;
    if (c->to == nullptr) {
      const auto& outs = graph.outputs();
      p->output_position[i] = static_cast<size_t>(std::find(outs.begin(), outs.end(), c->value) - outs.begin());
    } else if (c->from != nullptr && !c->from->host_addressable() && !c->to->host_addressable()) {
      // Neither side reads the other's memory: the bytes pass through the host, unless the
      // destination copies them directly (decided when the copy runs).
      const Value& v = graph.value(c->value);
      p->staging[i] = Tensor::host(v.dtype, v.shape, v.name + " (staging)");
    }
  }

  // Programs: each maximal run of computes on one device, compiled once.
  for (size_t i = 0; i < run.steps.size();) {
    const auto* cs = std::get_if<ComputeStep>(&run.steps[i]);
    if (cs == nullptr) {
      p->actions.push_back(Action{Action::Kind::Copy, i, 0});
      ++i;
      continue;
    }
    Device* device = cs->device;
    std::vector<BoundOp> ops;
    for (; i < run.steps.size(); ++i) {
      const auto* step = std::get_if<ComputeStep>(&run.steps[i]);
      if (step == nullptr || step->device != device) break;
      BoundOp op;
      op.node = &graph.nodes()[static_cast<size_t>(step->node)];
      for (int32_t slot : run.step_slots[i].reads) op.inputs.push_back(p->tensor[static_cast<size_t>(slot)]);
      op.output = p->tensor[static_cast<size_t>(run.step_slots[i].writes)];
      ops.push_back(std::move(op));
    }
    p->actions.push_back(Action{Action::Kind::Program, 0, p->programs.size()});
    p->programs.push_back(device->compile(ops));
    p->program_device.push_back(device);
  }
  p->devices = devices_of(run.steps);
  p->stats = stats_of(run, p->devices);
  return p;
}

namespace {

// Waits for every device, even after one failed, and rethrows the first error.
void synchronize_all(const std::vector<Device*>& devices) {
  std::exception_ptr first;
  for (Device* d : devices) {
    try {
      d->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

// Queues a copy of `src` (on `from`) into `dst` (on `to`), both devices, ordered after the work
// that produced src and before any later work on either device that could reuse their memory.
void copy_between_devices(Device& from, Device& to, const Tensor& src, const Tensor& dst, const Tensor& staging) {
  to.wait(from.record());                // src is ready once `from` reaches this point
  bool copied = to.copy_from(src, dst);  // a direct path between the pair
  if (!copied && src.storage()->host_addressable()) {
    to.write(dst, src.data());
    copied = true;
  }
  if (copied) {
    from.wait(to.record());  // `from` may reuse src's memory only after the copy read it
    return;
  }
  if (dst.storage()->host_addressable()) {
    from.wait(to.record());  // dst's memory is free once `to` reaches this point
    from.read(src, dst.data());
    to.wait(from.record());
    return;
  }
  from.read(src, staging.data());
  to.wait(from.record());
  to.write(dst, staging.data());
  from.wait(to.record());  // the staging is reused by the next run only after both are done
}

}  // namespace

void Executor::execute(PreparedGraph& prepared, const Inputs& inputs, std::span<Tensor> outputs, bool outputs_to_host) {
  const Graph& graph = prepared.graph_;
  bool planned = false;
  if (!prepared.plan_ || !is_current(*prepared.plan_) || prepared.plan_->outputs_to_host != outputs_to_host ||
      !inputs_where_planned(graph, prepared.inputs_, inputs, prepared.plan_->input_homes)) {
    prepared.plan_.reset();  // its workspace views go before a new plan may grow the workspace
    try {
      prepared.plan_ = make_plan(graph, input_homes_of(graph, prepared.inputs_, inputs), outputs_to_host);
    } catch (...) {
      stats_ = RunStats{};  // a run that could not be planned reports nothing
      stats_from_last_plan_ = false;
      throw;
    }
    planned = true;
  }
  ExecutablePlan& p = *prepared.plan_;
  if (last_plan_ != prepared.plan_) {
    last_plan_ = prepared.plan_;
    stats_from_last_plan_ = false;
  }

  // Back to memory-less tensors of the same dtype and shape: the programs keep pointing at them.
  const auto drop_run_tensors = [&] {
    for (const auto* slots : {&p.input_slots, &p.kept_slots}) {
      for (int32_t slot : *slots) {
        const Value& v = graph.value(p.run.slots[static_cast<size_t>(slot)].value);
        p.held[static_cast<size_t>(slot)] = Tensor::unbound(v.dtype, v.shape, v.name);
      }
    }
  };
  try {
    for (int32_t slot : p.input_slots) {
      Tensor& t = p.held[static_cast<size_t>(slot)];
      const Value& v = graph.value(p.run.slots[static_cast<size_t>(slot)].value);
      t = inputs.at(v.name);
      t.set_name(v.name);
    }
    for (Device* d : p.devices) d->allocator().reset_peak();
    for (size_t k = 0; k < p.kept_slots.size(); ++k) {
      const auto slot = static_cast<size_t>(p.kept_slots[k]);
      const Value& v = graph.value(p.run.slots[slot].value);
      p.held[slot] = Tensor::view(p.run.slots[slot].location->allocate(
                                      *dtype_bytes(v.dtype, static_cast<uint64_t>(v.shape.numel())), p.kept_what[k]),
                                  0, v.dtype, v.shape, v.name);
    }

    try {
      for (const Action& a : p.actions) {
        if (a.kind == Action::Kind::Program) {
          p.program_device[a.program]->run(*p.programs[a.program]);
          continue;
        }
        const auto& c = std::get<CopyStep>(p.run.steps[a.step]);
        const StepSlots& io = p.run.step_slots[a.step];
        const Tensor& src = *p.tensor[static_cast<size_t>(io.reads[0])];
        if (c.to == nullptr) {
          c.from->read(src, outputs[p.output_position[a.step]].data());
        } else if (c.from == nullptr) {
          c.to->write(*p.tensor[static_cast<size_t>(io.writes)], src.data());
        } else {
          copy_between_devices(*c.from, *c.to, src, *p.tensor[static_cast<size_t>(io.writes)], p.staging[a.step]);
        }
        if (trace_ != nullptr) {
          *trace_ << fmt::format("[trace] step {} copy {} -> {} {} -> {} {} B\n", a.step, c.value_name, c.consumer_name,
                                 location_name(c.from), location_name(c.to), c.bytes);
        }
      }
    } catch (...) {
      // Work already queued reads this plan's tensors: let it finish before anything goes.
      try {
        synchronize_all(p.devices);
      } catch (...) {
      }
      throw;
    }
    synchronize_all(p.devices);

    if (!outputs_to_host) {
      // Outputs made by the run are handed over; an input or a stored tensor is returned as it is.
      const auto& ids = graph.outputs();
      for (size_t i = 0; i < ids.size(); ++i) {
        const Value& v = graph.value(ids[i]);
        const int32_t slot = p.run.output_slots[i];
        const Tensor* stored = v.kind == ValueKind::Weight  ? weights_.find(v.name)
                               : v.kind == ValueKind::State ? states_.find(v.name)
                                                            : nullptr;
        if (v.kind == ValueKind::Input) {
          outputs[i] = inputs.at(v.name);
        } else if (slot != kNoSlot) {
          outputs[i] = p.held[static_cast<size_t>(slot)];
        } else if (stored != nullptr) {
          outputs[i] = *stored;
        } else {
          fail(ErrorKind::Usage, "graph output '{}' is not loaded", v.name);
        }
      }
    }
  } catch (...) {
    drop_run_tensors();
    stats_ = RunStats{};
    stats_from_last_plan_ = false;
    throw;
  }
  drop_run_tensors();

  if (!stats_from_last_plan_) {
    stats_ = p.stats;
    stats_from_last_plan_ = true;
  }
  stats_.planned = planned;
  for (size_t d = 0; d < p.devices.size(); ++d) {
    stats_.devices[d].peak_bytes = p.devices[d]->allocator().peak();
    stats_.devices[d].workspace_bytes = workspace_bytes(*p.devices[d]);
  }
}

std::unordered_map<std::string, Tensor> Executor::run(const Graph& graph, const Inputs& inputs) {
  PreparedGraph prepared(graph);
  check_inputs(graph, prepared.inputs_, inputs);
  // Each output that lives on a device gets a host tensor for its copy (the first time it is listed);
  // an output that is a host input needs no copy.
  const auto& ids = graph.outputs();
  const auto host_input = [&](const Value& v) {
    return v.kind == ValueKind::Input && inputs.at(v.name).device() == nullptr;
  };
  std::vector<Tensor> outputs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Value& v = graph.value(ids[i]);
    const bool first = std::find(ids.begin(), ids.end(), ids[i]) - ids.begin() == static_cast<std::ptrdiff_t>(i);
    if (first && !host_input(v)) outputs[i] = Tensor::host(v.dtype, v.shape, v.name);
  }
  execute(prepared, inputs, outputs, true);
  std::unordered_map<std::string, Tensor> results;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Value& v = graph.value(ids[i]);
    results.emplace(v.name, host_input(v) ? inputs.at(v.name) : outputs[i]);  // keeps the first
  }
  return results;
}

void Executor::run(PreparedGraph& prepared, const Inputs& inputs, std::span<Tensor> outputs) {
  const Graph& graph = prepared.graph();
  check_inputs(graph, prepared.inputs_, inputs);
  check_outputs(graph, outputs);
  execute(prepared, inputs, outputs, true);
  // Outputs with no copy of their own: host inputs and repeats of an earlier output.
  const auto& ids = graph.outputs();
  for (size_t i = 0; i < ids.size(); ++i) {
    const Value& v = graph.value(ids[i]);
    const size_t first = static_cast<size_t>(std::find(ids.begin(), ids.end(), ids[i]) - ids.begin());
    const Tensor* src = first < i                                                             ? &outputs[first]
                        : v.kind == ValueKind::Input && inputs.at(v.name).device() == nullptr ? &inputs.at(v.name)
                                                                                              : nullptr;
    if (src != nullptr) std::memmove(outputs[i].data(), src->data(), src->nbytes());
  }
}

std::vector<Tensor> Executor::run_outputs_on_device(PreparedGraph& prepared, const Inputs& inputs) {
  check_inputs(prepared.graph(), prepared.inputs_, inputs);
  std::vector<Tensor> outputs(prepared.graph().outputs().size());
  execute(prepared, inputs, outputs, false);
  return outputs;
}

}  // namespace ferry
