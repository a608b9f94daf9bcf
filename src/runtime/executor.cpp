#include "runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>

#include "core/error.h"
#include "kernels/kernels.h"
#include "runtime/run_plan.h"

namespace ferry {

// Everything a run of one prepared graph needs that does not change from run to run, and the
// tensors of the run in progress. Built by Executor::make_plan for one executor and one generation
// of its stores.
struct ExecutablePlan {
  uint64_t executor_id = 0;
  uint64_t weights_generation = 0;
  uint64_t states_generation = 0;
  bool dropped_device_copies = false;
  std::vector<Device*> input_homes;  // by ValueId: where the run's inputs were supplied (nullptr: host)
  bool outputs_to_host = true;

  Schedule schedule;
  RunPlan run;
  std::vector<std::string> what;           // by step: what an allocation is for, for out-of-memory messages
  std::vector<size_t> output_position;     // by step: for a copy to host, its index in graph.outputs()
  std::vector<int32_t> input_slots;        // slots of the Input values that steps read
  std::vector<Tensor> held;                // by slot: inputs and produced tensors, empty between runs
  std::vector<Tensor*> tensor;             // by slot: &held[slot], or the stored weight/state tensor
  std::vector<std::vector<Tensor*>> args;  // by step: a compute's input tensors, in node order
  std::vector<Device*> devices;            // every device a step uses, ordered by id
  RunStats stats;                          // all but the allocator peaks, which each run reads
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

std::string describe_reads(const std::vector<Tensor*>& args) {
  std::string s;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) s += i + 1 == args.size() ? " and " : ", ";
    s += fmt::format("{} on {}", args[i]->name(), args[i]->device_name());
  }
  return s;
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
         plan.states_generation == states_.generation() && plan.dropped_device_copies == drop_device_copies_;
}

std::shared_ptr<ExecutablePlan> Executor::make_plan(const Graph& graph, std::vector<Device*> input_homes,
                                                    bool outputs_to_host) {
  states_.ensure(graph, placement_);
  auto p = std::make_shared<ExecutablePlan>();
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

  p->held.resize(run.slots.size());
  p->tensor.resize(run.slots.size());
  for (size_t s = 0; s < run.slots.size(); ++s) {
    const Slot& slot = run.slots[s];
    const Value& v = graph.value(slot.value);
    if (slot.kind == SlotKind::Stored) {
      // Kernels take every input as Tensor* because attention writes its cache inputs; weights are
      // only read. The pointers stay valid while the stores' generations do (is_current).
      p->tensor[s] = v.kind == ValueKind::Weight ? const_cast<Tensor*>(weights_.find(v.name)) : states_.find(v.name);
    } else {
      p->tensor[s] = &p->held[s];
      if (slot.kind == SlotKind::Input) p->input_slots.push_back(static_cast<int32_t>(s));
    }
  }

  p->what.resize(run.steps.size());
  p->output_position.resize(run.steps.size(), 0);
  p->args.resize(run.steps.size());
  for (size_t i = 0; i < run.steps.size(); ++i) {
    if (const auto* c = std::get_if<CopyStep>(&run.steps[i])) {
      if (c->to != nullptr) {
        p->what[i] =
            fmt::format("'{}' copied from {} for '{}'", c->value_name, location_name(c->from), c->consumer_name);
      } else {
        const auto& outs = graph.outputs();
        p->output_position[i] = static_cast<size_t>(std::find(outs.begin(), outs.end(), c->value) - outs.begin());
      }
    } else {
      const auto& cs = std::get<ComputeStep>(run.steps[i]);
      p->what[i] = fmt::format("the output of op '{}' ({})", cs.node_name, op_name(cs.op));
      for (int32_t slot : run.step_slots[i].reads) p->args[i].push_back(p->tensor[static_cast<size_t>(slot)]);
    }
  }
  p->devices = devices_of(run.steps);
  p->stats = stats_of(run, p->devices);
  return p;
}

void Executor::execute(PreparedGraph& prepared, const Inputs& inputs, std::span<Tensor> outputs, bool outputs_to_host) {
  const Graph& graph = prepared.graph_;
  bool planned = false;
  if (!prepared.plan_ || !is_current(*prepared.plan_) || prepared.plan_->outputs_to_host != outputs_to_host ||
      !inputs_where_planned(graph, prepared.inputs_, inputs, prepared.plan_->input_homes)) {
    prepared.plan_ = make_plan(graph, input_homes_of(graph, prepared.inputs_, inputs), outputs_to_host);
    planned = true;
  }
  ExecutablePlan& p = *prepared.plan_;
  if (last_plan_ != prepared.plan_) {
    last_plan_ = prepared.plan_;
    stats_from_last_plan_ = false;
  }

  try {
    for (int32_t slot : p.input_slots) {
      Tensor& t = p.held[static_cast<size_t>(slot)];
      const Value& v = graph.value(p.run.slots[static_cast<size_t>(slot)].value);
      t = inputs.at(v.name);
      t.set_name(v.name);
    }
    for (Device* d : p.devices) d->allocator().reset_peak();

    for (size_t i = 0; i < p.run.steps.size(); ++i) {
      const StepSlots& io = p.run.step_slots[i];
      if (const auto* c = std::get_if<CopyStep>(&p.run.steps[i])) {
        const Value& v = graph.value(c->value);
        const Tensor& src = *p.tensor[static_cast<size_t>(io.reads[0])];
        Tensor* dst = nullptr;
        if (c->to != nullptr) {
          dst = &p.held[static_cast<size_t>(io.writes)];
          *dst = Tensor::view(Storage::allocate(*c->to, c->bytes, p.what[i]), 0, v.dtype, v.shape, v.name);
        } else {
          dst = &outputs[p.output_position[i]];
        }
        // The receiving device's threads do the work; a copy back to host uses the sender's.
        kernels::copy(src, *dst, c->to ? c->to->threads() : c->from->threads());
        if (trace_ != nullptr) {
          *trace_ << fmt::format("[trace] step {} copy {} -> {} {} -> {} {} B\n", i, v.name, c->consumer_name,
                                 location_name(c->from), location_name(c->to), c->bytes);
        }
      } else {
        const auto& cs = std::get<ComputeStep>(p.run.steps[i]);
        const Node& node = graph.nodes()[static_cast<size_t>(cs.node)];
        const std::vector<Tensor*>& args = p.args[i];
        // Guards the scheduler: an op must never see a tensor from another device.
        for (const Tensor* a : args) {
          if (a->device() != cs.device) {
            fail(ErrorKind::DeviceMismatch,
                 "op {} ({}) reads {}; it runs on {}, so all its inputs must be there. A cross-device copy is "
                 "missing: this is a bug in ferry's scheduler, please report it",
                 cs.node_name, op_name(cs.op), describe_reads(args), cs.device->name());
          }
        }
        const Value& v = graph.value(node.output);
        Tensor& out = p.held[static_cast<size_t>(io.writes)];
        out = Tensor::view(Storage::allocate(*cs.device, cs.bytes, p.what[i]), 0, v.dtype, v.shape, v.name);
        kernels::compute(node.op, node.params, args, out, cs.device->threads());
      }
      // Dropping an input handle frees nothing: the caller keeps it.
      for (int32_t slot : io.release_after) p.held[static_cast<size_t>(slot)] = Tensor();
    }
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
      for (int32_t slot : p.run.output_slots) {
        if (slot != kNoSlot) p.held[static_cast<size_t>(slot)] = Tensor();
      }
    }
  } catch (...) {
    for (Tensor& t : p.held) t = Tensor();  // back to weights and state only
    stats_ = RunStats{};
    stats_from_last_plan_ = false;
    throw;
  }

  if (!stats_from_last_plan_) {
    stats_ = p.stats;
    stats_from_last_plan_ = true;
  }
  stats_.planned = planned;
  for (size_t d = 0; d < p.devices.size(); ++d) stats_.devices[d].peak_bytes = p.devices[d]->allocator().peak();
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
