#include "runtime/scheduler.h"

#include <set>
#include <utility>

#include "core/error.h"

namespace ferry {

std::string location_name(const Device* device) {
  return device ? device->name() : std::string("host");
}

size_t Schedule::n_copies() const {
  size_t n = 0;
  for (const auto& s : steps) n += std::holds_alternative<CopyStep>(s) ? 1 : 0;
  return n;
}

size_t Schedule::bytes_copied() const {
  size_t n = 0;
  for (const auto& s : steps) {
    if (const auto* c = std::get_if<CopyStep>(&s)) n += c->bytes;
  }
  return n;
}

size_t Schedule::n_device_copies() const {
  size_t n = 0;
  for (const auto& s : steps) {
    if (const auto* c = std::get_if<CopyStep>(&s)) n += (c->from && c->to) ? 1 : 0;
  }
  return n;
}

size_t Schedule::device_bytes_copied() const {
  size_t n = 0;
  for (const auto& s : steps) {
    if (const auto* c = std::get_if<CopyStep>(&s)) n += (c->from && c->to) ? c->bytes : 0;
  }
  return n;
}

std::string Schedule::describe() const {
  std::string out =
      fmt::format("schedule: {} splits, {} copies ({}), {} between devices ({})\n", n_splits(), n_copies(),
                  format_bytes(bytes_copied()), n_device_copies(), format_bytes(device_bytes_copied()));
  size_t last_split_end = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    const Split& sp = splits[i];
    out += fmt::format("## split #{} on {}: {} nodes, {} inputs ({})\n", i, location_name(sp.device), sp.n_nodes,
                       sp.n_copies, format_bytes(sp.input_bytes));
    for (size_t s = sp.first_step; s < sp.end_step; ++s) {
      if (const auto* c = std::get_if<CopyStep>(&steps[s])) {
        out += fmt::format("   input {} from {} ({}), first read by {}\n", c->value_name, location_name(c->from),
                           format_bytes(c->bytes), c->consumer_name);
      } else {
        const auto& n = std::get<ComputeStep>(steps[s]);
        out += fmt::format("   node  {} ({})\n", n.node_name, op_name(n.op));
      }
    }
    last_split_end = sp.end_step;
  }
  if (last_split_end < steps.size()) out += "## outputs to host\n";
  for (size_t s = last_split_end; s < steps.size(); ++s) {
    if (const auto* c = std::get_if<CopyStep>(&steps[s])) {
      out += fmt::format("   output {} from {} ({})\n", c->value_name, location_name(c->from), format_bytes(c->bytes));
    }
  }
  return out;
}

namespace {

size_t value_bytes(const Value& v) {
  const auto bytes = dtype_bytes(v.dtype, static_cast<uint64_t>(v.shape.numel()));
  if (!bytes)
    fail(ErrorKind::Shape, "value '{}' of shape {} does not fit dtype {}", v.name, v.shape.str(), dtype_name(v.dtype));
  return *bytes;
}

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType d : dtypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s;
}

class Scheduler {
 public:
  Scheduler(const Graph& graph, const Placement& placement, const WeightStore& weights, const StateStore& states,
            const ScheduleOptions& options)
      : graph_(graph), placement_(placement), weights_(weights), states_(states), options_(options) {}

  Schedule run() {
    // Inputs start on host (or where the caller keeps them), weights and state where they are
    // stored; a result's home is set when its node is scheduled, before anything reads it.
    homes_.assign(graph_.values().size(), nullptr);
    for (size_t id = 0; id < homes_.size(); ++id) {
      const Value& v = graph_.values()[id];
      if (v.kind == ValueKind::Input && id < options_.input_homes.size()) homes_[id] = options_.input_homes[id];
      const Tensor* t = v.kind == ValueKind::Weight  ? weights_.find(v.name)
                        : v.kind == ValueKind::State ? states_.find(v.name)
                                                     : nullptr;
      if (t != nullptr) homes_[id] = t->device();
    }
    for (size_t i = 0; i < graph_.nodes().size(); ++i) schedule_node(static_cast<int>(i));
    Schedule out;
    for (auto& pending : splits_) {
      Split sp = pending.split;
      sp.first_step = out.steps.size();
      for (auto& c : pending.copies) out.steps.emplace_back(std::move(c));
      for (auto& n : pending.computes) out.steps.emplace_back(std::move(n));
      sp.end_step = out.steps.size();
      out.splits.push_back(sp);
    }
    if (options_.outputs_to_host) add_output_copies(out);
    out.homes = std::move(homes_);
    return out;
  }

 private:
  struct PendingSplit {
    Split split;
    std::vector<CopyStep> copies;
    std::vector<ComputeStep> computes;
  };

  const std::string& module_name(int module) const { return graph_.modules().at(static_cast<size_t>(module)); }

  void check_stored(const Value& v, const Tensor* t, const Node& node, const Value& out, Device& device) const {
    const char* what = v.kind == ValueKind::Weight ? "weight" : "state";
    const std::string& owner = module_name(v.module);
    if (t == nullptr) {
      if (v.kind == ValueKind::Weight) {
        fail(ErrorKind::Usage,
             "op '{}' ({}) reads weight '{}' of module '{}', which is not loaded; load module '{}' onto {} before "
             "running",
             out.name, op_name(node.op), v.name, owner, owner, device.name());
      }
      fail(ErrorKind::Usage,
           "op '{}' ({}) reads state '{}' of module '{}', which does not exist; call StateStore::ensure(graph, "
           "placement) first (Executor::run does)",
           out.name, op_name(node.op), v.name, owner);
    }
    if (t->dtype() != v.dtype || !(t->shape() == v.shape)) {
      fail(ErrorKind::Shape, "op '{}' ({}) reads {} '{}' as {} {}, but the loaded tensor is {} {}", out.name,
           op_name(node.op), what, v.name, dtype_name(v.dtype), v.shape.str(), dtype_name(t->dtype()),
           t->shape().str());
    }
    if (t->device() != &device) {
      fail(ErrorKind::DeviceMismatch,
           "op '{}' ({}) of module '{}' runs on {} but reads {} '{}' (module '{}') on {}; {}s never move: place "
           "module '{}' on {} too, or load '{}' onto {}",
           out.name, op_name(node.op), module_name(node.module), device.name(), what, v.name, owner, t->device_name(),
           what, module_name(node.module), t->device_name(), v.name, device.name());
    }
  }

  void schedule_node(int index) {
    const Node& node = graph_.nodes()[static_cast<size_t>(index)];
    const Value& out = graph_.value(node.output);
    Device& device = placement_.device_of(module_name(node.module));
    homes_[static_cast<size_t>(node.output)] = &device;

    std::vector<DType> dtypes;
    for (ValueId in : node.inputs) {
      const Value& v = graph_.value(in);
      if (v.kind == ValueKind::Weight) check_stored(v, weights_.find(v.name), node, out, device);
      if (v.kind == ValueKind::State) check_stored(v, states_.find(v.name), node, out, device);
      dtypes.push_back(v.dtype);
    }
    if (!device.supports(node.op, dtypes)) {
      fail(ErrorKind::Unsupported,
           "op '{}' ({}) of module '{}' cannot run on {}: its kernels do not support input dtypes ({}); store the "
           "weights in a supported dtype or place the module on another device",
           out.name, op_name(node.op), module_name(node.module), device.name(), dtype_list(dtypes));
    }

    if (splits_.empty() || splits_.back().split.device != &device) {
      splits_.push_back(PendingSplit{});
      splits_.back().split.device = &device;
    }
    PendingSplit& split = splits_.back();
    for (ValueId in : node.inputs) {
      Device* from = homes_[static_cast<size_t>(in)];
      if (from == &device || !copied_.emplace(in, &device).second) continue;
      const Value& v = graph_.value(in);
      const size_t bytes = value_bytes(v);
      split.copies.push_back(CopyStep{in, v.name, from, &device, bytes, index, out.name});
      split.split.n_copies++;
      split.split.input_bytes += bytes;
    }
    split.computes.push_back(ComputeStep{index, out.name, node.op, &device, value_bytes(out)});
    split.split.n_nodes++;
  }

  void add_output_copies(Schedule& out) const {
    std::set<ValueId> seen;
    for (ValueId id : graph_.outputs()) {
      if (!seen.insert(id).second) continue;
      const Value& v = graph_.value(id);
      if ((v.kind == ValueKind::Weight && !weights_.find(v.name)) ||
          (v.kind == ValueKind::State && !states_.find(v.name))) {
        fail(ErrorKind::Usage, "graph output '{}' is not loaded", v.name);
      }
      Device* from = homes_[static_cast<size_t>(id)];
      if (from == nullptr) continue;  // already in host memory
      out.steps.emplace_back(CopyStep{id, v.name, from, nullptr, value_bytes(v), -1, "output"});
    }
  }

  const Graph& graph_;
  const Placement& placement_;
  const WeightStore& weights_;
  const StateStore& states_;
  const ScheduleOptions& options_;
  std::vector<Device*> homes_;  // by ValueId
  std::set<std::pair<ValueId, Device*>> copied_;
  std::vector<PendingSplit> splits_;
};

}  // namespace

Schedule schedule(const Graph& graph, const Placement& placement, const WeightStore& weights, const StateStore& states,
                  const ScheduleOptions& options) {
  return Scheduler(graph, placement, weights, states, options).run();
}

}  // namespace ferry
