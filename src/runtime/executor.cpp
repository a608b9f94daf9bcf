#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "kernels/kernels.h"

namespace ferry {

const DeviceRunStats* RunStats::device(const std::string& name) const {
  for (const auto& d : devices) {
    if (d.device == name) return &d;
  }
  return nullptr;
}

Executor::Executor(Placement placement, const WeightStore& weights, StateStore& states)
    : placement_(std::move(placement)), weights_(weights), states_(states) {
  const char* env = std::getenv("FERRY_TRACE_DEVICES");
  if (env != nullptr && std::string(env) == "1") trace_ = &std::cerr;
}

namespace {

// A tensor's identity during a run: a graph value at a location (nullptr: host memory).
using Key = std::pair<ValueId, Device*>;

std::string input_names(const Graph& graph) {
  std::string s;
  for (const Value& v : graph.values()) {
    if (v.kind == ValueKind::Input) s += (s.empty() ? "" : ", ") + v.name;
  }
  return s.empty() ? std::string("(none)") : s;
}

void check_inputs(const Graph& graph, const std::unordered_map<std::string, Tensor>& inputs) {
  for (const Value& v : graph.values()) {
    if (v.kind != ValueKind::Input) continue;
    auto it = inputs.find(v.name);
    if (it == inputs.end() || !it->second.defined()) {
      fail(ErrorKind::Usage, "graph input '{}' ({} {}) is not supplied; supply a host tensor for it", v.name,
           dtype_name(v.dtype), v.shape.str());
    }
    const Tensor& t = it->second;
    if (t.device() != nullptr) {
      fail(ErrorKind::Usage,
           "graph input '{}' is supplied on {}; supply inputs as host tensors (Tensor::host), the runtime copies "
           "them to the devices that read them",
           v.name, t.device_name());
    }
    if (t.dtype() != v.dtype || !(t.shape() == v.shape)) {
      fail(ErrorKind::Usage, "graph input '{}' is supplied as {} {} but the graph declares {} {}", v.name,
           dtype_name(t.dtype()), t.shape().str(), dtype_name(v.dtype), v.shape.str());
    }
  }
  for (const auto& [name, t] : inputs) {
    const ValueId id = graph.find(name);
    if (id == kNoValue || graph.value(id).kind != ValueKind::Input) {
      fail(ErrorKind::Usage, "'{}' is supplied as an input but the graph has no input of that name; its inputs are: {}",
           name, input_names(graph));
    }
  }
}

size_t value_bytes(const Value& v) {
  const auto bytes = dtype_bytes(v.dtype, static_cast<uint64_t>(v.shape.numel()));
  if (!bytes) {
    fail(ErrorKind::Shape, "value '{}' of shape {} does not fit dtype {}", v.name, v.shape.str(), dtype_name(v.dtype));
  }
  return *bytes;
}

std::string describe_reads(const std::vector<Tensor>& args) {
  std::string s;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) s += i + 1 == args.size() ? " and " : ", ";
    s += fmt::format("{} on {}", args[i].name(), args[i].device_name());
  }
  return s;
}

// Where a value starts before any copy: host for inputs, its producer's device for results, the
// stored tensor's device for weights and state.
class Homes {
 public:
  Homes(const Graph& graph, const std::vector<ScheduleStep>& steps, const WeightStore& weights,
        const StateStore& states)
      : graph_(graph), weights_(weights), states_(states), node_device_(graph.nodes().size(), nullptr) {
    for (const auto& s : steps) {
      if (const auto* c = std::get_if<ComputeStep>(&s)) node_device_[static_cast<size_t>(c->node)] = c->device;
    }
  }

  Device* of(ValueId id) const {
    const Value& v = graph_.value(id);
    if (v.kind == ValueKind::Input) return nullptr;
    if (v.kind == ValueKind::Result) return node_device_.at(static_cast<size_t>(v.producer));
    const Tensor* t = v.kind == ValueKind::Weight ? weights_.find(v.name) : states_.find(v.name);
    return t ? t->device() : nullptr;
  }

 private:
  const Graph& graph_;
  const WeightStore& weights_;
  const StateStore& states_;
  std::vector<Device*> node_device_;
};

// Which tensor each step reads (the copy on the step's device if one was made, else the value where
// it lives) and after which step each tensor is read for the last time.
struct Lifetimes {
  std::vector<std::vector<Key>> reads;
  std::vector<std::vector<Key>> release_after;
};

Lifetimes plan_lifetimes(const Graph& graph, const std::vector<ScheduleStep>& steps, std::set<Key> exists,
                         const Homes& homes) {
  Lifetimes out;
  out.reads.resize(steps.size());
  out.release_after.resize(steps.size());
  std::map<Key, size_t> last_use;
  for (size_t i = 0; i < steps.size(); ++i) {
    std::vector<Key>& reads = out.reads[i];
    Key produced{};
    if (const auto* c = std::get_if<CopyStep>(&steps[i])) {
      reads.push_back(Key{c->value, c->from});
      produced = Key{c->value, c->to};
    } else {
      const auto& cs = std::get<ComputeStep>(steps[i]);
      const Node& node = graph.nodes()[static_cast<size_t>(cs.node)];
      for (ValueId in : node.inputs) {
        const Key local{in, cs.device};
        reads.push_back(exists.count(local) ? local : Key{in, homes.of(in)});
      }
      produced = Key{node.output, cs.device};
    }
    for (const Key& k : reads) {
      if (!exists.count(k)) {
        fail(ErrorKind::Internal, "step {} reads '{}' on {}, which no earlier step produced", i,
             graph.value(k.first).name, location_name(k.second));
      }
      last_use[k] = i;
    }
    if (produced.second != nullptr) {  // copies to host are results, not tensors of the run
      exists.insert(produced);
      last_use.emplace(produced, i);  // a result nobody reads is freed right away
    }
  }
  for (const auto& [key, step] : last_use) out.release_after[step].push_back(key);
  return out;
}

std::set<Device*> devices_of(const std::vector<ScheduleStep>& steps) {
  std::set<Device*> devices;
  for (const auto& s : steps) {
    if (const auto* c = std::get_if<CopyStep>(&s)) {
      if (c->from) devices.insert(c->from);
      if (c->to) devices.insert(c->to);
    } else {
      devices.insert(std::get<ComputeStep>(s).device);
    }
  }
  return devices;
}

// The tensors alive during one run and the two kinds of step.
class StepRunner {
 public:
  StepRunner(const Graph& graph, RunStats& stats, std::ostream* trace) : graph_(graph), stats_(stats), trace_(trace) {}

  std::map<Key, Tensor>& env() { return env_; }
  std::unordered_map<std::string, Tensor>& results() { return results_; }
  std::map<Device*, DeviceRunStats>& per_device() { return per_device_; }

  void copy(size_t step, const CopyStep& c, const Key& source) {
    const Value& v = graph_.value(c.value);
    const Tensor& src = env_.at(source);
    const std::string what =
        fmt::format("'{}' copied from {} for '{}'", v.name, location_name(c.from), c.consumer_name);
    std::shared_ptr<Storage> storage = c.to ? Storage::allocate(*c.to, c.bytes, what) : Storage::host(c.bytes);
    Tensor dst = Tensor::view(std::move(storage), 0, v.dtype, v.shape, v.name);
    // The receiving device's threads do the work; a copy back to host uses the sender's.
    kernels::copy(src, dst, c.to ? c.to->threads() : c.from->threads());
    if (trace_ != nullptr) {
      *trace_ << fmt::format("[trace] step {} copy {} -> {} {} -> {} {} B\n", step, v.name, c.consumer_name,
                             location_name(c.from), location_name(c.to), c.bytes);
    }
    stats_.copies++;
    stats_.bytes_moved += c.bytes;
    if (c.from && c.to) {
      stats_.device_copies++;
      stats_.device_bytes_moved += c.bytes;
    }
    stats_.edges.push_back(CopyRecord{v.name, c.consumer_name, location_name(c.from), location_name(c.to), c.bytes});
    if (c.to) {
      env_.insert_or_assign(Key{c.value, c.to}, std::move(dst));
    } else {
      results_.insert_or_assign(v.name, std::move(dst));
    }
  }

  void compute(const ComputeStep& cs, const std::vector<Key>& reads) {
    const Node& node = graph_.nodes()[static_cast<size_t>(cs.node)];
    const Value& out_value = graph_.value(node.output);
    std::vector<Tensor> args;
    args.reserve(reads.size());
    for (const Key& k : reads) args.push_back(env_.at(k));
    // Guards the scheduler: an op must never see a tensor from another device.
    for (const Tensor& a : args) {
      if (a.device() != cs.device) {
        fail(ErrorKind::DeviceMismatch,
             "op {} ({}) reads {}; it runs on {}, so all its inputs must be there. A cross-device copy is "
             "missing: this is a bug in ferry's scheduler, please report it",
             cs.node_name, op_name(cs.op), describe_reads(args), cs.device->name());
      }
    }
    const std::string what = fmt::format("the output of op '{}' ({})", cs.node_name, op_name(cs.op));
    Tensor out = Tensor::view(Storage::allocate(*cs.device, value_bytes(out_value), what), 0, out_value.dtype,
                              out_value.shape, out_value.name);
    std::vector<Tensor*> arg_ptrs;
    for (Tensor& a : args) arg_ptrs.push_back(&a);
    const auto start = std::chrono::steady_clock::now();
    kernels::compute(node.op, node.params, arg_ptrs, out, cs.device->threads());
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    DeviceRunStats& ds = per_device_[cs.device];
    ds.computes++;
    ds.compute_seconds += elapsed.count();
    env_.insert_or_assign(Key{node.output, cs.device}, std::move(out));
  }

 private:
  const Graph& graph_;
  RunStats& stats_;
  std::ostream* trace_;
  std::map<Key, Tensor> env_;
  std::unordered_map<std::string, Tensor> results_;
  std::map<Device*, DeviceRunStats> per_device_;
};

}  // namespace

std::unordered_map<std::string, Tensor> Executor::run(const Graph& graph,
                                                      const std::unordered_map<std::string, Tensor>& inputs) {
  check_inputs(graph, inputs);
  states_.ensure(graph, placement_);
  schedule_ = schedule(graph, placement_, weights_, states_);
  stats_ = RunStats{};

  std::vector<ScheduleStep> steps = schedule_.steps;
  if (drop_device_copies_) {
    std::erase_if(steps, [](const ScheduleStep& s) {
      const auto* c = std::get_if<CopyStep>(&s);
      return c != nullptr && c->from != nullptr && c->to != nullptr;
    });
  }

  StepRunner runner(graph, stats_, trace_);
  // Where every value starts: inputs on host, weights and state where they are stored.
  std::set<Key> initial;
  for (size_t id = 0; id < graph.values().size(); ++id) {
    const Value& v = graph.values()[id];
    const auto vid = static_cast<ValueId>(id);
    if (v.kind == ValueKind::Input) {
      Tensor t = inputs.at(v.name);
      t.set_name(v.name);
      runner.env().emplace(Key{vid, nullptr}, std::move(t));
      initial.insert(Key{vid, nullptr});
    } else if (v.kind == ValueKind::Weight || v.kind == ValueKind::State) {
      const Tensor* t = v.kind == ValueKind::Weight ? weights_.find(v.name) : states_.find(v.name);
      if (t != nullptr) {
        runner.env().emplace(Key{vid, t->device()}, *t);
        initial.insert(Key{vid, t->device()});
      }
    }
  }
  const Lifetimes lifetimes = plan_lifetimes(graph, steps, initial, Homes(graph, steps, weights_, states_));

  const std::set<Device*> devices = devices_of(steps);
  for (Device* d : devices) {
    d->allocator().reset_peak();
    runner.per_device()[d].device = d->name();
  }

  for (size_t i = 0; i < steps.size(); ++i) {
    if (const auto* c = std::get_if<CopyStep>(&steps[i])) {
      runner.copy(i, *c, lifetimes.reads[i].at(0));
    } else {
      runner.compute(std::get<ComputeStep>(steps[i]), lifetimes.reads[i]);
    }
    // Erasing a weight, state or input handle frees nothing: their owners keep them.
    for (const Key& k : lifetimes.release_after[i]) runner.env().erase(k);
  }

  // Outputs that are host inputs need no copy.
  std::unordered_map<std::string, Tensor> results = std::move(runner.results());
  for (ValueId id : graph.outputs()) {
    const Value& v = graph.value(id);
    if (v.kind == ValueKind::Input) results.insert_or_assign(v.name, inputs.at(v.name));
  }
  std::vector<Device*> order(devices.begin(), devices.end());
  std::sort(order.begin(), order.end(), [](const Device* a, const Device* b) { return a->id() < b->id(); });
  for (Device* d : order) {
    DeviceRunStats ds = runner.per_device()[d];
    ds.peak_bytes = d->allocator().peak();
    stats_.devices.push_back(ds);
  }
  return results;
}

}  // namespace ferry
