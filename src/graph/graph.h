// The graph model code builds for one step: named values and ops, each op tagged with the module
// (placement unit) it belongs to. Building computes nothing and knows no devices.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "graph/op.h"

namespace ferry {

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t {
  Input,   // supplied by the caller per step, in host memory (token ids, positions)
  Weight,  // a model parameter, found by name in the loaded weights
  State,   // persistent per-module state the runtime owns (the KV cache), found by name
  Result,  // produced by a node
};

struct Value {
  ValueKind kind = ValueKind::Result;
  std::string name;  // unique in the graph
  DType dtype = DType::F32;
  Shape shape;
  int module = -1;    // Weight/State: the module that owns it; Result: the producing node's module
  int producer = -1;  // Result: index of the producing node
};

struct Node {
  Op op = Op::Copy;
  std::vector<ValueId> inputs;
  ValueId output = kNoValue;
  int module = -1;
  OpParams params;
};

class Graph {
 public:
  // Registers (or finds) a module by name; modules are the units a plan places.
  int module(const std::string& name);
  const std::vector<std::string>& modules() const { return modules_; }

  ValueId input(const std::string& name, DType dtype, const Shape& shape);
  ValueId weight(const std::string& name, DType dtype, const Shape& shape, int module);
  ValueId state(const std::string& name, DType dtype, const Shape& shape, int module);
  // Adds a node; the caller gives the result's dtype and shape (see GraphBuilder for inference).
  ValueId add_node(Op op, std::vector<ValueId> inputs, OpParams params, DType dtype, const Shape& shape,
                   const std::string& name, int module);
  void mark_output(ValueId value);
  // Replaces a node's parameters with new values of the same kind (Error(Usage) otherwise): what
  // changes from one step to the next (AttentionParams::kv_offset) without changing the structure,
  // so a runtime may keep what it planned for this graph.
  void set_params(int node, OpParams params);

  const std::vector<Value>& values() const { return values_; }
  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  ValueId find(const std::string& name) const;  // kNoValue if absent

 private:
  ValueId add_value(Value v);

  std::vector<std::string> modules_;
  std::unordered_map<std::string, int> module_index_;
  std::vector<Value> values_;
  std::unordered_map<std::string, ValueId> value_index_;
  std::vector<Node> nodes_;
  std::vector<ValueId> outputs_;
};

// Shape-inferring helpers for model code. Ops go to the current module (set_module).
// Every helper checks its inputs' shapes and throws Error(Shape) naming the op and the values.
class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& graph) : g_(graph) {}
  Graph& graph() { return g_; }

  void set_module(const std::string& module) { module_ = g_.module(module); }
  int current_module() const { return module_; }

  ValueId weight(const std::string& name, DType dtype, const Shape& shape) {
    return g_.weight(name, dtype, shape, module_);
  }
  ValueId state(const std::string& name, DType dtype, const Shape& shape) {
    return g_.state(name, dtype, shape, module_);
  }

  ValueId embedding(ValueId table, ValueId ids, const std::string& name);
  ValueId matmul(ValueId x, ValueId w, ValueId bias, const std::string& name);  // bias may be kNoValue
  ValueId add(ValueId a, ValueId b, const std::string& name);
  ValueId mul(ValueId a, ValueId b, const std::string& name);
  ValueId scale(ValueId x, float factor, const std::string& name);
  ValueId rms_norm(ValueId x, ValueId w, float eps, const std::string& name);
  ValueId layer_norm(ValueId x, ValueId w, ValueId b, float eps, const std::string& name);  // b may be kNoValue
  ValueId rope(ValueId x, ValueId positions, const RopeParams& p, const std::string& name);
  // kv_position (i32 [1], optional): the cache row this step writes first, read when the op runs
  // instead of p.kv_offset, so the same graph serves every step.
  ValueId attention(ValueId q, ValueId k, ValueId v, ValueId k_cache, ValueId v_cache, const AttentionParams& p,
                    const std::string& name, ValueId kv_position = kNoValue);
  ValueId silu(ValueId x, const std::string& name);
  ValueId gelu(ValueId x, const std::string& name);
  ValueId gelu_tanh(ValueId x, const std::string& name);
  ValueId swiglu(ValueId x, const std::string& name);                 // fused [T, 2F]
  ValueId swiglu(ValueId gate, ValueId up, const std::string& name);  // separate
  ValueId softmax(ValueId x, const std::string& name);
  ValueId concat(const std::vector<ValueId>& parts, int axis, const std::string& name);
  ValueId slice(ValueId x, int axis, int64_t start, int64_t length, const std::string& name);
  ValueId copy(ValueId x, const std::string& name);
  ValueId reshape(ValueId x, const Shape& shape, const std::string& name);  // same element count
  ValueId patchify(ValueId x, const PatchParams& p, const std::string& name);
  ValueId segment_attention(ValueId q, ValueId k, ValueId v, const SegmentAttentionParams& p, const std::string& name);

 private:
  const Value& v(ValueId id) const { return g_.value(id); }
  Graph& g_;
  int module_ = -1;
};

}  // namespace ferry
