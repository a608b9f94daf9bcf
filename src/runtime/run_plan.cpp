#include "runtime/run_plan.h"

#include <utility>

#include "core/error.h"

namespace ferry {

namespace {

// The slots made so far, found by (value, location). A value has few locations (its home and a copy
// per device that reads it), so each value keeps a short list.
class SlotTable {
 public:
  SlotTable(const Graph& graph, const std::vector<Device*>& homes, std::vector<Slot>& slots)
      : graph_(graph), homes_(homes), slots_(slots), by_value_(graph.values().size()) {}

  int32_t find(ValueId value, Device* location) const {
    for (const auto& [at, slot] : by_value_[static_cast<size_t>(value)]) {
      if (at == location) return slot;
    }
    return kNoSlot;
  }

  // An existing slot, or one for a tensor that exists before the run starts (an input where the
  // caller keeps it, a weight or state where it is stored); kNoSlot if neither.
  int32_t find_or_initial(ValueId value, Device* location) {
    const int32_t slot = find(value, location);
    if (slot != kNoSlot) return slot;
    const Value& v = graph_.value(value);
    if (v.kind == ValueKind::Input && location == homes_[static_cast<size_t>(value)])
      return add(value, location, SlotKind::Input);
    const bool stored = v.kind == ValueKind::Weight || v.kind == ValueKind::State;
    if (stored && location != nullptr && location == homes_[static_cast<size_t>(value)])
      return add(value, location, SlotKind::Stored);
    return kNoSlot;
  }

  int32_t add(ValueId value, Device* location, SlotKind kind) {
    const auto slot = static_cast<int32_t>(slots_.size());
    slots_.push_back(Slot{value, location, kind});
    by_value_[static_cast<size_t>(value)].emplace_back(location, slot);
    return slot;
  }

 private:
  const Graph& graph_;
  const std::vector<Device*>& homes_;
  std::vector<Slot>& slots_;
  std::vector<std::vector<std::pair<Device*, int32_t>>> by_value_;
};

}  // namespace

RunPlan plan_run(const Graph& graph, std::vector<ScheduleStep> steps, const std::vector<Device*>& homes,
                 bool keep_outputs) {
  RunPlan plan;
  plan.steps = std::move(steps);
  plan.step_slots.resize(plan.steps.size());
  SlotTable table(graph, homes, plan.slots);
  std::vector<size_t> last_use;  // by slot

  const auto read = [&](size_t step, ValueId value, Device* location) {
    const int32_t slot = table.find_or_initial(value, location);
    if (slot == kNoSlot) {
      fail(ErrorKind::Internal, "step {} reads '{}' on {}, which no earlier step produced", step,
           graph.value(value).name, location_name(location));
    }
    last_use.resize(plan.slots.size(), 0);
    last_use[static_cast<size_t>(slot)] = step;
    plan.step_slots[step].reads.push_back(slot);
  };
  const auto produce = [&](size_t step, ValueId value, Device* location) {
    const int32_t slot = table.add(value, location, SlotKind::Produced);
    last_use.resize(plan.slots.size(), 0);
    last_use[static_cast<size_t>(slot)] = step;  // a result nobody reads is released right away
    plan.step_slots[step].writes = slot;
  };

  for (size_t i = 0; i < plan.steps.size(); ++i) {
    if (const auto* c = std::get_if<CopyStep>(&plan.steps[i])) {
      read(i, c->value, c->from);
      if (c->to != nullptr) produce(i, c->value, c->to);  // a copy to host lands in the caller's tensor
    } else {
      const auto& cs = std::get<ComputeStep>(plan.steps[i]);
      const Node& node = graph.nodes()[static_cast<size_t>(cs.node)];
      for (ValueId in : node.inputs) {
        const bool local = table.find_or_initial(in, cs.device) != kNoSlot;
        read(i, in, local ? cs.device : homes[static_cast<size_t>(in)]);
      }
      produce(i, node.output, cs.device);
    }
  }
  last_use.resize(plan.slots.size(), 0);
  std::vector<bool> kept(plan.slots.size(), false);
  if (keep_outputs) {
    for (ValueId id : graph.outputs()) {
      int32_t slot = table.find(id, homes[static_cast<size_t>(id)]);
      if (slot != kNoSlot && plan.slots[static_cast<size_t>(slot)].kind != SlotKind::Produced) slot = kNoSlot;
      if (slot != kNoSlot) kept[static_cast<size_t>(slot)] = true;
      plan.output_slots.push_back(slot);
    }
  }
  for (size_t s = 0; s < plan.slots.size(); ++s) {
    if (plan.slots[s].kind == SlotKind::Stored || kept[s]) continue;  // its store, or the caller, keeps it
    plan.step_slots[last_use[s]].release_after.push_back(static_cast<int32_t>(s));
  }
  return plan;
}

}  // namespace ferry
